package parallel

import "time"

// StepTimes splits the wall time of one worker step by where it went. The four parts add
// up to the step's wall time.
type StepTimes struct {
	// Compute is the step's own work: forward and backward passes, encoding and decoding
	// tensors, clipping and the optimizer update (all of the step not counted below).
	Compute time.Duration
	// Transfer is the time spent handing activations and gradients to the transport for
	// the pipeline neighbours (it blocks while the transport's flow control is full).
	Transfer time.Duration
	// Bubble is the time spent waiting for a pipeline neighbour's activation or gradient:
	// the pipeline bubble, including the neighbour's transfer latency.
	Bubble time.Duration
	// Sync is the time spent synchronising: the replicas' gradient all-reduce or DiLoCo
	// outer step, the gradient-norm exchange across stages and the update gate (waiting
	// for the previous checkpoint to be stored).
	Sync time.Duration
}

// timed runs f and adds its wall time to *d.
func timed(d *time.Duration, f func() error) error {
	start := time.Now()
	err := f()
	*d += time.Since(start)
	return err
}
