//go:build !nonvml && !(cgo && linux && (amd64 || arm64))

package fingerprint

import (
	"context"
	"time"

	"github.com/meshnode/meshnode/mesh"
)

// smiCommand is NVML's command-line tool, found on PATH as the driver installs it.
const smiCommand = "nvidia-smi"

// smiTimeout bounds one nvidia-smi run (it answers in well under a second on a healthy
// driver; a wedged one must not hold up the node's start).
const smiTimeout = 10 * time.Second

// GPUDetection says how this build finds GPUs, for `meshnode version`.
func GPUDetection() string {
	return "nvidia-smi (NVML's command-line tool; a build without cgo is static and cannot load libnvidia-ml)"
}

// detectGPUs lists NVIDIA GPUs through nvidia-smi, which the driver installs with NVML. A
// static binary cannot load a shared library, so this is how a CGO_ENABLED=0 build (the
// default where no C compiler is installed) reads NVML. No nvidia-smi, no driver or no
// device is not an error: it reports no GPU.
func detectGPUs() ([]mesh.GPU, error) {
	ctx, cancel := context.WithTimeout(context.Background(), smiTimeout)
	defer cancel()
	return gpusFromSMI(ctx, smiCommand)
}
