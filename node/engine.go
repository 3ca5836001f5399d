package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/balancer"
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/model"
)

// engineTick is how often the engine looks at the job state: the leader plans submitted
// jobs, every node starts or stops the stages the current plans give it, and the node's
// link measurements are republished in its profile.
const engineTick = 300 * time.Millisecond

// engine turns committed job state into training: it is the node service that plans on the
// leader and runs workers everywhere.
type engine struct {
	n      *Node
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	runs     map[string]*jobRun // job id → the worker this node runs for it
	datasets map[string]*model.Dataset
	copied   map[string]bool      // "job/hash" of checkpoint files this node holds or is fetching
	checked  map[string]time.Time // when the leader last weighed a bigger plan, per job
	pruned   time.Time            // when checkpoint files were last pruned (engine_gc.go)
}

// jobRun is one worker of one plan epoch.
type jobRun struct {
	epoch  uint64
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *engine) Name() string { return "engine" }

func (e *engine) Start(context.Context) error {
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.runs, e.datasets, e.copied, e.checked = map[string]*jobRun{}, map[string]*model.Dataset{}, map[string]bool{}, map[string]time.Time{}
	e.wg.Add(1)
	go e.loop()
	return nil
}

func (e *engine) Close() error {
	e.cancel()
	e.wg.Wait()
	return nil
}

func (e *engine) loop() {
	defer e.wg.Done()
	t := time.NewTicker(engineTick)
	defer t.Stop()
	for {
		select {
		case <-e.ctx.Done():
			e.stopAll()
			return
		case <-t.C:
		}
		e.publishLinks()
		c := e.n.Consensus()
		if c == nil {
			continue
		}
		jobs, _, err := c.Jobs(e.ctx, false)
		if err != nil {
			continue
		}
		for _, j := range jobs {
			switch {
			case j.Status == consensus.JobSubmitted && c.IsLeader():
				e.plan(c, j)
			case j.Status == consensus.JobRunning && c.IsLeader():
				e.supervise(c, j)
			}
			e.reconcile(j)
			e.replicate(j)
		}
		e.pruneCheckpointBlobs(jobs)
	}
}

// plan computes and commits the first plan of a submitted job on the leader.
func (e *engine) plan(c *consensus.Consensus, j consensus.Job) {
	log := e.n.log.With("job", j.ID)
	if err := c.SetJobStatus(e.ctx, j.ID, consensus.JobPlanning, "planning"); err != nil {
		log.Warn("mark job planning", "err", err)
		return
	}
	jp, err := planJob(j.Spec, e.n.planCandidates())
	if err != nil {
		log.Warn("no plan", "err", err)
		_ = c.SetJobStatus(e.ctx, j.ID, consensus.JobFailed, "no feasible plan: "+err.Error())
		return
	}
	raw, _ := json.Marshal(jp)
	epoch, err := c.SetPlan(e.ctx, j.ID, raw, jp.Reason)
	if err != nil {
		log.Warn("commit plan", "err", err)
		return
	}
	log.Info("plan committed", "epoch", epoch, "strategy", jp.Strategy, "replicas", len(jp.Replicas), "predicted_step_s", jp.PredictedStepS)
	if err := c.SetJobStatus(e.ctx, j.ID, consensus.JobRunning, fmt.Sprintf("epoch %d: %s", epoch, jp.Reason)); err != nil {
		log.Warn("mark job running", "err", err)
	}
}

// planCandidates are this node and the live peers that announced a measured profile and a
// data-plane address.
func (n *Node) planCandidates() []planCandidate {
	var out []planCandidate
	if p := n.mesh.Profile(); usable(p) {
		out = append(out, planCandidate{id: n.ID().String(), profile: p})
	}
	for _, pi := range n.mesh.Peers() {
		if pi.State == mesh.StateAlive && usable(pi.Profile) {
			out = append(out, planCandidate{id: pi.ID.String(), profile: pi.Profile})
		}
	}
	return out
}

func usable(p *mesh.Profile) bool {
	return p != nil && p.GemmGFLOPS > 0 && p.MemoryBudgetBytes > 0 && p.DataAddr != ""
}

// publishLinks copies the peer table's link measurements into the announced profile, so
// the leader sees every node's row of the link matrix.
func (e *engine) publishLinks() {
	prof := e.n.mesh.Profile()
	if prof == nil {
		return
	}
	var links []mesh.ProfileLink
	for _, pi := range e.n.mesh.Peers() {
		if l := pi.Link; l.Err == "" && l.BandwidthBps > 0 {
			links = append(links, mesh.ProfileLink{Peer: pi.ID.String(), RTTSeconds: l.RTT.Seconds(), BandwidthBps: l.BandwidthBps})
		}
	}
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

// reconcile starts the worker a running job's current plan gives this node, and stops
// workers of finished jobs or superseded epochs.
func (e *engine) reconcile(j consensus.Job) {
	e.mu.Lock()
	run := e.runs[j.ID]
	e.mu.Unlock()
	cur := j.CurrentPlan()
	if run != nil && (j.Status.Terminal() || cur == nil || cur.Epoch != run.epoch) {
		run.cancel()
		<-run.done
		e.mu.Lock()
		delete(e.runs, j.ID)
		e.mu.Unlock()
		run = nil
	}
	if run != nil || j.Status != consensus.JobRunning || cur == nil {
		return
	}
	var jp JobPlan
	if err := json.Unmarshal(cur.Plan, &jp); err != nil {
		e.n.log.Warn("unreadable plan", "job", j.ID, "epoch", cur.Epoch, "err", err)
		return
	}
	self := e.n.ID().String()
	mine := false
	for _, id := range jp.Nodes() {
		mine = mine || id == self
	}
	if !mine {
		return
	}
	ctx, cancel := context.WithCancel(e.ctx)
	run = &jobRun{epoch: cur.Epoch, cancel: cancel, done: make(chan struct{})}
	e.mu.Lock()
	e.runs[j.ID] = run
	e.mu.Unlock()
	go func() {
		defer close(run.done)
		e.runWorker(ctx, j, cur.Epoch, jp)
	}()
}

// training reports whether this node runs a worker of some job.
func (e *engine) training() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.runs) > 0
}

func (e *engine) stopAll() {
	e.mu.Lock()
	runs := e.runs
	e.runs = map[string]*jobRun{}
	e.mu.Unlock()
	for _, r := range runs {
		r.cancel()
		<-r.done
	}
}

// frameJob is the 64-bit job id that data-plane frames carry.
func frameJob(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// errNoDataPlane means the node has no data plane to train over.
var errNoDataPlane = errors.New("the node's data plane is not running")

// errNoConsensus means the node's control plane is not running.
var errNoConsensus = errors.New("the node's control plane is not running")

// Job event kinds the engine writes.
const (
	eventWorkerFailed  = "worker_failed"
	eventWorkerStopped = "worker_stopped" // a worker stopped for a new epoch, at its step
	eventReplan        = "replan"         // a new epoch after a failure (counts towards maxRestarts)
	eventRebalance     = "rebalance"      // a new epoch because joined nodes make the job faster
)

// StepsRedone is how many steps each new epoch of a job repeated: for every epoch that
// resumed from a checkpoint (a replan or rebalance event), the furthest step its previous
// epoch's workers reported reaching (stopped or failed) minus the step it resumed from.
// The map is keyed by the new epoch; epochs whose predecessors reported nothing are left
// out.
func StepsRedone(events []consensus.Event) map[uint64]int {
	reached := map[uint64]int{}
	for _, ev := range events {
		if ev.Kind == eventWorkerStopped || ev.Kind == eventWorkerFailed {
			reached[ev.Epoch] = max(reached[ev.Epoch], ev.Step)
		}
	}
	out := map[uint64]int{}
	for _, ev := range events {
		if r, ok := reached[ev.Epoch-1]; ok && (ev.Kind == eventReplan || ev.Kind == eventRebalance) {
			out[ev.Epoch] = max(0, r-ev.Step)
		}
	}
	return out
}

// maxRestarts bounds how many times the leader restarts a job from a checkpoint after
// failures before it gives up and marks the job failed.
const maxRestarts = 5

// supervise is the leader's watch over a running job: when a node of the current plan is
// dead, or a worker of the current epoch failed, it commits a new epoch without the dead
// nodes that resumes from the latest checkpoint holding every layer.
func (e *engine) supervise(c *consensus.Consensus, j consensus.Job) {
	cur := j.CurrentPlan()
	if cur == nil {
		return
	}
	var jp JobPlan
	if json.Unmarshal(cur.Plan, &jp) != nil {
		return
	}
	state := map[string]mesh.PeerState{}
	for _, pi := range e.n.mesh.Peers() {
		state[pi.ID.String()] = pi.State
	}
	self := e.n.ID().String()
	var why []string
	for _, id := range jp.Nodes() {
		if id != self && state[id] == mesh.StateDead {
			why = append(why, "node "+id+" is dead")
		}
	}
	restarts := 0
	for _, ev := range j.Events {
		if ev.Kind == eventReplan {
			restarts++
		}
		if ev.Kind == eventWorkerFailed && ev.Epoch == cur.Epoch && len(why) == 0 {
			why = append(why, "a worker failed: "+ev.Message)
		}
	}
	if len(why) == 0 {
		e.considerGrowth(c, j, jp, state)
		return
	}
	log := e.n.log.With("job", j.ID, "epoch", cur.Epoch)
	if restarts >= maxRestarts {
		_ = c.SetJobStatus(e.ctx, j.ID, consensus.JobFailed, fmt.Sprintf("gave up after %d restarts: %s", restarts, why[0]))
		return
	}
	next, err := planJob(j.Spec, e.n.planCandidates())
	if err != nil {
		log.Warn("no plan without the failed nodes", "err", err)
		_ = c.SetJobStatus(e.ctx, j.ID, consensus.JobFailed, "no feasible plan after a failure: "+err.Error())
		return
	}
	alive := func(id string) bool { return id == self || state[id] == mesh.StateAlive }
	if m, ok := completeCheckpoint(j, modelConfig(j.Spec).NumLayers(), alive); ok {
		next.ResumeStep = m.Step
	}
	raw, _ := json.Marshal(next)
	reason := fmt.Sprintf("%s; resume from step %d", why[0], next.ResumeStep)
	epoch, err := c.SetPlan(e.ctx, j.ID, raw, reason)
	if err != nil {
		log.Warn("commit replan", "err", err)
		return
	}
	// The newest checkpoint any stage wrote, for the record: one that is not complete
	// with live holders is why a job resumes from an older one.
	written := 0
	for _, m := range j.Checkpoints {
		written = max(written, m.Step)
	}
	_ = c.AddEvent(e.ctx, j.ID, consensus.Event{Kind: eventReplan, Epoch: epoch, Step: next.ResumeStep,
		Message: fmt.Sprintf("%s (newest checkpoint written: step %d)", reason, written)})
	log.Info("replanned", "epoch", epoch, "reason", reason)
}

// replicate copies the files of a running job's latest complete checkpoint to this node
// if it runs a stage of the job, so that the checkpoint outlives the node that wrote any
// file of it.
func (e *engine) replicate(j consensus.Job) {
	e.mu.Lock()
	_, mine := e.runs[j.ID]
	e.mu.Unlock()
	if !mine || j.Status != consensus.JobRunning {
		return
	}
	m, ok := completeCheckpoint(j, modelConfig(j.Spec).NumLayers(), nil)
	if !ok {
		return
	}
	self := e.n.ID().String()
	holders := fileHolders(m)
	for _, f := range m.Files {
		// Blobs are content-addressed and training is deterministic, so another job may
		// have left this very file here already: the holder is still recorded per job.
		key := j.ID + "/" + f.Hash
		e.mu.Lock()
		skip := e.copied[key] || f.Node == self || heldBy(holders[f.Hash], self)
		e.copied[key] = true
		e.mu.Unlock()
		if skip {
			continue
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			err := e.n.fetchBlob(e.ctx, f.Hash, holders[f.Hash])
			if err == nil {
				// Record this node as a holder, so a restore survives the writer's loss.
				cp := f
				cp.Node = self
				err = e.n.Consensus().AddCheckpoint(e.ctx, j.ID, consensus.CheckpointManifest{Epoch: m.Epoch, Step: m.Step, Time: time.Now().UTC(), Files: []consensus.CheckpointFile{cp}})
			}
			if err != nil && e.ctx.Err() == nil {
				e.n.log.Warn("replicate checkpoint file", "job", j.ID, "hash", f.Hash, "err", err)
				e.mu.Lock()
				delete(e.copied, key) // try again on a later tick
				e.mu.Unlock()
			}
		}()
	}
}

// growthInterval is how often the leader weighs a new plan for a running job that new
// nodes could join.
const growthInterval = 5 * time.Second

// considerGrowth commits a new epoch for a running job when nodes that joined since its
// plan would make it faster: the balancer's Replan decides, with its hysteresis (the new
// plan must win by a margin after the cost of moving layers). The new epoch resumes from
// the latest checkpoint, so nothing happens before the job has one.
func (e *engine) considerGrowth(c *consensus.Consensus, j consensus.Job, jp JobPlan, state map[string]mesh.PeerState) {
	if time.Since(e.checked[j.ID]) < growthInterval {
		return
	}
	e.checked[j.ID] = time.Now()
	planned := map[string]bool{}
	for _, n := range jp.Inputs.Snapshot.Nodes {
		planned[n.ID] = true
	}
	cands := e.n.planCandidates()
	var fresh []string
	for _, cd := range cands {
		if !planned[cd.id] {
			fresh = append(fresh, cd.id)
		}
	}
	if len(fresh) == 0 {
		return
	}
	self := e.n.ID().String()
	alive := func(id string) bool { return id == self || state[id] == mesh.StateAlive }
	ckpt, ok := completeCheckpoint(j, modelConfig(j.Spec).NumLayers(), alive)
	if !ok {
		return
	}
	log := e.n.log.With("job", j.ID, "joined", len(fresh))
	in, err := planInputs(j.Spec, cands)
	if err != nil {
		log.Debug("no growth: inputs", "err", err)
		return
	}
	current, err := jp.Inputs.Replan()
	if err != nil {
		log.Debug("no growth: the current plan does not re-derive", "err", err)
		return
	}
	dec, err := balancer.Replan(current, in.Snapshot, in.Job, in.options())
	if err != nil || !dec.Replan {
		log.Debug("no growth", "reason", dec.Reason, "err", err)
		return
	}
	next, err := jobPlanFrom(dec.Plan, in, modelConfig(j.Spec).NumLayers())
	if err != nil {
		log.Warn("no growth: the balancer's plan does not convert", "err", err)
		return
	}
	next.ResumeStep = ckpt.Step
	raw, _ := json.Marshal(next)
	reason := fmt.Sprintf("%d node(s) joined (%s); %s; resume from step %d", len(fresh), fresh[0], dec.Reason, ckpt.Step)
	epoch, err := c.SetPlan(e.ctx, j.ID, raw, reason)
	if err != nil {
		log.Warn("commit rebalanced plan", "err", err)
		return
	}
	_ = c.AddEvent(e.ctx, j.ID, consensus.Event{Kind: eventRebalance, Epoch: epoch, Step: ckpt.Step, Message: reason})
	e.n.log.Info("replanned for joined nodes", "job", j.ID, "epoch", epoch, "reason", reason)
}

// heldBy reports whether id is among a file's holders.
func heldBy(holders []peer.ID, id string) bool {
	for _, h := range holders {
		if h.String() == id {
			return true
		}
	}
	return false
}
