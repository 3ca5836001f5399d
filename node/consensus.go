package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/mesh"
)

// ConsensusConfig configures the node's member of the Raft control plane. The zero value
// runs it with the defaults.
type ConsensusConfig struct {
	// Disabled turns the control plane off: the job API then answers 503.
	Disabled bool
	// Bootstrap (--bootstrap-raft) founds a new Raft cluster. Without it a node founds one
	// only when it is started with no --bootstrap peers. Either way, only a node with no
	// Raft state yet bootstraps.
	Bootstrap bool
	// Voters (--voters) is the number of voting members the leader keeps; later nodes are
	// non-voters. Zero means 3; it must be odd.
	Voters int
	// Probation (--raft-probation) is how long the leader watches a live non-voter before
	// promoting it automatically; zero means consensus.DefaultProbation.
	Probation time.Duration
	// ReconcileInterval is how often the mesh's live and dead members are fed to the
	// leader. Zero means the heartbeat interval.
	ReconcileInterval time.Duration
	// Raft tunes the raft timers; zero fields mean consensus.DefaultConfig's.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	// KeepFinishedJobs (jobs.keep) is how many finished jobs the control plane keeps; the
	// leader commits it for the whole cluster. Zero means consensus.DefaultKeepFinishedJobs.
	KeepFinishedJobs int
	// MaxLiveJobsPerMember (--max-live-jobs) is how many live jobs one member may have,
	// if this node founds the cluster (the founding leader's value is replicated and kept).
	// Zero means consensus.DefaultMaxLiveJobsPerMember.
	MaxLiveJobsPerMember int
}

// addConsensus adds the control plane's service (before the API, which New appends last)
// and the job API's routes. New calls it.
func (n *Node) addConsensus() error {
	if v := n.cfg.Consensus.Voters; v < 0 || (v > 0 && v%2 == 0) {
		return fmt.Errorf("voters: must be odd and ≥ 1 (got %d)", v)
	}
	s := &consensusService{n: n, done: make(chan struct{})}
	n.cons = s
	n.jobRoutes(s)
	if !n.cfg.Consensus.Disabled {
		n.services = append(n.services, s)
	}
	return nil
}

// Consensus is the node's Raft member, nil before Start or when disabled.
func (n *Node) Consensus() *consensus.Consensus {
	if n.cons == nil {
		return nil
	}
	return n.cons.get()
}

// consensusService runs consensus.Consensus on the mesh's (admission-guarded) host and
// feeds it the mesh's membership.
type consensusService struct {
	n    *Node
	done chan struct{}
	wg   sync.WaitGroup

	mu sync.Mutex
	c  *consensus.Consensus
}

func (s *consensusService) Name() string { return "consensus" }

func (s *consensusService) get() *consensus.Consensus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

func (s *consensusService) config() consensus.Config {
	cfg, cc := s.n.cfg, s.n.cfg.Consensus
	return consensus.Config{
		DataDir:   cfg.DataDir,
		Bootstrap: cc.Bootstrap || len(cfg.Bootstrap) == 0,
		Voters:    cc.Voters,
		Probation: cc.Probation,
		Profile:   profileSummary(s.n.mesh.Profile()),
		Logger:    s.n.log.With("component", "consensus"),

		HeartbeatTimeout:     cc.HeartbeatTimeout,
		ElectionTimeout:      cc.ElectionTimeout,
		LeaderLeaseTimeout:   cc.LeaderLeaseTimeout,
		KeepFinishedJobs:     cc.KeepFinishedJobs,
		MaxLiveJobsPerMember: cc.MaxLiveJobsPerMember,
	}
}

func (s *consensusService) Start(context.Context) error {
	c, err := consensus.New(s.config(), s.n.mesh.Host())
	if err != nil {
		return fmt.Errorf("consensus: %w", err)
	}
	if e := s.n.engine; e != nil {
		// As leader, this node checks the offender evidence plan members ship with its
		// own engine (docs/security.md, "Verifiable offender evidence").
		c.SetEvidenceJudge(e.runner.JudgeEvidence)
		c.SetEvidenceFetcher(s.n.fetchEvidence) // evidence too large for the RPC: a blob
	}
	s.mu.Lock()
	s.c = c
	s.mu.Unlock()
	every := s.n.cfg.Consensus.ReconcileInterval
	if every <= 0 {
		every = s.n.cfg.Heartbeat
	}
	if every <= 0 {
		every = 2 * time.Second
	}
	s.wg.Add(1)
	go s.reconcileLoop(c, every)
	return nil
}

func (s *consensusService) reconcileLoop(c *consensus.Consensus, every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*every+5*time.Second)
		if err := c.Reconcile(ctx, s.members()); err != nil {
			s.n.log.Warn("raft membership reconcile", "err", err)
		}
		cancel()
	}
}

// members is the mesh's view: this node, and every peer in the table (suspect counts as
// live; only dead is dead).
func (s *consensusService) members() []consensus.Member {
	m := s.n.mesh
	out := []consensus.Member{{ID: m.ID(), Addrs: m.Host().Addrs(), Live: true, Profile: ptr(profileSummary(m.Profile()))}}
	for _, p := range m.Peers() {
		mem := consensus.Member{ID: p.ID, Addrs: transportAddrs(p.Addrs), Live: p.State != mesh.StateDead}
		if p.Profile != nil {
			mem.Profile = ptr(profileSummary(p.Profile))
		}
		out = append(out, mem)
	}
	return out
}

// Close leaves the Raft group cleanly (the node is leaving the mesh) and stops.
func (s *consensusService) Close() error {
	close(s.done)
	s.wg.Wait()
	c := s.get()
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Leave(ctx); err != nil {
		s.n.log.Warn("leave the raft group", "err", err)
	}
	return c.Shutdown()
}

func profileSummary(p *mesh.Profile) consensus.Profile {
	if p == nil {
		return consensus.Profile{}
	}
	s := consensus.Profile{CPUs: p.Cores, GFLOPS: p.GemmGFLOPS, MemoryBytes: p.MemoryBudgetBytes, GPUs: len(p.GPUs)}
	if len(p.GPUs) > 0 {
		s.GPUName = p.GPUs[0].Name
	}
	return s
}

func transportAddrs(addrs []ma.Multiaddr) []ma.Multiaddr {
	out := make([]ma.Multiaddr, 0, len(addrs))
	for _, a := range addrs {
		if t, _ := peer.SplitAddr(a); t != nil {
			out = append(out, t)
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }
