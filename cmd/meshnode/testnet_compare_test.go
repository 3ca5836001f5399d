package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/testnet"
)

// Bad --compare flags are usage errors: exit 2, the flag named, nothing written.
func TestTestnetCompareUsageErrors(t *testing.T) {
	bin := meshnodeBinary(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--budget", "30s"}, "--budget: only with --compare"},
		{[]string{"--compare", "--budget", "1s"}, "--budget: must be from 10s"},
		{[]string{"--compare", "--variants", "planner,nope"}, `--variants: unknown variant "nope"`},
		{[]string{"--compare", "--variants", "sync,sync"}, `--variants: variant "sync" named twice`},
		{[]string{"--compare", "--wan", "fast"}, "--wan: want BANDWIDTH,LATENCY"},
		{[]string{"--wan", "20mbit,soon"}, "--wan: latency"},
		{[]string{"--compare", "--repeat", "0"}, "--repeat: must be from 1 to 100"},
		{[]string{"--compare", "--eval-every", "0"}, "--eval-every: must be ≥ 1"},
		{[]string{"--compare", "--from", "/nonexistent/run.json"}, "--from: open /nonexistent/run.json"},
	} {
		dir := t.TempDir()
		plot := filepath.Join(dir, "p.svg")
		args := append([]string{"testnet", "run", "--dir", filepath.Join(dir, "tn"), "--plot", plot}, c.args...)
		if !strings.Contains(strings.Join(c.args, " "), "--compare") {
			args = append([]string{"testnet", "run", "--dir", filepath.Join(dir, "tn")}, c.args...)
		}
		cmd := exec.Command(bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%v: %v, stderr %q; want exit 2 with %q", c.args, err, stderr.String(), c.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%v: a usage error wrote %d entries", c.args, len(entries))
		}
	}
}

// One short variant end to end: a fresh testnet, the job cut at the budget and cancelled,
// a curve with the untrained loss and later evaluations, the JSON lines and the plot.
// About a minute on two loaded cores: skipped with -short and under -race (whose
// concurrent packages can starve a 30 s budget of its first evaluated steps).
func TestTestnetCompareEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 2-node testnet and trains for 30 s")
	}
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load")
	}
	bin := meshnodeBinary(t)
	dir := t.TempDir()
	plot := filepath.Join(dir, "ttl.svg")
	out, err := cliTimeout(t, 3*time.Minute, bin, "testnet", "run", "--compare", "--nodes", "2", "--variants", "pipeline",
		"--budget", "30s", "--eval-every", "5", "--wan", "20mbit,80ms", "--plot", plot, "--dir", filepath.Join(dir, "tn"), "-o", "json")
	if err != nil {
		t.Fatalf("testnet run --compare: %v\n%s", err, out)
	}
	var run struct {
		Event string `json:"event"`
		testnet.Trial
	}
	var last map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			t.Fatalf("not a JSON line: %s", sc.Bytes())
		}
		if ev["event"] == "compare_run" {
			if err := json.Unmarshal(sc.Bytes(), &run); err != nil {
				t.Fatal(err)
			}
		}
		last = ev
	}
	if last["event"] != "compare" || run.Variant != "pipeline" || !strings.HasPrefix(run.Plan, "1×") {
		t.Fatalf("last line %v, run %+v", last, run)
	}
	if len(run.Curve) < 2 || run.Curve[0].Step != 0 || run.Curve[len(run.Curve)-1].Loss >= run.Curve[0].Loss {
		t.Fatalf("curve %+v: want the untrained loss and a lower one after", run.Curve)
	}
	for _, p := range run.Curve {
		if p.T > 30 {
			t.Fatalf("evaluation at %.1f s, past the 30 s budget", p.T)
		}
	}
	svg, err := os.ReadFile(plot)
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("<polyline")) {
		t.Fatalf("plot: %v\n%.300s", err, svg)
	}
}

// --from reads earlier -o json outputs: each file's rounds after the previous file's.
func TestLoadCompareRuns(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	run := `{"event":"compare_run","variant":"%s","round":%d,"plan":"1×1","step_time_s":0.3,"steps":10,"curve":[{"t_s":1,"step":0,"val_loss":5.5},{"t_s":9,"step":10,"val_loss":4}],"status":"running"}`
	os.WriteFile(a, []byte(`{"event":"info","message":"x"}`+"\n"+fmt.Sprintf(run, "planner", 0)+"\n"+fmt.Sprintf(run, "sync", 1)+"\n"+
		`{"event":"compare","title":"T","target":4,"budget_s":90}`+"\n"), 0o600)
	os.WriteFile(b, []byte(fmt.Sprintf(run, "planner", 0)+"\n"+`{"event":"compare","title":"U","budget_s":60}`+"\n"), 0o600)
	runs, title, budget, err := loadCompareRuns(a + "," + b)
	if err != nil {
		t.Fatal(err)
	}
	if title != "T" || budget != 90*time.Second || len(runs) != 3 || runs[2].Round != 2 || runs[1].Round != 1 || len(runs[2].Curve) != 2 {
		t.Fatalf("title %q budget %s runs %+v", title, budget, runs)
	}
	if _, _, _, err := loadCompareRuns(filepath.Join(dir, "a.json") + "," + filepath.Join(dir, "none.json")); err == nil {
		t.Fatal("a missing file read")
	}
}
