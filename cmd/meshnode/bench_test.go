package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/kernels"
)

// TestBenchGemmReportsCPU: `bench --gemm -o json` starts with a cpu record naming the
// kernel paths this process uses, then one gemm record per product.
func TestBenchGemmReportsCPU(t *testing.T) {
	code, out, errs := runCLI(t, "bench", "--gemm", "32", "--threads", "1", "--min-time", "1ms", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a cpu and a gemm line, got %q", out)
	}
	var rec cpuRecord
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil || rec.Kind != "cpu" {
		t.Fatalf("first line %q (%v)", lines[0], err)
	}
	info := kernels.CPU()
	if rec.Gemm != info.Gemm || rec.Vector != info.Vector || rec.Model == "" {
		t.Fatalf("cpu record %+v, kernels report %+v", rec, info)
	}
	if rec.Gemm != "go" && rec.PeakGFLOPS <= 0 {
		t.Fatalf("no FMA peak for the %s path: %+v", rec.Gemm, rec)
	}
	var g gemmResult
	if err := json.Unmarshal([]byte(lines[1]), &g); err != nil || g.Kind != "gemm" || g.Impl != info.Gemm {
		t.Fatalf("second line %q (%v)", lines[1], err)
	}
}
