//go:build !(cgo && linux && (amd64 || arm64))

package cuda

import (
	"strings"
	"testing"
)

// TestOpenUnsupported: a build that cannot load the driver says why in one line.
func TestOpenUnsupported(t *testing.T) {
	b, err := Open(DefaultConfig())
	if b != nil || err == nil || strings.Contains(err.Error(), "\n") {
		t.Fatalf("got %v, %v", b, err)
	}
	if !strings.Contains(err.Error(), "CGO_ENABLED=0") && !strings.Contains(err.Error(), "unsupported") {
		t.Fatalf("error %q does not say why", err)
	}
	if _, err := Open(Config{Ordinal: -1}); err == nil || !strings.Contains(err.Error(), "ordinal") {
		t.Fatalf("an invalid config was not refused first: %v", err)
	}
}
