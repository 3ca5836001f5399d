package main

import (
	"os"
	"testing"

	"github.com/meshnode/meshnode/internal/testbin"
)

func TestMain(m *testing.M) { os.Exit(testbin.Run(m)) }

// meshnodeBinary is the meshnode binary for tests that exec it, built once per run.
func meshnodeBinary(t testing.TB) string { return testbin.Meshnode(t) }
