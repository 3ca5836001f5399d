package parallel

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel/offload"
)

// SyncConfig configures data-parallel synchronisation.
type SyncConfig struct {
	Mode jobspec.Sync `json:"mode"`
	// InnerSteps is DiLoCo's H, local steps between synchronisations.
	InnerSteps int `json:"inner_steps"`
	// OuterLR and OuterMomentum are the outer Nesterov step's (DiLoCo: 0.7, 0.9).
	OuterLR       float64 `json:"outer_lr"`
	OuterMomentum float64 `json:"outer_momentum"`
	// Codec compresses what replicas exchange, with error feedback.
	Codec jobspec.Codec `json:"codec"`
	// TopKFraction is the share of elements the topk codec keeps.
	TopKFraction float64 `json:"topk_fraction"`
	// Fragments is streaming's F, the number of layer fragments synchronised in turn
	// (1 ≤ F ≤ InnerSteps and ≤ the model's layers); 0 means 1. Other modes ignore it.
	Fragments int `json:"fragments"`
	// Overlap is streaming's τ: a fragment's averaged update is applied Overlap inner steps
	// after its pseudo-gradient is sent, the all-reduce running beside those steps
	// (0 ≤ τ < InnerSteps; 0 applies it at once, as DiLoCo does).
	Overlap int `json:"overlap"`
	// MixLocal is streaming's α: when an update arrives, a fragment becomes α·local +
	// (1−α)·global, keeping part of the τ local steps taken meanwhile (0 ≤ α < 1; 0 takes
	// the global parameters, as DiLoCo does).
	MixLocal float64 `json:"mix_local"`
	// Aggregate is how contributions are combined after inadmissible ones (not finite, or
	// a norm over MaxNormRatio× this replica's own) are dropped: mean ("" too), trimmed or
	// median.
	Aggregate jobspec.Aggregate `json:"aggregate,omitempty"`
	// Score is whether replicas score each other's contributions on a held-out batch and
	// drop those that do not lower its loss (score.go): "" or auto scores DiLoCo's outer
	// steps and contested gradient collectives (contested), on every synchronisation, off
	// none. It applies where a replica is one stage.
	Score jobspec.Score `json:"score,omitempty"`
	// Zero is the ZeRO stage in sync mode: 0 keeps every replica's full optimizer state,
	// 1 shards the AdamW moments across a run's replicas (reduce-scatter the gradients,
	// each updates its chunk, all-gather the parameters), 2 also keeps only the chunk of
	// the reduced gradient. Not valid with DiLoCo or a compressing codec.
	Zero int `json:"zero,omitempty"`
	// Audit is how many members of each checked gather are drawn, on average, to have
	// their contribution recomputed by every other member (audit.go); 0 (the default)
	// audits none. Where it is > 0 DiLoCo's inner AdamW starts every outer step from zero
	// moments and a codec sends without error feedback, so that a replica's work is
	// recomputable. It needs mode diloco or sync, a codec other than topk and no ZeRO, and
	// applies where every replica is one whole-model stage.
	Audit float64 `json:"audit,omitempty"`
}

// MaxAudit bounds SyncConfig.Audit: more than a gather's members audits every one.
const MaxAudit = 64

// DefaultSyncConfig is DiLoCo with H = 50, outer lr 0.7, momentum 0.9, uncompressed.
// Streaming's defaults: one fragment, τ = 1, α = 0.5 (Douillard et al. 2025).
func DefaultSyncConfig() SyncConfig {
	return SyncConfig{Mode: jobspec.SyncDiLoCo, InnerSteps: 50, OuterLR: 0.7, OuterMomentum: 0.9, Codec: jobspec.CodecNone, TopKFraction: 0.01,
		Fragments: 1, Overlap: 1, MixLocal: 0.5}
}

// Validate names every bad field.
func (c SyncConfig) Validate() error {
	var errs []error
	if err := c.Mode.Check("sync"); err != nil {
		errs = append(errs, err)
	}
	outer := c.Mode == jobspec.SyncDiLoCo || c.Mode == jobspec.SyncStreaming
	if outer && c.InnerSteps < 1 {
		errs = append(errs, fmt.Errorf("inner-steps must be ≥ 1 (got %d)", c.InnerSteps))
	}
	if outer && !(c.OuterLR > 0) {
		errs = append(errs, fmt.Errorf("outer-lr must be > 0 (got %g)", c.OuterLR))
	}
	if c.Mode == jobspec.SyncStreaming {
		errs = append(errs, c.validateStreaming()...)
	}
	if c.OuterMomentum < 0 || c.OuterMomentum >= 1 {
		errs = append(errs, fmt.Errorf("outer-momentum must be in [0, 1) (got %g)", c.OuterMomentum))
	}
	if _, err := NewCodec(c.Codec, c.TopKFraction); err != nil {
		errs = append(errs, err)
	}
	if c.Score != "" {
		if err := c.Score.Check("score"); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.checkZero(); err != nil {
		errs = append(errs, err)
	}
	if err := c.CheckAudit("audit", "mode", "codec", "zero"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// JobConfig is everything a worker needs besides the plan: the training recipe (Batch is
// per replica), the pipeline schedule, the synchronisation, and the ids frames carry.
type JobConfig struct {
	Train    TrainConfig      `json:"train"`
	Schedule jobspec.Schedule `json:"schedule"`
	Sync     SyncConfig       `json:"sync"`
	Job      uint64           `json:"job"`
	Epoch    uint32           `json:"epoch"`
	// StallTimeout bounds every wait for a peer's frame (an activation, a gradient, a
	// collective's chunk): a peer silent for longer fails the step, so the failure can be
	// handled (a new plan) instead of hanging. Zero means DefaultStallTimeout.
	StallTimeout time.Duration `json:"stall_timeout"`
	// Grace is how long an outer step (DiLoCo, streaming) waits for the rest of a group's
	// members once a majority of its active ones is in: a contribution that has not arrived
	// by then is left out of the step, and its replica takes the others' result
	// (quorum.go). It is the most the window is: a window that ends with a member missing
	// halves, down to Grace/8, and grows back when every member comes (grace.go). Zero
	// means no window: the step waits for every member the control plane has not retired
	// (Worker.Retire), up to the stall timeout.
	Grace time.Duration `json:"grace,omitempty"`
}

// DefaultStallTimeout is how long a worker waits for a peer's frame by default.
const DefaultStallTimeout = 60 * time.Second

// stallTransport bounds each Recv of a transport by a timeout.
type stallTransport struct {
	Transport
	timeout time.Duration
}

func (s stallTransport) PieceBytes() int { return pieceBytes(s.Transport) }

// Misbehaved passes a report of peer's misbehaviour to the wrapped transport.
func (s stallTransport) Misbehaved(peer, reason string) { misbehaved(s.Transport, peer, reason) }

// AlterContribution passes a contribution through the wrapped transport's alteration.
func (s stallTransport) AlterContribution(ctx context.Context, to string, f *frame.Frame) (*frame.Frame, error) {
	return alterContribution(ctx, s.Transport, to, f)
}

func (s stallTransport) Recv(ctx context.Context, from string, k frame.Key) (*frame.Frame, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout+stallExtra(ctx))
	defer cancel()
	f, err := s.Transport.Recv(ctx, from, k)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		return nil, fmt.Errorf("%s sent nothing for %s (waiting for kind %d, step %d, micro-batch %d): %w", from, s.timeout, k.Kind, k.Step, k.Micro, err)
	}
	return f, err
}

// normIndex is the frame index of the squared-gradient-norm exchange between stages.
const normIndex = 0xffff

// evalMicro marks the micro-batch numbers of evaluation frames.
const evalMicro = 0x8000

// Worker runs one stage of one replica of a plan: its slice of the model, its optimizer,
// its part of the pipeline schedule and of the replicas' synchronisation.
type Worker struct {
	// rejected collects the contributions this worker's collectives dropped since the last
	// step's result (streaming's run in goroutines: guarded by rejectMu).
	rejectMu sync.Mutex
	// signKey is the node key the worker signs its contributions with (its transport's,
	// SigningTransport; nil: it signs nothing), and evidence the signed contributions of
	// the latest collective of each run that dropped a member (evidence.go).
	signKey         ed25519.PrivateKey
	evidence        evidenceStore
	rejected        []Rejection
	offenders       *offenderWatch
	cfg             JobConfig
	plan            Plan
	tr              Transport
	replica, stage  int // this worker's place in the plan
	numStages       int // stages of this worker's replica
	numReplicas     int // replicas of the plan
	prev, next      string
	state           trainingState  // the stage's weights, gradients and moments (not ZeRO's)
	params          []*model.Param // state's
	ws              model.Workspace
	sampler         model.Sampler
	data            *model.Dataset
	valOffs         []int
	runs            []syncRun
	runParams       [][]*model.Param
	feedback        []*ErrorFeedback
	sync            syncStrategy // every step, ZeRO, DiLoCo or streaming: chosen by newSyncStrategy
	stageGroup      Group
	batch, micro    int     // this replica's sequences and micro-batches per step
	syncWeight      float32 // numReplicas·batch/global: scales contributions so a mean is weighted by batch
	step            int
	codec           Codec
	pipelineSent    int64
	syncSent        int64
	pipelineStarved int64     // nanoseconds spent waiting on neighbours
	times           StepTimes // of the step in progress (step_times.go)
	updateGate      func(ctx context.Context, step int) error
	peers           *peerSet        // the plan's members the control plane retired
	grace           *graceWindow    // grace.go: the outer steps' grace window, adapted to measured lateness
	scorer          *heldOutScorer  // nil: contributions are not scored (score.go)
	onDemand        *onDemandScorer // non-nil: score: auto scores contested gradient collectives (score.go)
	mirrorAt        int             // the step of the stage weight mirror the scorer holds, -1: none (stage_mirror.go)
	tied            *model.Param    // a tied model's table in a stage without the other end (tied.go)
	tiedPeer        string          // the stage at the other end
	tiedShared      bool            // the table was sent once (a frozen one is sent only once)
	copies          copyQueue       // state copies asked of this worker by joiners (state_copy.go)
	auditor         *Worker         // the solo worker that recomputes audited contributions (audit.go)
	pendingBans     []string        // members an audit convicted this step (guarded by rejectMu)
	verifying       bool            // a leader's verifier worker: its audits recompute every drawn member
	computeEMA      atomic.Int64    // nanoseconds of a step's compute, averaged (audit.go's waits)
	auditWait       atomic.Int64    // nanoseconds the latest audited gather waits past the stall timeout
	audited         atomic.Int64    // contributions recomputed since the last step's result
}

// SetUpdateGate installs gate, which Step calls with the step's number once the step's
// gradients are computed and before it applies them: before the gradient-norm exchange
// that every stage of the replica joins, so no stage completes a step before the gates of
// all of its stages passed. Forward and backward passes run before the gate. The node
// uses it to hold a step until the previous step's checkpoint is safely stored elsewhere.
// A gate's error fails the step.
func (w *Worker) SetUpdateGate(gate func(ctx context.Context, step int) error) {
	w.updateGate = gate
}

// NewWorker builds the worker that node self runs in plan.
func NewWorker(cfg JobConfig, plan Plan, self string, tr Transport, data *model.Dataset) (*Worker, error) {
	if err := cfg.Train.validateStage(); err != nil {
		return nil, err
	}
	if err := cfg.Sync.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Schedule.Check("schedule"); err != nil {
		return nil, err
	}
	if err := plan.Validate(cfg.Train.Model.NumLayers()); err != nil {
		return nil, err
	}
	if err := data.CheckContext(cfg.Train.Model.Context); err != nil {
		return nil, err
	}
	r, s, ok := plan.locate(self)
	if !ok {
		return nil, fmt.Errorf("node %s has no stage in the plan", self)
	}
	codec, _ := NewCodec(cfg.Sync.Codec, cfg.Sync.TopKFraction)
	stall := cfg.StallTimeout
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	var signKey ed25519.PrivateKey
	if st, ok := tr.(SigningTransport); ok {
		signKey = st.SigningKey()
	}
	tr = stallTransport{Transport: tr, timeout: stall}
	st := plan.Replicas[r][s]
	w := &Worker{cfg: cfg, plan: plan, tr: tr, replica: r, stage: s, numStages: len(plan.Replicas[r]), numReplicas: len(plan.Replicas),
		mirrorAt: -1, data: data, codec: codec, peers: newPeerSet(), signKey: signKey, grace: newGraceWindow(cfg.Grace), offenders: newOffenderWatch(), valOffs: model.ValOffsets(data.Val, cfg.Train.Model.Context, cfg.Train.EvalWindows)}
	if be := cfg.Train.Backend; be != nil {
		if !be.Device().IsHost() && w.numStages > 1 {
			return nil, fmt.Errorf("backend %s: a device backend runs one stage per replica for now (pipeline activations arrive as host slices), the plan has %d", be.Name(), w.numStages)
		}
		w.ws.Backend = be
	}
	batch, offset, global := plan.replicaBatch(r, cfg.Train.Batch)
	w.batch, w.micro = batch, min(cfg.Train.MicroBatches, batch)
	if err := w.buildStage(st); err != nil {
		return nil, err
	}
	w.syncWeight = float32(w.numReplicas*batch) / float32(global)
	w.sampler = model.Sampler{Train: data.Train, Batch: batch, Context: cfg.Train.Model.Context,
		Seed: cfg.Train.Seed, RowOffset: offset, GlobalBatch: global}
	if s > 0 {
		w.prev = plan.Replicas[r][s-1].Node
	}
	if s < w.numStages-1 {
		w.next = plan.Replicas[r][s+1].Node
	}
	for _, sp := range plan.Replicas[r] {
		w.stageGroup.Members = append(w.stageGroup.Members, sp.Node)
	}
	w.stageGroup.Self = s
	w.runs = plan.syncRuns(r, s)
	if cfg.Sync.Mode == jobspec.SyncStreaming {
		if err := cfg.Sync.checkFragments(cfg.Train.Model.Layers); err != nil {
			return nil, err
		}
		w.runs = splitByFragment(w.runs, layerFragments(cfg.Train.Model, cfg.Sync.fragments()))
	}
	offloaded := st.MemoryBudget > 0 // one replica: nothing to synchronise, compress or shard
	for _, run := range w.runs {
		ps := model.LayerParams(w.state.Layers()[run.first-st.First : run.last-st.First])
		w.runParams = append(w.runParams, ps)
		var ef *ErrorFeedback
		if codec.Name() != jobspec.CodecNone && !offloaded {
			ef = NewErrorFeedback(codec, countParams(ps))
			ef.memoryless = w.audits()
		}
		w.feedback = append(w.feedback, ef)
	}
	w.sync = newSyncStrategy(w, offloaded)
	if w.scores(offloaded) {
		var err error
		if w.scorer, err = w.buildScorer(); err != nil {
			return nil, err
		}
	} else if w.scoresContested(offloaded) {
		w.onDemand = &onDemandScorer{build: w.buildScorer}
		if w.numStages > 1 { // the stage weight mirror loads into it from step 0
			var err error
			if w.onDemand.s, err = w.buildScorer(); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// Retire tells the worker that the control plane removed nodes from the job's plan (they
// died): its outer steps stop waiting for them and no longer count them in their quorum,
// and GatherTraffic passes over them. The worker keeps its plan, its replica's data and its
// groups' order. Safe to call while the worker steps.
func (w *Worker) Retire(nodes ...string) { w.peers.retire(nodes...) }

// outerQuorum is the quorum collective of run, sending over tr.
func (w *Worker) outerQuorum(tr Transport, run syncRun) outerQuorum {
	batches := make([]int, len(w.plan.Replicas))
	for r := range batches {
		batches[r], _, _ = w.plan.replicaBatch(r, w.cfg.Train.Batch)
	}
	pol := w.policy()
	w.grace.configure(w.cfg.Grace)
	// Goroutines send beside the step through the raw transport: the worker's byte counts
	// are not for concurrent use (the few bytes of announcements and handed-over results
	// go uncounted).
	return outerQuorum{tr: tr, bg: w.tr, g: run.group, k: w.roundKey(run.first), peers: w.peers, grace: w.grace.window(), adapt: w.grace,
		batches: batches, reject: pol.reject}
}

// IsLast reports whether the worker runs the last stage of its replica (the one that
// computes the loss).
func (w *Worker) IsLast() bool { return w.stage == w.numStages-1 }

// Replica is the worker's replica index.
func (w *Worker) Replica() int { return w.replica }

// Self is the node this worker runs as.
func (w *Worker) Self() string { return w.plan.Replicas[w.replica][w.stage].Node }

// Layers are the worker's layers.
func (w *Worker) Layers() []model.Layer { return w.state.Layers() }

// StepsDone is the number of completed steps.
func (w *Worker) StepsDone() int { return w.step }

// Batch is the number of sequences this worker's replica trains on per step.
func (w *Worker) Batch() int { return w.batch }

// BytesSent reports the payload bytes this worker sent for the pipeline (activations and
// their gradients) and for synchronisation (collectives between replicas).
func (w *Worker) BytesSent() (pipeline, sync int64) { return w.pipelineSent, w.syncSent }

// WaitTime is how long the worker has waited for its pipeline neighbours (activations and
// gradients), the measured bubble.
func (w *Worker) WaitTime() time.Duration { return time.Duration(w.pipelineStarved) }

// counting wraps the transport to count what the worker sends by purpose.
func (w *Worker) send(ctx context.Context, to string, f *frame.Frame) error {
	switch f.Kind {
	case frame.KindActivation, frame.KindGradient:
		w.pipelineSent += int64(len(f.Payload))
		return timed(&w.times.Transfer, func() error { return w.tr.Send(ctx, to, f) })
	case frame.KindReduce:
		w.syncSent += int64(len(f.Payload))
	}
	return w.tr.Send(ctx, to, f)
}

type countingTransport struct{ w *Worker }

func (c countingTransport) Self() string    { return c.w.tr.Self() }
func (c countingTransport) PieceBytes() int { return pieceBytes(c.w.tr) }
func (c countingTransport) Misbehaved(peer, reason string) {
	misbehaved(c.w.tr, peer, reason)
}
func (c countingTransport) AlterContribution(ctx context.Context, to string, f *frame.Frame) (*frame.Frame, error) {
	return alterContribution(ctx, c.w.tr, to, f)
}
func (c countingTransport) Send(ctx context.Context, to string, f *frame.Frame) error {
	return c.w.send(ctx, to, f)
}
func (c countingTransport) Recv(ctx context.Context, from string, k frame.Key) (*frame.Frame, error) {
	return c.w.tr.Recv(ctx, from, k)
}

func countParams(ps []*model.Param) int {
	n := 0
	for _, p := range ps {
		n += p.Value.Size()
	}
	return n
}

func (w *Worker) key(kind frame.Kind, micro, index int) frame.Key {
	return frame.Key{Kind: kind, Job: w.cfg.Job, Epoch: w.cfg.Epoch, Step: uint32(w.step), Micro: uint16(micro), Index: uint16(index)}
}

func (w *Worker) activationFrame(kind frame.Kind, micro, index int, x []float32, rows int) *frame.Frame {
	k := w.key(kind, micro, index)
	return &frame.Frame{Kind: kind, DType: frame.DTypeF32, Codec: frame.CodecNone, Job: k.Job, Epoch: k.Epoch, Step: k.Step,
		Micro: k.Micro, Index: k.Index, Shape: []int{rows, len(x) / max(rows, 1)}, Payload: appendF32(make([]byte, 0, 4*len(x)), x)}
}

// recvTensor waits for a tensor frame and decodes it into a workspace buffer of n floats.
func (w *Worker) recvTensor(ctx context.Context, from string, k frame.Key, n int) ([]float32, error) {
	f, err := w.tr.Recv(ctx, from, k)
	if err != nil {
		return nil, err
	}
	if f.DType != frame.DTypeF32 || f.Codec != frame.CodecNone || f.Elements() != n {
		return nil, fmt.Errorf("frame from %s: %v elements of dtype %d codec %d, want %d float32", from, f.Shape, f.DType, f.Codec, n)
	}
	x := w.ws.AllocDirty(n)
	if err := decodeF32(x, f.Payload); err != nil {
		return nil, fmt.Errorf("frame from %s: %w", from, err)
	}
	return x, nil
}

// buildStage builds the stage's training state: in memory, or, when the stage has a
// memory budget, in an offload store in cfg.Train.OffloadDir whose schedule is the
// stage's passes. Only a plan of one replica offloads: synchronising replicas (every-step
// averaging, DiLoCo, streaming, ZeRO) keep full-size gradient and parameter buffers beside
// the store. ZeRO across a single replica shards nothing, so there the store's optimizer
// holds the moments.
func (w *Worker) buildStage(st StagePlan) error {
	t := w.cfg.Train
	if st.MemoryBudget > 0 {
		switch {
		case w.numReplicas > 1:
			return fmt.Errorf("stage %d memory_budget: offload needs a plan of one replica, this one has %d (synchronising replicas keep full-size buffers)", w.stage, w.numReplicas)
		case t.OffloadDir == "":
			return fmt.Errorf("stage %d memory_budget: no offload directory (JobConfig.Train.OffloadDir) for the store", w.stage)
		}
	}
	state, err := newTrainingState(t, st, w.cfg.Sync.Zero == 0, stageOps(w.cfg.Schedule, w.stage, w.numStages, w.micro))
	if err != nil && w.numStages*w.numReplicas == 1 {
		return err // a single process: no stage to name
	}
	if err != nil {
		return fmt.Errorf("stage %d %w", w.stage, err)
	}
	w.state, w.params = state, state.Params()
	w.tiedTables()
	return nil
}

// ActivationPeakBytes is the most activation memory a step or an evaluation has held: the
// peak of the worker's workspace, plus the recomputation scratch's when it recomputes.
func (w *Worker) ActivationPeakBytes() int64 {
	return w.ws.PeakBytes() + model.ScratchPeakBytes(w.state.Layers())
}

// Close releases the worker's training state (an offload store; its file is already
// unlinked).
func (w *Worker) Close() error {
	if w.auditor != nil {
		w.auditor.Close()
	}
	return w.state.Close()
}

// OffloadStats returns the offload store's counters, and false without a memory budget.
func (w *Worker) OffloadStats() (offload.Stats, bool) { return w.state.Stats() }

// policy is how this worker's collectives aggregate, reporting what they drop.
func (w *Worker) policy() policy {
	return policy{rule: w.cfg.Sync.Aggregate, reject: func(r Rejection) {
		w.rejectMu.Lock()
		w.rejected = append(w.rejected, r)
		w.rejectMu.Unlock()
	}, batches: w.plan.nodeBatches(w.cfg.Train.Batch), sign: w.signer(nil, nil)}
}

// nodeBatches is each node's replica batch (sequences) under p, nil when every replica's
// is the same.
func (p Plan) nodeBatches(def int) map[string]float64 {
	out, first, same := map[string]float64{}, 0, true
	for r, stages := range p.Replicas {
		b, _, _ := p.replicaBatch(r, def)
		if r == 0 {
			first = b
		}
		same = same && b == first
		for _, st := range stages {
			out[st.Node] = float64(b)
		}
	}
	if same {
		return nil
	}
	return out
}

// scores says whether the worker scores contributions on a held-out batch: where its job
// asks for it (streaming's outer steps are DiLoCo's, scored under auto as DiLoCo's are,
// each from the anchors of the step it was launched at: streamingSync.launchSync), its
// replica is one stage holding the whole model (the score is the whole model's loss) or
// a pipelined one whose stages bring each other their weights (pipelinedScored), and
// there is another replica.
func (w *Worker) scores(offloaded bool) bool {
	sc := w.cfg.Sync
	return sc.Score.Enabled(sc.Mode, sc.Zero) && (w.numStages == 1 || pipelinedScored(sc, w.numReplicas)) && w.numReplicas > 1 && !offloaded
}

// scoresContested says whether the worker scores only the gradient collectives that look
// inconsistent (contested, sizesDisagree, pullApart; ZeRO's suspect): where its job leaves
// score at auto, which does not score every-step sync or ZeRO, and it could score
// (scores' other conditions).
func (w *Worker) scoresContested(offloaded bool) bool {
	sc := w.cfg.Sync
	return (sc.Score == "" || sc.Score == jobspec.ScoreAuto) && !sc.Score.Enabled(sc.Mode, sc.Zero) &&
		(w.numStages == 1 || pipelinedScored(sc, w.numReplicas)) && w.numReplicas > 1 && !offloaded && sc.Mode != jobspec.SyncStreaming
}

// syncsEveryStep says the replicas synchronise at every step (every-step sync or ZeRO).
func (w *Worker) syncsEveryStep() bool {
	return w.numReplicas > 1 && (w.cfg.Sync.Zero > 0 || w.cfg.Sync.Mode == jobspec.SyncEveryStep)
}

// takeRejected returns and forgets the contributions dropped so far.
func (w *Worker) takeRejected() []Rejection {
	w.rejectMu.Lock()
	defer w.rejectMu.Unlock()
	r := w.rejected
	w.rejected = nil
	return r
}
