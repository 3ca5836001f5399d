package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	path string
	err  error
)

// Run is the body of a TestMain: it runs the tests, then removes the binary if one was
// built, and returns the exit code.
func Run(m *testing.M) int {
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	return code
}

// Meshnode returns the path of a meshnode binary: $MESHNODE_TESTNET_BIN when set (a
// prebuilt one), else cmd/meshnode built on first use, so tests that do not exec it do
// not pay for the link.
func Meshnode(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("MESHNODE_TESTNET_BIN"); bin != "" {
		return bin
	}
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "meshnode-test-bin-"); err != nil {
			return
		}
		path = filepath.Join(dir, "meshnode")
		out, buildErr := exec.Command("go", "build", "-o", path, "github.com/meshnode/meshnode/cmd/meshnode").CombinedOutput()
		if buildErr != nil {
			err = fmt.Errorf("go build: %v\n%s", buildErr, out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}
