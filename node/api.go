package node

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/dataplane"
)

// Status returns what GET /v1/status serves.
func (n *Node) Status() api.Status {
	v := api.Status{ID: n.ID().String(), Mesh: n.cfg.Mesh, Addrs: []string{}, Profile: n.mesh.Profile(),
		Version: n.cfg.Version, StartedAt: n.startAt}
	for _, a := range n.mesh.Addrs() {
		v.Addrs = append(v.Addrs, a.String())
	}
	for _, p := range n.mesh.Peers() {
		if p.State != mesh.StateDead {
			v.Peers++
		}
	}
	return v
}

// Peers returns what GET /v1/peers serves.
func (n *Node) Peers() []api.Peer {
	out := []api.Peer{}
	dp := n.DataPlane()
	var paths map[string]map[string]dataplane.Traffic
	if dp != nil {
		paths = dp.Stats().Paths
	}
	for _, p := range n.mesh.Peers() {
		v := api.Peer{ID: p.ID.String(), Addrs: []string{}, State: p.State, LastSeen: p.LastSeen.UTC(), Profile: p.Profile,
			ProbeError: p.Link.Err, LinkSource: string(p.Link.Source)}
		for _, a := range p.Addrs {
			v.Addrs = append(v.Addrs, a.String())
		}
		for _, l := range p.Links {
			if l.Source == mesh.LinkDataPlane {
				v.DataAddr = l.Addr
			}
		}
		if dp != nil {
			v.Path = dp.Path(v.ID)
		}
		for kind, t := range paths[v.ID] {
			if v.PathBytes == nil {
				v.PathBytes = map[string]int64{}
			}
			v.PathBytes[kind] = t.Bytes
		}
		if p.Link.RTT > 0 {
			ms := float64(p.Link.RTT.Microseconds()) / 1000
			v.RTTMs = &ms
		}
		if p.Link.BandwidthBps > 0 {
			mbps := p.Link.BandwidthBps * 8 / 1e6
			v.BandwidthMbps = &mbps
		}
		if !p.Link.MeasuredAt.IsZero() {
			at := p.Link.MeasuredAt.UTC()
			v.ProbedAt = &at
		}
		if c := n.Consensus(); c != nil {
			if proof, ok := c.FSM().SpeedProof(v.ID); ok {
				v.ProvedGFLOPS, v.SpeedLie = &proof.GFLOPS, proof.Wrong
			}
		}
		out = append(out, v)
	}
	return out
}

func (n *Node) routes() {
	n.mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, n.Status()) })
	n.mux.HandleFunc("GET /v1/peers", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, n.Peers()) })
	n.mux.Handle("GET /metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
