package parallel

import "fmt"

// Schedule names a pipeline schedule.
type Schedule string

const (
	// GPipe runs every micro-batch forward, then every micro-batch backward.
	GPipe Schedule = "gpipe"
	// OneFOneB (PipeDream-Flush) runs S−s−1 warm-up forwards on stage s, then alternates one
	// forward and one backward, then drains the remaining backwards: the same bubble as
	// GPipe with at most S−s micro-batches' activations held.
	OneFOneB Schedule = "1f1b"
)

// ParseSchedule accepts "1f1b" or "gpipe".
func ParseSchedule(s string) (Schedule, error) {
	switch Schedule(s) {
	case GPipe, OneFOneB:
		return Schedule(s), nil
	}
	return "", fmt.Errorf("schedule must be 1f1b or gpipe (got %q)", s)
}

// op is one step of a stage's schedule: the forward or backward pass of a micro-batch.
type op struct {
	backward bool
	micro    int
}

// stageOps is the order in which stage s of S runs the forward and backward passes of M
// micro-batches. Backward passes always run in micro-batch order 0, 1, …, so gradients
// accumulate in the same order as in one process and the results are bit-identical.
func stageOps(sched Schedule, s, S, M int) []op {
	ops := make([]op, 0, 2*M)
	if sched == GPipe {
		for m := 0; m < M; m++ {
			ops = append(ops, op{micro: m})
		}
		for m := 0; m < M; m++ {
			ops = append(ops, op{backward: true, micro: m})
		}
		return ops
	}
	warm := min(S-s-1, M)
	f, b := 0, 0
	for ; f < warm; f++ {
		ops = append(ops, op{micro: f})
	}
	for f < M {
		ops = append(ops, op{micro: f})
		f++
		ops = append(ops, op{backward: true, micro: b})
		b++
	}
	for ; b < M; b++ {
		ops = append(ops, op{backward: true, micro: b})
	}
	return ops
}

// BubbleFraction is the idle share of a synchronous pipeline schedule (GPipe or 1F1B)
// with S stages of equal cost and M micro-batches: (S−1)/(M+S−1).
func BubbleFraction(S, M int) float64 { return float64(S-1) / float64(M+S-1) }
