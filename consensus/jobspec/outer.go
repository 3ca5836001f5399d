package jobspec

import (
	"fmt"
	"math"
)

// OuterSteps is the number of synchronisations a job of steps steps makes with innerSteps
// local steps between them: DiLoCo's outer steps, or streaming's syncs of each fragment.
// It is ⌈steps/innerSteps⌉, since the last step always synchronises; 0 when either is < 1.
func OuterSteps(steps, innerSteps int) int {
	if steps < 1 || innerSteps < 1 {
		return 0
	}
	return (steps-1)/innerSteps + 1
}

// autoOuterRow is one row of the outer-step schedule: jobs with up to UpTo outer steps
// take (LR, Momentum).
type autoOuterRow struct {
	UpTo         int
	LR, Momentum float64
}

// autoOuter is the schedule outer_lr/outer_momentum "auto" follow, from the grid measured
// in docs/PERFORMANCE.md ("Outer step by the number of outer steps (issue 17)"). A bound
// lies at the geometric mean of the measured counts either side (√(6·12) ≈ 8,
// √(100·200) ≈ 141); the last row covers every longer job.
var autoOuter = []autoOuterRow{
	{UpTo: 8, LR: 0.7, Momentum: 0.5},           // best at 6 outer steps, both seeds
	{UpTo: 141, LR: 1.0, Momentum: 0.5},         // best at 25–100, at 12 on seed 1 and the default model
	{UpTo: math.MaxInt, LR: 0.7, Momentum: 0.9}, // best at 200 (2.6% below 1.0/0.5)
}

// AutoOuter is the outer (learning rate, momentum) that "auto" chooses for a job with
// outerSteps outer steps (OuterSteps).
func AutoOuter(outerSteps int) (lr, momentum float64) {
	for _, r := range autoOuter {
		if outerSteps <= r.UpTo {
			return r.LR, r.Momentum
		}
	}
	last := autoOuter[len(autoOuter)-1]
	return last.LR, last.Momentum
}

// Outer is the outer step the job runs: each of parallel.outer_lr and
// parallel.outer_momentum as pinned, or for "auto" AutoOuter's value for the job's outer
// steps (train.steps over parallel.inner_steps).
func (s Spec) Outer() (lr, momentum float64) {
	return ResolveOuter(s.Parallel.OuterLR, s.Parallel.OuterMomentum, s.Train.Steps, s.Parallel.InnerSteps)
}

// ResolveOuter is the outer step of a job of steps steps with innerSteps between
// synchronisations: lr and momentum as pinned, "auto" as AutoOuter chooses.
func ResolveOuter(lr, momentum AutoFloat, steps, innerSteps int) (float64, float64) {
	alr, am := AutoOuter(OuterSteps(steps, innerSteps))
	return lr.Or(alr), momentum.Or(am)
}

// CheckOuterLR reports an outer learning rate that is not "auto" and not a number in
// (0, MaxOuterLR].
func (a AutoFloat) CheckOuterLR(field string) error {
	if a.IsAuto || (a.V > 0 && a.V <= MaxOuterLR) {
		return nil
	}
	return fmt.Errorf("%s: must be \"auto\" or > 0 and ≤ %d, got %v", field, MaxOuterLR, a.V)
}

// CheckOuterMomentum reports an outer momentum that is not "auto" and not in [0, 1).
func (a AutoFloat) CheckOuterMomentum(field string) error {
	if a.IsAuto || (a.V >= 0 && a.V < 1) {
		return nil
	}
	return fmt.Errorf("%s: must be \"auto\" or ≥ 0 and < 1, got %v", field, a.V)
}
