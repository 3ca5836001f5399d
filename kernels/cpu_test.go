package kernels

import "testing"

func TestParseCPULimit(t *testing.T) {
	for v, want := range map[string]cpuLevel{"": levelAVX512, "AVX512": levelAVX512, "avx2": levelAVX2, " generic ": levelGeneric, "go": levelGeneric} {
		if got, err := parseCPULimit(v); err != nil || got != want {
			t.Errorf("parseCPULimit(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	if _, err := parseCPULimit("sse9"); err == nil {
		t.Error("parseCPULimit(sse9): no error")
	}
}

// TestCPUPathsFollowLimit checks that the paths the kernels dispatch to are never wider
// than CPUEnv allows (run the package's tests with MESHNODE_CPU=avx2 to exercise it).
func TestCPUPathsFollowLimit(t *testing.T) {
	width := map[string]cpuLevel{"go": levelGeneric, "avx2": levelAVX2, "avx512": levelAVX512}
	info := CPU()
	for _, p := range []string{info.Gemm, info.Vector} {
		w, ok := width[p]
		if !ok || w > cpuLimit {
			t.Errorf("path %q with %s=%q", p, CPUEnv, info.Limit)
		}
	}
	if info.Gemm != info.Vector {
		t.Errorf("GEMM path %s, vector path %s: one CPU level should pick both", info.Gemm, info.Vector)
	}
}
