package balancer

import (
	"errors"
	"fmt"
	"math"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Validate reports every field of the job that cannot be planned, each error naming its
// field.
func (j Job) Validate() error {
	var errs []error
	if len(j.Layers) == 0 {
		errs = append(errs, errors.New("job: layers must list ≥ 1 layer cost (got 0)"))
	}
	if j.Batch < 1 {
		errs = append(errs, fmt.Errorf("job: batch must be ≥ 1 sequence (got %d)", j.Batch))
	}
	if j.Context < 1 {
		errs = append(errs, fmt.Errorf("job: context must be ≥ 1 token (got %d)", j.Context))
	}
	if j.MicroBatches < 0 || (j.Batch >= 1 && j.MicroBatches > j.Batch) {
		errs = append(errs, fmt.Errorf("job: micro_batches must be between 0 (planner chooses) and batch %d (got %d)", j.Batch, j.MicroBatches))
	}
	if j.Schedule != "" {
		errs = append(errs, j.Schedule.Check("job.schedule"))
	}
	if j.Sync.Mode != "" {
		errs = append(errs, j.Sync.Mode.Check("job.sync.mode"))
	}
	if j.Recompute != "" {
		errs = append(errs, j.Recompute.Check("job.recompute"))
	}
	if j.Offload != "" {
		errs = append(errs, j.Offload.Check("job.offload"))
	}
	errs = append(errs, j.validateZero())
	if j.Sync.Fragments < 0 || (len(j.Layers) > 0 && j.Sync.Fragments > len(j.Layers)) {
		errs = append(errs, fmt.Errorf("job: sync.fragments must be between 0 (one) and the %d layers (got %d)", len(j.Layers), j.Sync.Fragments))
	}
	if a := j.Sync.Audit; !(a >= 0 && a <= jobspec.MaxAudit) {
		errs = append(errs, fmt.Errorf("job: sync.audit must be between 0 and %d (got %g)", jobspec.MaxAudit, a))
	}
	if j.Sync.InnerSteps < 0 {
		errs = append(errs, fmt.Errorf("job: sync.inner_steps must be ≥ 0 (got %d)", j.Sync.InnerSteps))
	}
	if c := j.Sync.Compression; c != 0 && !(c >= 1) || math.IsInf(c, 0) {
		errs = append(errs, fmt.Errorf("job: sync.compression must be ≥ 1 or 0 for none (got %g)", c))
	}
	for i, l := range j.Layers {
		if l.ForwardFLOPsPerToken < 0 || l.BackwardFLOPsPerToken < 0 || l.ParamBytes < 0 ||
			l.GradBytes < 0 || l.OptimizerBytes < 0 || l.OutputBytesPerToken < 0 || l.SavedBytesPerToken < 0 {
			errs = append(errs, fmt.Errorf("job: layer %d (%s): costs must be ≥ 0", i, l.Name))
		}
	}
	return errors.Join(errs...)
}

// inflight is the number of micro-batches stage s of a pipeline of S stages holds at once.
func inflight(sched jobspec.Schedule, m, stages, s int) int {
	if sched == jobspec.ScheduleGPipe {
		return m
	}
	return min(m, stages-s)
}

// microSizes splits batch sequences into m micro-batches, larger ones first.
func microSizes(batch, m int) []int {
	m = min(m, batch)
	sizes := make([]int, m)
	for i := range sizes {
		sizes[i] = batch / m
		if i < batch%m {
			sizes[i]++
		}
	}
	return sizes
}

// validateZero checks job.zero: 0, 1 or 2, and sharding only where replicas reduce
// uncompressed gradients every step.
func (j Job) validateZero() error {
	switch {
	case j.Zero < 0 || j.Zero > 2:
		return fmt.Errorf("job: zero must be 0, 1 or 2 (got %d)", j.Zero)
	case j.Zero > 0 && j.Sync.Mode != jobspec.SyncEveryStep:
		return fmt.Errorf("job: zero %d shards what replicas synchronise every step: it needs sync.mode %s (got %q)", j.Zero, jobspec.SyncEveryStep, j.Sync.Mode)
	case j.Zero > 0 && j.Sync.Compression > 1:
		return fmt.Errorf("job: zero %d reduces shards uncompressed: it needs sync.compression 1 (got %g)", j.Zero, j.Sync.Compression)
	}
	return nil
}
