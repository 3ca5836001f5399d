package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/meshnode/meshnode/kernels"
)

// cpuRecord is the first line of `bench --gemm`: the machine every figure below comes
// from, the kernel paths chosen, and the one-core FMA peak of the GEMM path.
type cpuRecord struct {
	Kind     string   `json:"kind"`
	Model    string   `json:"model"`
	Features []string `json:"features"`
	Limit    string   `json:"limit,omitempty"` // $MESHNODE_CPU
	Gemm     string   `json:"gemm_path"`
	Vector   string   `json:"vector_path"`
	// PeakGFLOPS is the fp32 FMA peak of one core on the GEMM path (0 for the Go path).
	PeakGFLOPS float64 `json:"peak_gflops_1t"`
}

// peakIters is the FMA loop length of the peak measurement: ~0.1 s at 2 TFLOP/s-core.
const peakIters = 1 << 18

// measureCPU fills a cpuRecord, timing the FMA peak three times and keeping the best (a
// peak is what the core reaches when nothing else runs on it).
func measureCPU() (cpuRecord, error) {
	if err := kernels.CheckCPUEnv(); err != nil {
		return cpuRecord{}, usageError{err: err}
	}
	info := kernels.CPU()
	r := cpuRecord{Kind: "cpu", Model: cpuModel(), Features: info.Features, Limit: info.Limit, Gemm: info.Gemm, Vector: info.Vector}
	for range 3 {
		if f, ok := kernels.FMAPeak(info.Gemm, peakIters); ok {
			r.PeakGFLOPS = max(r.PeakGFLOPS, roundTo(f/1e9, 1))
		}
	}
	return r, nil
}

// cpuModel is the "model name" of /proc/cpuinfo, or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func printCPURecord(out io.Writer, output string, r cpuRecord) error {
	if output == "json" {
		return json.NewEncoder(out).Encode(r)
	}
	limit := ""
	if r.Limit != "" {
		limit = fmt.Sprintf(" (%s=%s)", kernels.CPUEnv, r.Limit)
	}
	_, err := fmt.Fprintf(out, "cpu    %s [%s]\npath   gemm %s, vector %s%s; FMA peak %.1f GFLOP/s per core\n",
		r.Model, strings.Join(r.Features, " "), r.Gemm, r.Vector, limit, r.PeakGFLOPS)
	return err
}
