//go:build amd64 && !noasm

package kernels

import (
	"time"

	"golang.org/x/sys/cpu"
)

// hasAVX512 and hasAVX2 say which SIMD kernels this CPU (and OS) can run and CPUEnv
// allows.
var (
	hasAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512BW && cpuLimit >= levelAVX512
	hasAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpuLimit >= levelAVX2
)

func cpuFeatures() []string {
	var fs []string
	for _, f := range []struct {
		name string
		has  bool
	}{
		{"sse4.2", cpu.X86.HasSSE42}, {"avx", cpu.X86.HasAVX}, {"avx2", cpu.X86.HasAVX2},
		{"fma", cpu.X86.HasFMA}, {"avx512f", cpu.X86.HasAVX512F}, {"avx512bw", cpu.X86.HasAVX512BW},
		{"avx512vl", cpu.X86.HasAVX512VL}, {"avx512bf16", cpu.X86.HasAVX512BF16},
		{"amx", cpu.X86.HasAMXTile},
	} {
		if f.has {
			fs = append(fs, f.name)
		}
	}
	return fs
}

//go:noescape
func fmaPeakAVX2(iters int)

//go:noescape
func fmaPeakAVX512(iters int)

// fmaPeak times the register-only FMA loop of path: 12 ymm chains (192 FLOP per
// iteration) or 24 zmm chains (768).
func fmaPeak(path string, iters int) (float64, bool) {
	run, perIter := fmaPeakAVX2, 192.0
	switch {
	case path == "avx2" && cpu.X86.HasAVX2 && cpu.X86.HasFMA:
	case path == "avx512" && cpu.X86.HasAVX512F:
		run, perIter = fmaPeakAVX512, 768
	default:
		return 0, false
	}
	run(1000)
	start := time.Now()
	run(iters)
	return perIter * float64(iters) / time.Since(start).Seconds(), true
}
