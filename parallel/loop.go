package parallel

import "context"

// Stepper is what a training loop drives: a whole model in one process (Trainer), every
// worker of a plan in one process (LocalRun), or one node's worker of a distributed job.
type Stepper interface {
	// StepsDone is the number of completed steps.
	StepsDone() int
	// Step runs one training step and returns its training loss.
	Step(ctx context.Context) (float64, error)
}

// Hooks are what the training loop calls after each step; a nil hook is skipped. A hook's
// error ends the loop and is returned.
type Hooks struct {
	// Checkpoint is called first after every step, to write a checkpoint when one is due.
	Checkpoint func(ctx context.Context, step int) error
	// Evaluate is called on evaluation steps: every TrainConfig.EvalEvery steps and at the
	// last step of the schedule.
	Evaluate func(ctx context.Context, step int, loss float64) error
	// Progress is called on every other step.
	Progress func(ctx context.Context, step int, loss float64) error
}

// EvalStep reports whether step (the number of completed steps) is an evaluation step of
// the schedule cfg: every EvalEvery steps and the last one.
func EvalStep(cfg TrainConfig, step int) bool {
	return (cfg.EvalEvery > 0 && step%cfg.EvalEvery == 0) || step == cfg.Steps
}

// TrainLoop is the one training loop of the engine: it steps s from its current step up to
// stopAt (≤ cfg.Steps; 0 means cfg.Steps), calling the hooks after each step. It returns
// ctx's error if cancelled between steps; s is then in a consistent state after its last
// completed step.
func TrainLoop(ctx context.Context, s Stepper, cfg TrainConfig, stopAt int, h Hooks) error {
	if stopAt <= 0 || stopAt > cfg.Steps {
		stopAt = cfg.Steps
	}
	for s.StepsDone() < stopAt {
		if err := ctx.Err(); err != nil {
			return err
		}
		loss, err := s.Step(ctx)
		if err != nil {
			return err
		}
		step := s.StepsDone()
		if err := call(ctx, h.Checkpoint, step); err != nil {
			return err
		}
		hook := h.Progress
		if EvalStep(cfg, step) {
			hook = h.Evaluate
		}
		if hook != nil {
			if err := hook(ctx, step, loss); err != nil {
				return err
			}
		}
	}
	return nil
}

func call(ctx context.Context, f func(context.Context, int) error, step int) error {
	if f == nil {
		return nil
	}
	return f(ctx, step)
}
