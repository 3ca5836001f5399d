//go:build !(cgo && linux && (amd64 || arm64))

package cuda

import (
	"errors"
	"runtime"

	"github.com/meshnode/meshnode/device"
)

// Backend is the CUDA backend; this build has none (see Open).
type Backend struct{ device.Backend }

// Close does nothing: this build never opens a backend.
func (*Backend) Close() error { return nil }

// Describe says there is no device: this build never opens a backend.
func (*Backend) Describe() string { return "none" }

// Open says why this build has no CUDA backend: a static binary (CGO_ENABLED=0) cannot
// load the driver's shared library, and the driver exists for Linux only.
func Open(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, errUnsupported()
}

func errUnsupported() error {
	if runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64") {
		return errors.New("libcuda.so.1 cannot be loaded: this meshnode is a static build (CGO_ENABLED=0); build with CGO_ENABLED=1 for CUDA")
	}
	return errors.New("CUDA is unsupported on " + runtime.GOOS + "/" + runtime.GOARCH + " (Linux amd64 or arm64 only)")
}
