package balancer

import "math"

// Co-location: nodes that announce the same Host (records.Profile.Host) share one
// machine's cores. Each node's measured speed is what it computes with the machine to
// itself; when several of a plan's nodes compute at once they split it. The planner
// prices that with a share per node:
//
//	load_i = h_i + E_i + Σ_{j≠i on i's host, in the plan} u_j·h_j,   speed_i = s_i / max(1, load_i)
//
// where s_i is node i's measured speed, h_i the fraction of its host's cores it keeps busy
// while it computes (Node.HostShare: 1, or 1/k for a node whose emulated slowdown k
// sleeps (k−1)/k of its kernels' time), E_i the load other programs put on its host
// (Node.HostLoad, in cores) and u_j the fraction of a step that node j computes. Replicas on one host compute together all step long (u near 1); a pipeline's
// stages on one host overlap only in the steady part of the schedule (u is their compute
// over the step). u depends on the shared speeds, so the shares are a fixed point, found
// by damped iteration from "everyone computes all the time". The shares do not depend on
// the speeds' scale: scaling every speed of a plan scales its compute alone.
//
// The share is an average over the step, so it is priced in a pipeline's fill and drain
// too, where a stage computes alone: two equal stages of one replica on one host are
// priced about 12% above their compute in series (balancer/colocation_test.go).

// colocationRounds is the number of damped iterations of the shares' fixed point.
const colocationRounds = 8

// hostGroups fills in.host (each node's host index; a node that names no host is a host
// of its own), in.hostShare and in.hostLoad.
func (in *instance) hostGroups(nodes []Node) {
	index := map[string]int{}
	in.host, in.hostShare, in.hostLoad = make([]int, len(nodes)), make([]float64, len(nodes)), make([]float64, len(nodes))
	for i, nd := range nodes {
		h, ok := index[nd.Host]
		if !ok || nd.Host == "" {
			h = i // a new host is named by its first node
			if nd.Host != "" {
				index[nd.Host] = h
			}
		}
		in.host[i], in.hostShare[i] = h, nd.HostShare
		if !(nd.HostShare > 0) || nd.HostShare > 1 {
			in.hostShare[i] = 1
		}
		if nd.HostLoad > 0 && !math.IsInf(nd.HostLoad, 1) {
			in.hostLoad[i] = nd.HostLoad
		}
	}
}

// shared returns the instance d is priced on: in itself when no host runs two of d's
// nodes and none carries other programs' load, else a copy whose speeds are what d's nodes
// deliver while sharing their hosts. Every sum runs in the draft's node order, so the same
// draft always gets the same speeds.
func (in *instance) shared(d draft) *instance {
	nodes := planNodes(d)
	if !in.colocated(nodes) && !in.loaded(nodes) {
		return in
	}
	cp := *in
	cp.speed = append([]float64(nil), in.speed...)
	busy := make([]float64, in.n) // fraction of the step each node computes
	for _, nd := range nodes {
		busy[nd] = 1
	}
	for round := 0; ; round++ {
		for _, nd := range nodes {
			load := in.hostShare[nd] + in.hostLoad[nd]
			for _, j := range nodes {
				if j != nd && in.host[j] == in.host[nd] {
					load += busy[j] * in.hostShare[j]
				}
			}
			cp.speed[nd] = in.speed[nd] / math.Max(1, load)
		}
		if round == colocationRounds {
			return &cp
		}
		u := cp.busyFractions(d)
		for _, nd := range nodes {
			busy[nd] = (busy[nd] + u[nd]) / 2
		}
	}
}

// planNodes lists d's nodes, replica by replica, stage by stage.
func planNodes(d draft) []int {
	var out []int
	for _, r := range d.replicas {
		out = append(out, r.nodes...)
	}
	return out
}

// loaded reports whether a host of nodes carries other programs' load.
func (in *instance) loaded(nodes []int) bool {
	for _, nd := range nodes {
		if in.hostLoad[nd] > 0 {
			return true
		}
	}
	return false
}

// colocated reports whether some host runs two or more of nodes.
func (in *instance) colocated(nodes []int) bool {
	seen := map[int]bool{}
	for _, nd := range nodes {
		if seen[in.host[nd]] {
			return true
		}
		seen[in.host[nd]] = true
	}
	return false
}

// busyFractions is, by node index, each of d's nodes' compute per step over the step
// time (at most 1), from the planner's closed form on in's speeds.
func (in *instance) busyFractions(d draft) []float64 {
	out := make([]float64, in.n)
	step := in.estimateStepAlone(d)
	if !(step > 0) {
		return out
	}
	for _, r := range d.replicas {
		S, mr := len(r.nodes), r.micro(d.m)
		buf := make([]float64, 4*S)
		c, comm, xmax, send := buf[:S], buf[S:2*S], buf[2*S:3*S], buf[3*S:]
		in.pipelineTimes(r, float64(r.batch)/float64(mr), c, comm, xmax, send)
		for s, nd := range r.nodes {
			out[nd] = math.Min(1, float64(mr)*c[s]/step)
		}
	}
	return out
}
