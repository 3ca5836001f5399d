package node

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/node/fingerprint"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/node/runner"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// schedule runs the scheduler over the jobs and the peer table, and commits its decisions.
func (e *engine) schedule(c *consensus.Consensus, jobs []consensus.Job) {
	st := clusterState{jobs: runner.JobViews(jobs), members: e.n.members(), self: e.n.ID().String(), now: time.Now()}
	if firstPlanPending(st.jobs) {
		// A first plan is priced with what other programs leave this host's nodes now
		// (hostload.go); the calibration keeps it only for nodes not measured yet.
		if p := e.n.mesh.Profile(); p != nil && p.Host != "" {
			load := e.hostLoad.current(st.now)
			withHostLoad(st.members, p.Host, load)
			e.log.Debug("host load measured for planning", "cores", fmt.Sprintf("%.2f", load))
		}
	}
	for _, d := range e.sched.Evaluate(st) {
		log := e.log.With("job", d.Job, "decision", d.Kind)
		if !d.Commits() {
			log.Debug("no new epoch", "reason", d.Reason)
			continue
		}
		epoch, err := scheduler.Apply(e.ctx, committer{c}, d)
		switch {
		case err != nil:
			log.Warn("commit decision", "reason", d.Reason, "err", err)
		case d.Kind == scheduler.DecisionFail:
			log.Warn("job failed", "reason", d.Reason)
		case d.Kind == scheduler.DecisionWait:
			log.Info("first plan waits", "reason", d.Reason)
		case d.Kind == scheduler.DecisionPlan:
			log.Info("plan committed", "epoch", epoch, "strategy", d.Plan.Strategy, "replicas", len(d.Plan.Replicas), "predicted_step_s", d.Plan.PredictedStepS)
		default:
			log.Info("replanned", "epoch", epoch, "reason", d.Reason)
		}
	}
}

// clusterState is the scheduler's State at one moment.
type clusterState struct {
	jobs    []scheduler.Job
	members []scheduler.Member
	self    string
	now     time.Time
}

func (s clusterState) Jobs() []scheduler.Job       { return s.jobs }
func (s clusterState) Members() []scheduler.Member { return s.members }
func (s clusterState) Self() string                { return s.self }
func (s clusterState) Now() time.Time              { return s.now }

// members are this node (alive) and its peers as the peer table sees them, with the
// profiles the balancer may plan on: a peer's speed capped by what it proved to the
// leader (speedcheck.go; none without a proof, and then its proof is pending if its
// profile could be planned), except the leader's own.
func (n *Node) members() []scheduler.Member {
	out := []scheduler.Member{{ID: n.ID().String(), State: scheduler.MemberAlive, Profile: planProfile(n.mesh.Profile())}}
	c := n.Consensus()
	var leader peer.ID
	if c != nil {
		leader = c.Leader()
	}
	for _, pi := range n.mesh.Peers() {
		var proof consensus.SpeedProof
		ok := false
		if c != nil {
			proof, ok = c.FSM().SpeedProof(pi.ID.String())
		}
		trusted := pi.ID == leader
		out = append(out, scheduler.Member{ID: pi.ID.String(), State: scheduler.MemberState(pi.State),
			Profile:      provenProfile(pi.Profile, proof, ok, trusted, n.cfg.speedProofSlack),
			ProofPending: proofPending(pi.Profile, proof, ok, trusted, n.speed.lateAnswers(pi.ID))})
	}
	return out
}

// planProfile is what the balancer prices of a profile: nil unless it has a measured GEMM
// rate, a memory budget and a data-plane address, and passes mesh.Profile.Validate. A
// profile out of bounds (1e300 GFLOP/s, 2^64−1 bytes, a link with rtt −1) leaves its node
// out of plans instead of making every plan of the snapshot fail.
func planProfile(p *mesh.Profile) *scheduler.Profile {
	if p == nil || p.GemmGFLOPS <= 0 || p.MemoryBudgetBytes <= 0 || p.DataAddr == "" || p.Validate() != nil {
		return nil
	}
	free := p.DiskFreeBytes // offload plans stay within it, less a reserve
	// The host share is what the profile measured a training step to keep busy
	// (TrainHostShare). It was once left at 1 for every node: an emulated slowdown then
	// charged its factor on other programs' contention too, so a slowed node's relief to
	// co-located nodes was far smaller than its sleeps promised, and plans pairing fast
	// nodes with the slowest ran 0.40–0.79 s/step (docs/testnet.md). The emulation now
	// charges a kernel's uncontended time, and a fast node's share is measured (0.62 of
	// the development machine's 2 cores), where a whole share charged two co-located
	// nodes 2× for the 1.25× they cost each other.
	out := &scheduler.Profile{GFLOPS: fingerprint.ComputeGFLOPS(p), MemoryBytes: int64(p.MemoryBudgetBytes),
		DiskReadBps: p.DiskReadBps, DiskWriteBps: p.DiskWriteBps, LocalData: p.LocalData, DiskFreeBytes: &free, Host: p.Host,
		MicroEfficiency: fingerprint.MicroEfficiency(p), HostShare: fingerprint.HostShare(p)}
	for _, l := range p.Links {
		out.Links = append(out.Links, scheduler.Link{Peer: l.Peer, RTTSeconds: l.RTTSeconds, BandwidthBps: l.BandwidthBps})
	}
	return out
}

// schedulerConfig prices sync traffic with the engine's codecs and checks plans with the
// engine's own check.
func schedulerConfig() scheduler.Config {
	return scheduler.Config{Compression: codecCompression, CheckPlan: func(p scheduler.JobPlan, numLayers int) error {
		return runner.EnginePlan(p).Validate(numLayers)
	}}
}

// codecCompression is the size ratio of a codec against float32, for the balancer's
// sync-cost estimate.
func codecCompression(codec jobspec.Codec) float64 {
	switch codec {
	case jobspec.CodecFP16:
		return 2
	case jobspec.CodecInt8:
		return 4 / (1 + 4.0/float64(parallel.Int8Block))
	case jobspec.CodecTopK:
		return 1 / (2 * parallel.DefaultSyncConfig().TopKFraction)
	}
	return 1
}

// committer writes the scheduler's decisions through the control plane.
type committer struct{ c *consensus.Consensus }

func (m committer) SetJobStatus(ctx context.Context, id string, s jobspec.JobStatus, msg string) error {
	return m.c.SetJobStatus(ctx, id, s, msg)
}

func (m committer) SetPlan(ctx context.Context, id string, p scheduler.JobPlan, reason string) (uint64, error) {
	raw, err := json.Marshal(p)
	if err != nil {
		return 0, fmt.Errorf("encode plan: %w", err)
	}
	return m.c.SetPlan(ctx, id, raw, reason)
}

func (m committer) AddEvent(ctx context.Context, id string, ev scheduler.Event) error {
	return m.c.AddEvent(ctx, id, consensus.NewEvent(ev.Kind, ev.Epoch, ev.Step, ev.Message))
}
