//go:build unix

package tokenizer

import "syscall"

// cpuSeconds is the process's user+system CPU time: the benchmarks report MB per CPU-second
// as well as per wall-second, because the wall clock of a shared machine measures its
// neighbours too.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
