package node

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/node/runner"
	"github.com/meshnode/meshnode/scheduler"
)

// superviseTick is how often the engine wakes without a change of the job state: the
// leader's supervision depends on time (a node of a plan dies when its heartbeats stop,
// which is no FSM entry), and the node's link measurements are republished in its profile.
const superviseTick = time.Second

// pruneInterval is how often a node looks for checkpoint files it may delete.
const pruneInterval = 10 * time.Second

// orphanBlobAge is how long a blob no job references stays in the store (runner.Config
// OrphanAge): datasets of jobs the control plane no longer keeps, publishes whose submit
// failed.
const orphanBlobAge = time.Hour

// checkpointPinFor is how long a checkpoint file this node has just written, fetched or
// agreed to hold is safe from pruning (runner.Config.PinFor); tests lower it.
var checkpointPinFor = 5 * time.Minute

// errNoConsensus means the node's control plane is not running.
var errNoConsensus = errors.New("the node's control plane is not running")

// engine is the node service that turns committed job state into training: it wakes when
// the FSM applies an entry (consensus.FSM.Changed) and at superviseTick; on the leader it
// runs the scheduler's decisions, on every node it hands the jobs to the runner, which
// starts and stops this node's workers.
type engine struct {
	n      *Node
	log    *slog.Logger
	sched  *scheduler.Scheduler
	runner *runner.Runner
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	reconciled time.Time // when the runner last saw the jobs
	catchUp    catchUp   // whether the FSM has caught up with the leader (catchup.go)
	// hostLoad measures this host's load for first plans (hostload.go).
	hostLoad hostLoadMeter
}

// newEngine builds the engine of n with its runner.
func newEngine(n *Node) (*engine, error) {
	r, err := runner.New(runner.Config{
		Self: n.ID().String(), DataDir: n.cfg.DataDir, Log: n.log,
		Blobs: nodeBlobs{n}, Control: nodeControl{n}, Network: nodeNetwork{n}, Datasets: nodeDatasets{n},
		PinFor: checkpointPinFor, PruneEvery: pruneInterval, OrphanAge: orphanBlobAge, CrashInCheckpoint: crashInCheckpoint(),
		Metrics: n.train,
	})
	if err != nil {
		return nil, err
	}
	return &engine{n: n, log: n.log, runner: r, sched: scheduler.New(schedulerConfig())}, nil
}

func (e *engine) Name() string { return "engine" }

func (e *engine) Start(context.Context) error {
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.wg.Add(1)
	go e.loop()
	return nil
}

func (e *engine) Close() error {
	e.cancel()
	e.wg.Wait()
	e.runner.Close()
	return nil
}

// training reports whether this node runs a worker of some job.
func (e *engine) training() bool { return e.runner.Training() }

// loop waits for a change of the FSM or the supervision tick. At a change every node
// reads the jobs; at a tick only the leader does (and every node once per pruneInterval,
// for the checkpoint files it may prune).
func (e *engine) loop() {
	defer e.wg.Done()
	t := time.NewTicker(superviseTick)
	defer t.Stop()
	changed := true
	for {
		var wake <-chan struct{}
		c := e.n.Consensus()
		if c != nil {
			wake = c.FSM().Changed() // before reading: no change after the read is missed
			if changed || c.IsLeader() || !e.catchUp.done(c) || time.Since(e.reconciled) >= pruneInterval {
				e.pass(c)
			}
		}
		select {
		case <-e.ctx.Done():
			return
		case <-wake:
			changed = true
		case <-t.C:
			changed = false
			e.publishLinks()
		}
	}
}

// pass reads the jobs, runs the scheduler on the leader and hands the jobs to the runner.
func (e *engine) pass(c *consensus.Consensus) {
	jobs, index, err := c.Jobs(e.ctx, false)
	if err != nil {
		if e.ctx.Err() == nil {
			e.log.Warn("read jobs", "err", err)
		}
		return
	}
	if c.IsLeader() {
		e.schedule(c, jobs)
	}
	if !e.catchUp.check(e.ctx, c, index, e.log) {
		return
	}
	e.reconciled = time.Now()
	e.runner.Reconcile(jobs)
	if e.n.train != nil {
		e.n.train.forgetJobsExcept(jobs)
	}
}

// publishLinks copies the peer table's link measurements into the announced profile
// (announcedLinks), so the leader sees every node's row of the link matrix.
func (e *engine) publishLinks() {
	prof := e.n.mesh.Profile()
	if prof == nil {
		return
	}
	links := announcedLinks(e.n.mesh.Peers())
	if len(links) == len(prof.Links) {
		same := true
		for i := range links {
			same = same && links[i] == prof.Links[i]
		}
		if same {
			return
		}
	}
	prof.Links = links
	e.n.mesh.SetProfile(*prof)
}

// announcedLinks are the links a node announces of its peers. The link to a peer that
// announces a data-plane address is the data plane's measurement or none: tensors take
// that path (a WAN relay in front of the peer's data port, a hole-punched path), not
// libp2p's, and a first plan made before the data-plane probe had answered priced two
// testnet nodes in different emulated regions at libp2p's loopback 0.1 ms and 100 MB/s
// (predicted 0.19 s a step, measured 0.68). A pair left out is priced like the worst
// measured link. Only what peers accept (mesh.Profile.Validate) is announced: one odd
// measurement must not get this node's own heartbeats refused.
func announcedLinks(peers []mesh.PeerInfo) []mesh.ProfileLink {
	var links []mesh.ProfileLink
	for _, pi := range peers {
		l := pi.Link
		if len(pi.Profile.DataCandidates()) > 0 && l.Source != mesh.LinkDataPlane {
			continue
		}
		ok := l.Err == "" && l.BandwidthBps >= mesh.MinLinkBandwidthBps && l.BandwidthBps <= mesh.MaxProfileRateBps &&
			l.RTT >= 0 && l.RTT.Seconds() <= mesh.MaxProfileRTTSeconds
		if ok && len(links) < mesh.MaxProfileLinks {
			links = append(links, mesh.ProfileLink{Peer: pi.ID.String(), RTTSeconds: l.RTT.Seconds(), BandwidthBps: l.BandwidthBps})
		}
	}
	return links
}
