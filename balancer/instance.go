package balancer

import (
	"fmt"
	"math"
	"sort"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// instance is a Snapshot and a Job validated and flattened into dense arrays: node
// capabilities by index, an n×n link matrix, and prefix sums of the layer costs.
type instance struct {
	job   Job
	ids   []string
	index map[string]int
	speed []float64 // FLOP/s
	mem   []float64 // bytes
	n     int
	bw    []float64 // n×n bytes/s, +Inf on the diagonal
	lat   []float64 // n×n one-way seconds
	L     int
	// Prefix sums over layers (index i covers layers [0, i)).
	flops, fwd, bwd, static, saved []float64
	out                            []float64 // per layer: bytes per token crossing its output boundary
	prevSmaller                    []int     // per layer: the last earlier layer with strictly smaller out, or -1
	params                         []float64 // per layer: parameter bytes (the sync payload before compression)
	tokens                         float64   // context
	tiedTable                      float64   // a tied head's table bytes (model.LayerCost.TiedTableBytes), else 0
	inner                          float64   // steps per sync
	audit                          float64   // Sync.Audit
	auditAuto                      bool      // Sync.AuditAuto
	everyNodeGrouping              bool      // auto's unaudited choice also weighs auditableGrouping
	fragments                      float64   // sync events per outer period (streaming)
	compress                       float64
	sched                          jobspec.Schedule
	// Recomputation and offload (memory.go): fwdR is the prefix sum of the forward FLOPs a
	// recomputing stage repeats (its layers that save activations), kept of those layers'
	// outputs, savedMax the largest layer's saved activations, staticMax the largest
	// layer's training state; pb, gb and opt are prefix sums of parameter, gradient and
	// optimizer bytes. allowRecompute and allowOffload are the planning tier's allowances
	// (planTiers); forceRecompute is memory.recompute: on.
	fwdR, kept, pb, gb, opt                      []float64
	flopsRC                                      []float64 // flops plus fwdR: every stage recomputing
	savedMax, staticMax                          rangeMax
	allowRecompute, allowOffload, forceRecompute bool
	zero                                         int       // the job's ZeRO stage where it applies (sync mode), else 0
	diskRead, diskWrite                          []float64 // per node, bytes/s
	diskRoom                                     []float64 // per node, bytes an offload may take (Node.diskRoom)
	// host is each node's host index (colocation.go), hostShare the share of its host's
	// cores each node keeps busy while it computes.
	host      []int
	hostShare []float64
	hostLoad  []float64 // Node.HostLoad, 0 where none
	// microEff is each node's micro-batch efficiency (Node.MicroEfficiency, micro.go), 1
	// where none was measured or the node computes on its GPU.
	microEff []float64
}

func newInstance(snap Snapshot, job Job) (*instance, error) {
	if err := job.Validate(); err != nil {
		return nil, err
	}
	if len(snap.Nodes) == 0 {
		return nil, infeasible("nodes", 1, 0, "no nodes: a plan needs at least one node with a measured speed and memory to hold %d layers", len(job.Layers))
	}
	in := &instance{job: job, n: len(snap.Nodes), L: len(job.Layers), index: map[string]int{}}
	if err := in.addNodes(snap.Nodes); err != nil {
		return nil, err
	}
	if err := in.addLinks(snap.Links); err != nil {
		return nil, err
	}
	in.addLayers(job)
	return in, nil
}

func (in *instance) addNodes(nodes []Node) error {
	for i, nd := range nodes {
		if nd.ID == "" {
			return fmt.Errorf("node %d: id is empty", i)
		}
		if _, dup := in.index[nd.ID]; dup {
			return fmt.Errorf("node %q: listed twice", nd.ID)
		}
		sp, mem := nd.capability()
		if !(sp > 0) || math.IsInf(sp, 0) {
			return infeasible("speed", 1, sp/1e9, "node %q: measured GEMM speed is %g GFLOP/s; it must be > 0 (re-run its profile or leave it out)", nd.ID, sp/1e9)
		}
		if !(mem > 0) {
			return infeasible("memory", 1, mem, "node %q: memory budget is %g bytes; it must be > 0", nd.ID, mem)
		}
		in.index[nd.ID] = i
		in.ids = append(in.ids, nd.ID)
		in.speed = append(in.speed, sp)
		in.mem = append(in.mem, mem)
		in.microEff = append(in.microEff, nd.microEfficiency())
		rd, wr, err := nd.disk()
		if err != nil {
			return err
		}
		in.diskRead, in.diskWrite = append(in.diskRead, rd), append(in.diskWrite, wr)
		in.diskRoom = append(in.diskRoom, nd.diskRoom())
	}
	in.hostGroups(nodes)
	return nil
}

// addLinks fills the link matrix; missing pairs get the worst measured bandwidth and RTT.
func (in *instance) addLinks(links []Link) error {
	n := in.n
	in.bw, in.lat = make([]float64, n*n), make([]float64, n*n)
	worstBW, worstLat := math.Inf(1), 0.0
	for _, l := range links {
		a, okA := in.index[l.From]
		b, okB := in.index[l.To]
		if !okA || !okB {
			continue // a link to a node outside the snapshot does not matter
		}
		if !(l.Bandwidth > 0) || l.RTT < 0 || math.IsNaN(l.RTT) {
			return fmt.Errorf("link %s→%s: bandwidth must be > 0 and rtt ≥ 0 (got %g B/s, %g s)", l.From, l.To, l.Bandwidth, l.RTT)
		}
		in.bw[a*n+b], in.lat[a*n+b] = l.Bandwidth, l.RTT/2
		worstBW, worstLat = math.Min(worstBW, l.Bandwidth), math.Max(worstLat, l.RTT/2)
	}
	if math.IsInf(worstBW, 1) {
		worstBW, worstLat = 100e6/8, 0.05
	}
	for a := 0; a < n; a++ {
		for b := 0; b < n; b++ {
			switch {
			case a == b:
				in.bw[a*n+b], in.lat[a*n+b] = math.Inf(1), 0
			case in.bw[a*n+b] == 0:
				in.bw[a*n+b], in.lat[a*n+b] = worstBW, worstLat
			}
		}
	}
	return nil
}

func (in *instance) addLayers(job Job) {
	L := in.L
	in.flops, in.fwd, in.bwd = make([]float64, L+1), make([]float64, L+1), make([]float64, L+1)
	in.static, in.saved = make([]float64, L+1), make([]float64, L+1)
	in.out, in.params, in.prevSmaller = make([]float64, L), make([]float64, L), make([]int, L)
	for i, c := range job.Layers {
		in.fwd[i+1] = in.fwd[i] + c.ForwardFLOPsPerToken
		in.bwd[i+1] = in.bwd[i] + c.BackwardFLOPsPerToken
		in.flops[i+1] = in.flops[i] + c.FLOPsPerToken()
		in.static[i+1] = in.static[i] + float64(c.StaticBytes())
		in.saved[i+1] = in.saved[i] + float64(c.SavedBytesPerToken)
		in.out[i] = float64(c.OutputBytesPerToken)
		in.params[i] = float64(c.ParamBytes)
		p := i - 1
		for p >= 0 && in.out[p] >= in.out[i] {
			p = in.prevSmaller[p]
		}
		in.prevSmaller[i] = p
	}
	in.addMemoryCosts(job)
	if L > 0 {
		in.tiedTable = float64(job.Layers[L-1].TiedTableBytes)
	}
	in.tokens = float64(job.Context)
	in.sched = job.Schedule
	if in.sched == "" {
		in.sched = jobspec.Schedule1F1B
	}
	in.compress = job.Sync.Compression
	if in.compress == 0 {
		in.compress = 1
	}
	in.audit, in.auditAuto = job.Sync.Audit, job.Sync.AuditAuto
	in.inner, in.fragments = 1, 1
	if job.Sync.Mode == jobspec.SyncStreaming && job.Sync.Fragments > 1 {
		in.fragments = float64(job.Sync.Fragments)
	}
	if job.Sync.Mode != jobspec.SyncEveryStep {
		in.inner = float64(job.Sync.InnerSteps)
		if in.inner == 0 {
			in.inner = 100
		}
	}
}

// link returns the serialisation rate and one-way latency from node a to node b.
func (in *instance) link(a, b int) (bw, lat float64) { return in.bw[a*in.n+b], in.lat[a*in.n+b] }

// memoryOrder returns node indices by decreasing memory (ties: faster first, then by ID):
// the front of a 1F1B pipeline holds the most in-flight activations.
func (in *instance) memoryOrder(nodes []int) []int {
	order := append([]int(nil), nodes...)
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if in.mem[a] != in.mem[b] {
			return in.mem[a] > in.mem[b]
		}
		if in.speed[a] != in.speed[b] {
			return in.speed[a] > in.speed[b]
		}
		return in.ids[a] < in.ids[b]
	})
	return order
}

func (in *instance) allNodes() []int {
	all := make([]int, in.n)
	for i := range all {
		all[i] = i
	}
	return all
}

// addMemoryCosts fills the prefix sums recomputation, ZeRO and offload are priced with.
func (in *instance) addMemoryCosts(job Job) {
	L := in.L
	in.fwdR, in.kept = make([]float64, L+1), make([]float64, L+1)
	in.pb, in.gb, in.opt = make([]float64, L+1), make([]float64, L+1), make([]float64, L+1)
	saved, static := make([]float64, L), make([]float64, L)
	for i, c := range job.Layers {
		extra, kept := 0.0, 0.0
		if c.SavedBytesPerToken > 0 { // a layer that saves activations recomputes them
			extra, kept = c.ForwardFLOPsPerToken, float64(c.OutputBytesPerToken)
		}
		in.fwdR[i+1], in.kept[i+1] = in.fwdR[i]+extra, in.kept[i]+kept
		in.pb[i+1] = in.pb[i] + float64(c.ParamBytes)
		in.gb[i+1] = in.gb[i] + float64(c.GradBytes)
		in.opt[i+1] = in.opt[i] + float64(c.OptimizerBytes)
		saved[i], static[i] = float64(c.SavedBytesPerToken), float64(c.StaticBytes())
	}
	in.savedMax, in.staticMax = newRangeMax(saved), newRangeMax(static)
	in.flopsRC = make([]float64, L+1)
	for i := range in.flopsRC {
		in.flopsRC[i] = in.flops[i] + in.fwdR[i]
	}
	in.forceRecompute = job.Recompute == jobspec.RecomputeOn
	if job.Sync.Mode == jobspec.SyncEveryStep {
		in.zero = job.Zero
	}
}
