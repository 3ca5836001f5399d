package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// TestTrainOuterAuto: --outer-lr and --outer-momentum default to auto, which trains exactly
// as the numbers jobspec.AutoOuter chooses for the run's outer steps pinned by hand, and
// unlike another pinned pair; a bad value is one usage error naming the flag.
func TestTrainOuterAuto(t *testing.T) {
	data := corpus(t)
	run := func(extra ...string) string {
		args := smallTrain(data, append([]string{"--replicas", "2", "--inner-steps", "4", "--transport", "memory"}, extra...)...)
		code, out, errs := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, errs)
		}
		return losses(t, out)
	}
	lr, m := jobspec.AutoOuter(jobspec.OuterSteps(12, 4))
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	auto := run()
	if pinned := run("--outer-lr", f(lr), "--outer-momentum", f(m)); pinned != auto {
		t.Fatalf("auto trains unlike its choice %v/%v pinned:\n%s\n%s", lr, m, auto, pinned)
	}
	if other := run("--outer-lr", f(lr/2), "--outer-momentum", f(m)); other == auto {
		t.Fatalf("outer lr %v trains like auto's %v: the flag is ignored", lr/2, lr)
	}
	for _, c := range []struct{ flag, value, want string }{
		{"--outer-lr", "fast", `--outer-lr: must be "auto" or a number, got "fast"`},
		{"--outer-lr", "0", `--outer-lr: must be "auto" or > 0 and ≤ 10, got 0`},
		{"--outer-momentum", "1", `--outer-momentum: must be "auto" or ≥ 0 and < 1, got 1`},
	} {
		code, out, errs := runCLI(t, smallTrain(data, "--replicas", "2", c.flag, c.value)...)
		if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.flag, c.value, code, out, errs, c.want)
		}
	}
}
