package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runPlan(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"plan"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

type planJSON struct {
	Scenario string `json:"scenario"`
	Seed     uint64 `json:"seed"`
	Plans    []struct {
		Strategy      string  `json:"strategy"`
		SimulatedStep float64 `json:"simulated_step_s"`
		PredictedStep float64 `json:"predicted_step_s"`
		RatioToEven   float64 `json:"ratio_to_even"`
		MicroBatches  int     `json:"micro_batches"`
		Replicas      [][]struct {
			Node   string `json:"node"`
			Layers [2]int `json:"layers"`
		} `json:"replicas"`
		Error string `json:"error"`
	} `json:"plans"`
}

func TestPlanSimulateScenarioJSON(t *testing.T) {
	code, out, errOut := runPlan(t, "--simulate", "--scenario", "geo3", "--seed", "2", "--strategy", "all", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r planJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if r.Scenario != "geo3" || r.Seed != 2 || len(r.Plans) != 4 {
		t.Fatalf("report %+v", r)
	}
	step := map[string]float64{}
	for _, p := range r.Plans {
		if p.Strategy == "optimal" {
			if !strings.Contains(p.Error, "optimal") {
				t.Errorf("optimal on 12 nodes should be refused, got %q", p.Error)
			}
			continue
		}
		if p.Error != "" || p.SimulatedStep <= 0 || p.PredictedStep <= 0 || p.MicroBatches < 1 || p.RatioToEven <= 0 {
			t.Fatalf("plan %+v", p)
		}
		for _, rep := range p.Replicas {
			next := 0
			for _, st := range rep {
				if st.Layers[0] != next || st.Layers[1] <= next || st.Node == "" {
					t.Fatalf("%s: bad layer map %+v", p.Strategy, rep)
				}
				next = st.Layers[1]
			}
			if next != 50 {
				t.Fatalf("%s: replica covers %d of 50 layers", p.Strategy, next)
			}
		}
		step[p.Strategy] = p.SimulatedStep
	}
	if step["auto"] > step["sky"]/2 {
		t.Errorf("auto %.3g s vs sky %.3g s", step["auto"], step["sky"])
	}
}

func TestPlanSimulateFilesText(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nodes := write("nodes.json", `[{"id":"fast","gflops":200,"memory_bytes":8000000000},
		{"id":"slow","gflops":50,"memory_bytes":8000000000},{"id":"far","gflops":200,"memory_bytes":8000000000}]`)
	links := write("links.json", `[{"from":"fast","to":"slow","rtt_seconds":0.001,"bandwidth_bytes_per_second":1e9},
		{"from":"slow","to":"fast","rtt_seconds":0.001,"bandwidth_bytes_per_second":1e9}]`)
	mdl := write("model.yaml", "layers: 6\nd_model: 128\nheads: 4\ncontext: 64\n")
	code, out, errOut := runPlan(t, "--simulate", "--nodes", nodes, "--links", links, "--model", mdl, "--batch", "8", "--strategy", "all")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"STRATEGY", "even", "sky", "auto", "optimal", "replica 0 (batch", "fast[0,"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestPlanUsageErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`[{"id":"a","speed":1}]`), 0o644)
	for _, args := range [][]string{
		{"--scenario", "geo3"},
		{"--simulate"},
		{"--simulate", "--scenario", "moon"},
		{"--simulate", "--scenario", "geo3", "--nodes", bad},
		{"--simulate", "--scenario", "geo3", "--strategy", "fastest"},
		{"--simulate", "--nodes", bad},
		{"--simulate", "--nodes", filepath.Join(dir, "missing.json")},
		{"--simulate", "--scenario", "geo3", "--batch", "0"},
		{"--simulate", "--scenario", "geo3", "--heads", "5"},
		{"--simulate", "--scenario", "geo3", "-o", "yaml"},
	} {
		if code, _, errOut := runPlan(t, args...); code != 2 || !strings.HasPrefix(errOut, "meshnode: ") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, errOut)
		}
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--offload", "sometimes"}, "--offload: must be one of auto, on, off"},
		{[]string{"--recompute", "always"}, "--recompute: must be one of auto, on, off"},
		{[]string{"--zero", "3"}, "--zero: must be 0, 1 or 2"},
		{[]string{"--zero", "1"}, "--zero: 1 shards what replicas synchronise every step: it needs --sync sync"},
		{[]string{"--zero", "2", "--sync", "sync"}, "--zero: 2 reduces shards uncompressed: it needs --compression 1"},
	} {
		code, out, errOut := runPlan(t, append([]string{"--simulate", "--scenario", "geo3"}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.flag) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 naming %q", tc.args, code, out, errOut, tc.flag)
		}
	}
}

// TestPlanSimulateShowsMemoryChoices: a node smaller than the model's training state gets a
// stage that recomputes and offloads, in text and JSON; a ZeRO job's stages say their stage.
func TestPlanSimulateShowsMemoryChoices(t *testing.T) {
	nodes := filepath.Join(t.TempDir(), "nodes.json")
	os.WriteFile(nodes, []byte(`[{"id":"a","gflops":50,"memory_bytes":8000000,"disk_read_bps":1e9,"disk_write_bps":5e8}]`), 0o644)
	code, out, errOut := runPlan(t, "--simulate", "--nodes", nodes, "--strategy", "auto", "--batch", "4")
	if code != 0 || !strings.Contains(out, "a[0,6)+recompute+offload ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = runPlan(t, "--simulate", "--nodes", nodes, "--strategy", "auto", "--batch", "4", "-o", "json")
	var r struct {
		Plans []struct {
			Replicas [][]struct {
				Recompute    bool  `json:"recompute"`
				OffloadBytes int64 `json:"offload_bytes"`
				MemoryBudget int64 `json:"memory_budget"`
				Zero         *int  `json:"zero"`
				MemoryBytes  int64 `json:"memory_bytes"`
			} `json:"replicas"`
		} `json:"plans"`
	}
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || len(r.Plans) != 1 {
		t.Fatalf("exit %d, %v, stdout %q, stderr %q", code, err, out, errOut)
	}
	st := r.Plans[0].Replicas[0][0]
	if !st.Recompute || st.OffloadBytes <= 0 || st.MemoryBudget <= 0 || st.Zero == nil || *st.Zero != 0 || st.MemoryBytes > 8000000 {
		t.Fatalf("stage %+v: want recompute, offload, a budget, zero 0, within 8 MB", st)
	}
	code, out, errOut = runPlan(t, "--simulate", "--scenario", "sky64", "--strategy", "auto", "--sync", "sync", "--compression", "1", "--zero", "2")
	if code != 0 || !strings.Contains(out, "+zero2") {
		t.Fatalf("zero 2: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestPlanInfeasibleNodes(t *testing.T) {
	dir := t.TempDir()
	nodes := filepath.Join(dir, "nodes.json")
	os.WriteFile(nodes, []byte(`[{"id":"tiny","gflops":10,"memory_bytes":1000}]`), 0o644)
	code, out, errOut := runPlan(t, "--simulate", "--nodes", nodes, "--strategy", "auto")
	if code != 1 || !strings.Contains(errOut, "short by") || !strings.Contains(out, "no plan") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
