package main

import (
	"os"
	"runtime/debug"
)

// memoryLimitHeadroomMin is the least headroom of the Go runtime's soft memory limit above
// a memory budget: what a process holds beside the training the budget counts (the
// mesh, Raft and the API of a node, the dataset, the runtime and its garbage; 252–317 MiB
// of a 100M-parameter `train` run, docs/PERFORMANCE.md). A limit below the live heap would
// make the collector run all the time, so the headroom errs on the generous side.
const memoryLimitHeadroomMin = 256 << 20

// memoryLimitFor is the soft memory limit of a process whose training keeps to budget
// bytes: the budget plus a quarter of it, at least memoryLimitHeadroomMin more
// (docs/memory.md, "The Go runtime's memory limit").
func memoryLimitFor(budget uint64) int64 {
	const maxLimit = 1<<63 - 1
	headroom := max(budget/4, memoryLimitHeadroomMin)
	if budget > maxLimit-headroom {
		return maxLimit
	}
	return int64(budget + headroom)
}

// applyMemoryLimit sets the Go runtime's soft memory limit (debug.SetMemoryLimit) from a
// memory budget, so that the collector works harder near it instead of letting the heap
// grow to twice its live size, unless the user set GOMEMLIMIT (which the runtime already
// applied; "off" included) or there is no budget. It returns the limit it set, 0 when it
// set none. The process owns this setting, as it owns the thread count.
func applyMemoryLimit(budget uint64) int64 {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set || budget == 0 {
		return 0
	}
	limit := memoryLimitFor(budget)
	debug.SetMemoryLimit(limit)
	return limit
}
