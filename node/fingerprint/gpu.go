package fingerprint

import (
	"context"

	"github.com/meshnode/meshnode/mesh"
)

// gpuDetector lists the GPUs NVML reports: in-process through libnvidia-ml (a cgo build,
// gpu_nvml_dlopen.go), through nvidia-smi (a static build, gpu_smi_detect.go), or none
// (-tags nonvml). No driver or no device is no GPU, not an error.
type gpuDetector struct {
	detect func() ([]mesh.GPU, error)
}

func (d *gpuDetector) Name() string { return "GPU detection" }

// Detect fills the GPU list; on an error the list stays empty.
func (d *gpuDetector) Detect(_ context.Context, p *mesh.Profile) error {
	gpus, err := d.detect()
	if err != nil {
		return err
	}
	if gpus != nil {
		p.GPUs = gpus
	}
	return nil
}
