//go:build !amd64 || noasm

package kernels

func cpuFeatures() []string { return nil }

func fmaPeak(string, int) (float64, bool) { return 0, false }
