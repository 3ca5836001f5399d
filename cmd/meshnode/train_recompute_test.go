package main

import (
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/parallel"
)

// TestTrainRecomputeSameLosses: `train --recompute` trains bit for bit like `train`, in one
// process and split into two pipeline stages, and the run's checkpoint records that it
// recomputed.
func TestTrainRecomputeSameLosses(t *testing.T) {
	data := corpus(t)
	for _, extra := range [][]string{nil, {"--stages", "2"}} {
		_, plain, errs := runCLI(t, smallTrain(data, extra...)...)
		_, re, errs2 := runCLI(t, smallTrain(data, append(extra, "--recompute")...)...)
		if lp, lr := losses(t, plain), losses(t, re); lp != lr {
			t.Fatalf("%v: losses differ with --recompute:\n%s\n%s\n%s%s", extra, lp, lr, errs, errs2)
		}
	}
	out := filepath.Join(t.TempDir(), "ckpt")
	if code, _, errs := runCLI(t, smallTrain(data, "--recompute", "--out", out, "--stop-at", "2")...); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	ck, err := parallel.LoadCheckpoint(filepath.Join(out, "step-2"))
	if err != nil || !ck.Config.Recompute {
		t.Fatalf("the checkpoint's config does not say recompute: %+v, %v", ck, err)
	}
}
