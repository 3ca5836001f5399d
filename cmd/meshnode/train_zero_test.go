package main

import (
	"strings"
	"testing"
)

// TestTrainZeroSameLosses: a split run of 2 replicas × 2 stages over real QUIC data planes
// trains with the same losses (printed exactly) under --zero 1 and --zero 2 as unsharded
// --sync sync.
func TestTrainZeroSameLosses(t *testing.T) {
	if testing.Short() {
		t.Skip("trains three split runs over QUIC")
	}
	data := corpus(t)
	split := []string{"--replicas", "2", "--stages", "2", "--sync", "sync"}
	_, plain, errs := runCLI(t, smallTrain(data, split...)...)
	want := losses(t, plain)
	for _, z := range []string{"1", "2"} {
		code, out, errs2 := runCLI(t, smallTrain(data, append(split, "--zero", z)...)...)
		if code != 0 {
			t.Fatalf("--zero %s: exit %d: %s", z, code, errs2)
		}
		if got := losses(t, out); got != want {
			t.Fatalf("--zero %s: losses differ from unsharded sync:\n%s\n%s\n%s%s", z, got, want, errs, errs2)
		}
	}
}

// TestTrainZeroBadInput: --zero with DiLoCo, out of range or with a codec is one usage
// error naming --zero, exit 2, nothing written to stdout.
func TestTrainZeroBadInput(t *testing.T) {
	data := corpus(t)
	for _, extra := range [][]string{
		{"--replicas", "2", "--sync", "diloco", "--zero", "1"},
		{"--replicas", "2", "--zero", "2"}, // diloco is the default
		{"--replicas", "2", "--sync", "sync", "--zero", "3"},
		{"--replicas", "2", "--sync", "sync", "--codec", "int8", "--zero", "1"},
		{"--sync", "diloco", "--zero", "1"}, // a single process
	} {
		code, out, errs := runCLI(t, smallTrain(data, extra...)...)
		if code != 2 || out != "" || !strings.Contains(errs, "--zero") || strings.Count(strings.TrimSpace(errs), "\n") > 1 {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q; want exit 2, nothing written, one error naming --zero", extra, code, out, errs)
		}
	}
}
