package parallel

import "github.com/meshnode/meshnode/consensus/jobspec"

// op is one step of a stage's schedule: the forward or backward pass of a micro-batch.
type op struct {
	backward bool
	micro    int
}

// stageOps is the order in which stage s of S runs the forward and backward passes of M
// micro-batches. Backward passes always run in micro-batch order 0, 1, …, so gradients
// accumulate in the same order as in one process and the results are bit-identical.
func stageOps(sched jobspec.Schedule, s, S, M int) []op {
	ops := make([]op, 0, 2*M)
	if sched == jobspec.ScheduleGPipe {
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
