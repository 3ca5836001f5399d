package testutil

import (
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

// LevelTrace is below slog.LevelDebug: the level raft's hclog trace lines map to.
const LevelTrace = slog.Level(-8)

// Logger returns a logger that writes to t.Log until the test ends, at level Warn, or every
// line when MESHNODE_TEST_LOG=debug. Lines written after the test ended (by goroutines still
// stopping) are dropped instead of panicking the test binary.
func Logger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.close) // registered early, so it runs after cleanups that stop nodes
	level := slog.LevelWarn
	if os.Getenv("MESHNODE_TEST_LOG") == "debug" {
		level = LevelTrace
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}
