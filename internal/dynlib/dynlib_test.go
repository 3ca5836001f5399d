//go:build cgo && linux && (amd64 || arm64)

package dynlib

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/ebitengine/purego"
)

// TestErrorIsTheCallersOwn: goroutines failing to open different libraries at once each
// get the loader's message for their own path. With purego.Dlopen alone, 8 goroutines of
// 3000 calls each got about 40 wrong messages per run here (empty ones, and other
// goroutines' paths).
func TestErrorIsTheCallersOwn(t *testing.T) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	wrong := map[string]int{}
	for g := range 8 {
		wg.Go(func() {
			path := fmt.Sprintf("/nonexistent/meshnode-dynlib-%d.so", g)
			for range 3000 {
				h, err := Open(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
				if err == nil || !strings.Contains(err.Error(), path) {
					mu.Lock()
					wrong[fmt.Sprintf("%x %v", h, err)]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(wrong) > 0 {
		t.Fatalf("errors that were not the call's own: %v", wrong)
	}
}
