package main

import (
	"os"
	"testing"

	"github.com/meshnode/meshnode/internal/testbin"
)

func TestMain(m *testing.M) { os.Exit(testbin.Run(m)) }

// meshnodeBinary is the meshnode binary for tests that exec it, built once per run.
//
// Three tests that run meshnode processes and only wait on them (two joins, testnet
// up/kill/partition/down, a job end to end) run in parallel with each other (t.Parallel,
// after the package's serial tests). Two stay serial: --compare's end-to-end test trains
// against a 30 s wall-clock budget, and the leader kill (37-50 s alone, with waits of 20
// to 90 s for each stage) failed once in seven runs beside the testnet tests on the loaded
// 2-core machine, after 61 s, for a reason not found (alone it passed both runs).
func meshnodeBinary(t testing.TB) string { return testbin.Meshnode(t) }
