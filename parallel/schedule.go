package parallel

import "math"

// LearningRate is the schedule of docs/gpt.md for 0-based step s of steps: linear warm-up
// max_lr·(s+1)/warmup for s < warmup, then a cosine from max_lr down to 0.1·max_lr at the
// last step.
func LearningRate(s int, maxLR float64, warmup, steps int) float64 {
	if s < warmup {
		return maxLR * float64(s+1) / float64(warmup)
	}
	if steps <= warmup {
		return maxLR
	}
	t := math.Min(1, float64(s-warmup)/float64(max(1, steps-warmup)))
	return 0.1*maxLR + 0.9*maxLR*0.5*(1+math.Cos(math.Pi*t))
}
