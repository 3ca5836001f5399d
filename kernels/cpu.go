package kernels

import (
	"fmt"
	"os"
	"strings"
)

// CPUEnv is the environment variable that caps the instruction set every kernel (GEMM and
// the vector kernels alike) may use, read once when the program starts: "avx512" or ""
// (the default: the widest the CPU has), "avx2" (AVX2+FMA even on an AVX-512 CPU) or
// "generic" (the portable Go code). It can only narrow what the CPU supports, so that an
// AVX-512 machine can measure and test the path AVX2-only CPUs run.
const CPUEnv = "MESHNODE_CPU"

// cpuLevel orders the kernel paths by width.
type cpuLevel int

const (
	levelGeneric cpuLevel = iota
	levelAVX2
	levelAVX512
)

// parseCPULimit maps a value of CPUEnv to the widest level it allows.
func parseCPULimit(v string) (cpuLevel, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "auto", "avx512":
		return levelAVX512, nil
	case "avx2":
		return levelAVX2, nil
	case "generic", "go", "none":
		return levelGeneric, nil
	}
	return levelAVX512, fmt.Errorf("kernels: %s=%q: want avx512, avx2 or generic", CPUEnv, v)
}

// cpuLimit is the level CPUEnv allows; an invalid value allows everything (CheckCPUEnv
// reports it).
var cpuLimit, cpuLimitErr = parseCPULimit(os.Getenv(CPUEnv))

// CheckCPUEnv reports an invalid CPUEnv value, which the kernels ignore.
func CheckCPUEnv() error { return cpuLimitErr }

// CPUInfo says what this machine and build run: the SIMD features the CPU reports and the
// paths the kernels chose after CPUEnv.
type CPUInfo struct {
	// Features lists the SIMD features detected ("avx2", "fma", "avx512f", …).
	Features []string
	// Limit is the value of CPUEnv ("" when unset).
	Limit string
	// Gemm is the GEMM path (GemmName): "avx512", "avx2" or "go".
	Gemm string
	// Vector is the path of the vector kernels (GELU, softmax's exp): same names.
	Vector string
}

// CPU reports the features and chosen kernel paths of this process.
func CPU() CPUInfo {
	return CPUInfo{Features: cpuFeatures(), Limit: os.Getenv(CPUEnv), Gemm: GemmName(), Vector: vecBest.name}
}

// FMAPeak measures the fp32 multiply-add peak of one core on the given path ("avx512" or
// "avx2") with a register-only FMA loop of about iters·(flops per iteration) work, and
// returns it in FLOP/s; ok is false when the path is not available here.
func FMAPeak(path string, iters int) (flops float64, ok bool) { return fmaPeak(path, iters) }
