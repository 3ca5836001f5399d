package parallel

import (
	"context"
	"fmt"
)

// everyStep averages every run's gradients across the replicas after each step's
// backward passes (data-parallel sync mode), compressed with error feedback where a codec
// is set. With one replica it is the identity and sends nothing.
type everyStep struct{ baseSync }

func (s everyStep) reduce(ctx context.Context) error {
	w := s.w
	if w.numReplicas == 1 {
		return nil
	}
	return timed(&w.times.Sync, func() error {
		if err := w.mirrorStages(ctx); err != nil {
			return err
		}
		for i, run := range w.runs {
			g := flattenGrads(w.runParams[i])
			w.weigh(g)
			pol := s.gatherPolicy(i)
			if err := allReduceMean(ctx, countingTransport{w}, w.activeGroup(run.group), w.roundKey(run.first), g, w.feedback[i], pol); err != nil {
				return fmt.Errorf("step %d gradient sync of layers [%d, %d): %w", w.step+1, run.first, run.last, err)
			}
			unflattenGrads(w.runParams[i], g)
		}
		return nil
	})
}
