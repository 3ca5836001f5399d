package parallel

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// StepResult is what one worker learned from one step.
type StepResult struct {
	// Step is the number of steps completed.
	Step int
	// Loss is the step's mean training loss, known to the last stage only (HasLoss).
	Loss    float64
	HasLoss bool
	// Synced says whether the replicas synchronised at the end of this step.
	Synced bool
	// Times splits the step's wall time by phase.
	Times StepTimes
	// Rejected lists the other replicas' contributions this worker dropped during the step
	// (not finite, outsized, undecodable) instead of aggregating them.
	Rejected []Rejection
	// Skipped says the step's global gradient norm was not finite: no parameter was
	// updated and the optimizer's state is untouched.
	Skipped bool
	// Offenders names the members that became offenders at this step: their
	// contributions were dropped in OffenderAfter consecutive synchronisations, or one
	// failed an audit (Rejection.Proven). Each is named once per worker; the scheduler
	// leaves them out of the next plan.
	Offenders []string
	// Audited is how many other members' contributions this worker recomputed during the
	// step (audit.go).
	Audited int
}

// inflight is one micro-batch between its forward and backward pass.
type inflight struct {
	mb    *model.Batch
	saved []model.Saved
}

// Step runs one training step: the stage's share of the schedule over all micro-batches,
// the replicas' synchronisation, clipping by the global norm across stages, and AdamW.
// A failed step abandons streaming's synchronisations in flight.
func (w *Worker) Step(ctx context.Context) (StepResult, error) {
	start := time.Now()
	w.times = StepTimes{}
	res, err := w.runStep(ctx)
	if err != nil {
		w.sync.abandon()
	} else if w.sync.consistent() {
		err = w.serveCopies(ctx)
	}
	res.Times = w.times
	res.Times.Compute = time.Since(start) - w.times.Transfer - w.times.Bubble - w.times.Sync
	w.noteCompute(res.Times.Compute)
	return res, err
}

// runStep is Step without its timing.
func (w *Worker) runStep(ctx context.Context) (StepResult, error) {
	w.ws.Reset()
	res := StepResult{}
	if err := w.state.BeginStep(); err != nil {
		return res, fmt.Errorf("step %d: %w", w.step+1, err)
	}
	defer w.state.EndStep()
	var err error
	if res.Loss, err = w.passes(ctx); err != nil {
		return res, err
	}
	res.HasLoss = w.IsLast()
	if err := w.sync.reduce(ctx); err != nil {
		return res, err
	}
	if w.updateGate != nil {
		if err := timed(&w.times.Sync, func() error { return w.updateGate(ctx, w.step+1) }); err != nil {
			return res, fmt.Errorf("step %d: %w", w.step+1, err)
		}
	}
	lr := LearningRate(w.step, w.cfg.Train.LR, w.cfg.Train.Warmup, w.cfg.Train.Steps)
	skipped, err := w.sync.update(ctx, lr)
	if err != nil {
		return res, err
	}
	res.Skipped = skipped
	w.step++
	if res.Synced, err = w.sync.afterStep(ctx); err != nil {
		return res, err
	}
	w.applyBans()
	res.Audited = int(w.audited.Swap(0))
	res.Step, res.Rejected = w.step, w.takeRejected()
	res.Offenders = w.offenders.observe(res.Rejected, res.Synced || w.syncsEveryStep())
	return res, nil
}

// passes runs the step's forward and backward passes over every micro-batch (the stage's
// share of the schedule) and folds a tied table's gradient, leaving the step's gradients
// in the training state; it returns the step's mean training loss (the last stage's).
func (w *Worker) passes(ctx context.Context) (float64, error) {
	if err := w.shareTiedTable(ctx, tiedTableMicro); err != nil {
		return 0, fmt.Errorf("step %d: %w", w.step+1, err)
	}
	M := w.micro
	flight := make([]inflight, M)
	inFlight, total := 0, 0.0
	for _, o := range stageOps(w.cfg.Schedule, w.stage, w.numStages, M) {
		if !o.backward {
			loss, err := w.forward(ctx, &flight[o.micro], o.micro, M)
			if err != nil {
				return 0, fmt.Errorf("step %d forward micro-batch %d: %w", w.step+1, o.micro, err)
			}
			total += float64(loss) * float64(flight[o.micro].mb.B) / float64(w.batch)
			inFlight++
			continue
		}
		if err := w.backward(ctx, &flight[o.micro], o.micro, M); err != nil {
			return 0, fmt.Errorf("step %d backward micro-batch %d: %w", w.step+1, o.micro, err)
		}
		if inFlight--; inFlight == 0 {
			// No micro-batch holds activations: the next reuses the workspace, so a
			// single stage's activations are one micro-batch's (its 1F1B is F B F B …).
			w.ws.Reset()
		}
	}
	if err := w.foldTiedGrad(ctx); err != nil {
		return 0, fmt.Errorf("step %d: %w", w.step+1, err)
	}
	return total, nil
}

func (w *Worker) roundKey(index int) roundKey {
	return roundKey{job: w.cfg.Job, epoch: w.cfg.Epoch, step: uint32(w.step), index: uint16(index)}
}

// forward runs micro-batch m through the stage and passes its output on; on the last stage
// it returns the micro-batch's loss.
func (w *Worker) forward(ctx context.Context, fl *inflight, m, M int) (float32, error) {
	var err error
	if fl.mb, err = w.sampler.MicroBatch(w.step, m, M); err != nil {
		return 0, fmt.Errorf("step %d: %w", w.step, err)
	}
	rows, d := fl.mb.Rows(), w.cfg.Train.Model.DModel
	var x []float32
	if w.stage > 0 {
		start := time.Now()
		if x, err = w.recvTensor(ctx, w.prev, w.key(frame.KindActivation, m, w.stage), rows*d); err != nil {
			return 0, err
		}
		w.pipelineStarved += int64(time.Since(start))
		w.times.Bubble += time.Since(start)
	}
	fl.saved = make([]model.Saved, len(w.state.Layers()))
	for i := range w.state.Layers() {
		if x, fl.saved[i], err = w.state.Forward(&w.ws, fl.mb, m, i, x); err != nil {
			return 0, err
		}
	}
	if w.IsLast() {
		return x[0], nil
	}
	return 0, w.send(ctx, w.next, w.activationFrame(frame.KindActivation, m, w.stage+1, x, rows))
}

// backward propagates micro-batch m's gradient through the stage and passes it back.
func (w *Worker) backward(ctx context.Context, fl *inflight, m, M int) error {
	rows, d := fl.mb.Rows(), w.cfg.Train.Model.DModel
	var dy []float32
	if w.IsLast() {
		// Micro-batch m's mean loss weighs rows_m/B in the step's mean (1/M when equal).
		dy = []float32{float32(fl.mb.B) / float32(w.batch)}
	} else {
		var err error
		start := time.Now()
		if dy, err = w.recvTensor(ctx, w.next, w.key(frame.KindGradient, m, w.stage), rows*d); err != nil {
			return err
		}
		w.pipelineStarved += int64(time.Since(start))
		w.times.Bubble += time.Since(start)
	}
	for i := len(w.state.Layers()) - 1; i >= 0; i-- {
		var err error
		if dy, err = w.state.Backward(&w.ws, fl.mb, m, i, fl.saved[i], dy); err != nil {
			return err
		}
	}
	fl.saved = nil
	if w.stage == 0 {
		return nil
	}
	return w.send(ctx, w.prev, w.activationFrame(frame.KindGradient, m, w.stage-1, dy, rows))
}

// Evaluate computes the validation loss of the replica's current weights through its
// pipeline. Every stage of the replica must call it; the last stage returns the loss
// (ok), the others return ok = false.
func (w *Worker) Evaluate(ctx context.Context) (loss float64, ok bool, err error) {
	T, B, d := w.cfg.Train.Model.Context, w.cfg.Train.Batch, w.cfg.Train.Model.DModel
	if err := w.shareTiedTable(ctx, tiedEvalTableMicro); err != nil {
		return 0, false, fmt.Errorf("evaluation: %w", err)
	}
	var total float64
	for c, i := 0, 0; i < len(w.valOffs); c, i = c+1, i+B {
		w.ws.Reset()
		chunk := w.valOffs[i:min(len(w.valOffs), i+B)]
		mb, err := model.ValBatch(w.data.Val, chunk, T)
		if err != nil {
			return 0, false, fmt.Errorf("evaluation: %w", err)
		}
		var x []float32
		if w.stage > 0 {
			if x, err = w.recvTensor(ctx, w.prev, w.key(frame.KindActivation, evalMicro+c, w.stage), mb.Rows()*d); err != nil {
				return 0, false, fmt.Errorf("evaluation: %w", err)
			}
		}
		if w.IsLast() {
			mb.RowLoss = make([]float64, mb.Rows())
		}
		for i := range w.state.Layers() {
			if x, err = w.state.EvalForward(&w.ws, mb, i, x); err != nil {
				return 0, false, fmt.Errorf("evaluation: %w", err)
			}
		}
		if !w.IsLast() {
			if err := w.send(ctx, w.next, w.activationFrame(frame.KindActivation, evalMicro+c, w.stage+1, x, mb.Rows())); err != nil {
				return 0, false, fmt.Errorf("evaluation: %w", err)
			}
			continue
		}
		for k := range chunk {
			var s float64
			for _, l := range mb.RowLoss[k*T : (k+1)*T] {
				s += l
			}
			total += s / float64(T)
		}
	}
	if !w.IsLast() {
		return 0, false, nil
	}
	return total / float64(len(w.valOffs)), true, nil
}

// trafficIndex is the frame index of the traffic totals every worker shares at reports.
const trafficIndex = 0xfffe

// GatherTraffic returns the payload bytes every worker of the plan has sent so far
// (pipeline and synchronisation); retired workers (Retire) are passed over, and a worker
// still joining (JoinFrom) counts only its own. Every worker of
// the plan must call it at the same step.
func (w *Worker) GatherTraffic(ctx context.Context) (int64, error) {
	var g Group
	for _, stages := range w.plan.Replicas {
		for _, st := range stages {
			if st.Node == w.tr.Self() {
				g.Self = len(g.Members)
			}
			g.Members = append(g.Members, st.Node)
		}
	}
	pipe, sync := w.BytesSent()
	if w.peers.joiningSelf() {
		// A joiner is retired on the others until admitted: they do not send to it.
		return pipe + sync, nil
	}
	k := w.roundKey(trafficIndex)
	var total float64
	for i, m := range g.Members {
		if gone, _ := w.peers.anyRetired(m); gone && i != g.Self {
			continue
		}
		// Every live member sends to every other under its own number, as allGatherScalars.
		if i == g.Self {
			total += float64(pipe + sync)
			continue
		}
		f := &frame.Frame{Kind: frame.KindScalar, DType: frame.DTypeU8, Job: k.job, Epoch: k.epoch, Step: k.step,
			Micro: uint16(g.Self), Index: k.index, Shape: []int{8}, Payload: binary.LittleEndian.AppendUint64(nil, math.Float64bits(float64(pipe+sync)))}
		if err := w.tr.Send(ctx, m, f); err != nil {
			return 0, fmt.Errorf("traffic totals: %w", err)
		}
	}
	for i, m := range g.Members {
		if gone, _ := w.peers.anyRetired(m); gone || i == g.Self {
			continue
		}
		rctx, cancel := w.peers.untilRetired(ctx, m)
		f, err := w.tr.Recv(rctx, m, frame.Key{Kind: frame.KindScalar, Job: k.job, Epoch: k.epoch, Step: k.step, Micro: uint16(i), Index: k.index})
		cancel()
		if err != nil {
			if gone, _ := w.peers.anyRetired(m); gone && ctx.Err() == nil {
				continue
			}
			return 0, fmt.Errorf("traffic totals: %w", err)
		}
		if len(f.Payload) != 8 {
			return 0, fmt.Errorf("traffic totals: scalar from %s has %d bytes", m, len(f.Payload))
		}
		total += math.Float64frombits(binary.LittleEndian.Uint64(f.Payload))
	}
	return int64(total), nil
}
