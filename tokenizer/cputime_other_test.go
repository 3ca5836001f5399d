//go:build !unix

package tokenizer

func cpuSeconds() float64 { return 0 }
