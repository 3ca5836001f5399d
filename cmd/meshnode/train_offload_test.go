package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainMemoryBudgetSameLosses: `train --memory-budget` (about a third of the small model's
// ≈ 0.7 MB of training state) trains with the same losses as `train`, reports its
// resident peak within the budget and the process's peak RSS, checkpoints, and resumes
// offloaded with the uninterrupted run's losses; the offload directory is left empty.
func TestTrainMemoryBudgetSameLosses(t *testing.T) {
	data := corpus(t)
	dir := filepath.Join(t.TempDir(), "offload")
	budget := []string{"--memory-budget", "256KiB", "--data-dir", dir}
	_, plain, errs := runCLI(t, smallTrain(data)...)
	code, off, errs2 := runCLI(t, smallTrain(data, budget...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs2)
	}
	if lp, lo := losses(t, plain), losses(t, off); lp != lo {
		t.Fatalf("losses differ with --memory-budget:\n%s\n%s\n%s", lp, lo, errs)
	}
	lines := strings.Split(strings.TrimSpace(off), "\n")
	var done struct {
		Memory memoryJSON `json:"memory"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &done); err != nil {
		t.Fatal(err)
	}
	m := done.Memory
	if m.MemoryBudget != 256<<10 || m.ResidentPeakBytes == 0 || m.ResidentPeakBytes > m.MemoryBudget || m.ReadBytes == 0 {
		t.Errorf("memory report %+v", m)
	}
	// Split into stages (one replica), each stage keeps the budget: the same losses.
	if code, staged, errs := runCLI(t, smallTrain(data, append(budget, "--stages", "2")...)...); code != 0 || losses(t, staged) != losses(t, plain) {
		t.Fatalf("--stages 2: exit %d, losses differ:\n%s\n%s\n%s", code, losses(t, plain), losses(t, staged), errs)
	}
	if _, err := os.Stat("/proc/self/status"); err == nil && m.PeakRSSBytes == 0 {
		t.Error("no peak RSS reported")
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("the offload directory holds %v (%v)", entries, err)
	}
	out := filepath.Join(t.TempDir(), "ckpt")
	if code, _, errs := runCLI(t, smallTrain(data, append(budget, "--out", out, "--stop-at", "6")...)...); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	code, resumed, errs := runCLI(t, append([]string{"train", "--resume", out, "-o", "json"}, budget...)...)
	if code != 0 {
		t.Fatalf("resume: exit %d: %s", code, errs)
	}
	want, _ := parseTrain(t, plain)
	got, _ := parseTrain(t, resumed)
	for s := 7; s <= 12; s++ {
		if *got[s].TrainLoss != *want[s].TrainLoss {
			t.Fatalf("resumed step %d: loss %v, want %v", s, *got[s].TrainLoss, *want[s].TrainLoss)
		}
	}
}

// TestTrainMemoryBudgetBadInput: an impossible budget, a budget without --data-dir, a
// --data-dir without a budget, a malformed size and a split run are one-line usage errors
// naming the flag, exit 2, with nothing written.
func TestTrainMemoryBudgetBadInput(t *testing.T) {
	data := corpus(t)
	dir := t.TempDir()
	off, out := filepath.Join(dir, "offload"), filepath.Join(dir, "out")
	cases := map[string]struct {
		args []string
		want string
	}{
		"impossible":  {[]string{"--memory-budget", "4KiB", "--data-dir", off}, "memory-budget: 4.0 KiB is below the"},
		"no data dir": {[]string{"--memory-budget", "1MiB"}, "--memory-budget needs --data-dir"},
		"no budget":   {[]string{"--data-dir", off}, "--data-dir is the offload directory of --memory-budget"},
		"malformed":   {[]string{"--memory-budget", "lots", "--data-dir", off}, "--memory-budget: \"lots\""},
		"zero":        {[]string{"--memory-budget", "0", "--data-dir", off}, "--memory-budget: \"0\""},
		"replicas":    {[]string{"--memory-budget", "1MiB", "--data-dir", off, "--replicas", "2"}, "--memory-budget works with one replica"},
	}
	for name, c := range cases {
		code, stdout, stderr := runCLI(t, smallTrain(data, append(c.args, "--out", out)...)...)
		if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q (want one line with %q)", name, code, stdout, stderr, c.want)
		}
		for _, p := range []string{off, out} {
			if _, err := os.Stat(p); err == nil {
				t.Fatalf("%s: wrote %s", name, p)
			}
		}
	}
}
