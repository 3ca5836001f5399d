package parallel

import (
	"context"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/device/devicetest"
)

// TestTrainerRunsOnTheConfiguredBackend trains through TrainConfig.Backend on the emulated
// device (tensors the host reaches only through copies, as a GPU's) and requires the CPU's
// losses bit for bit: the backend reaches every layer of the stage.
func TestTrainerRunsOnTheConfiguredBackend(t *testing.T) {
	cfg, data := offloadTestConfig(t)
	cfg.Steps = 4
	losses := func(cfg TrainConfig) []float64 {
		tr, err := NewTrainer(cfg, data)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		var out []float64
		for range cfg.Steps {
			l, err := tr.Step(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		return out
	}
	want := losses(cfg)
	emu := devicetest.NewEmulated()
	cfg.Backend = &countingBackend{Emulated: emu}
	got := losses(cfg)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: loss %v on the emulated device, %v on the CPU", i+1, got[i], want[i])
		}
	}
	if cfg.Backend.(*countingBackend).allocs == 0 {
		t.Fatal("the emulated backend allocated nothing: the trainer did not use it")
	}
}

// countingBackend counts the allocations the workspace makes on it.
type countingBackend struct {
	devicetest.Emulated
	allocs int
}

func (c *countingBackend) Alloc(n int, dtype device.DType) device.Tensor {
	c.allocs++
	return c.Emulated.Alloc(n, dtype)
}

// TestDeviceBackendRefusesPipelineStages: a plan of several stages cannot run on a device
// backend yet, and says so.
func TestDeviceBackendRefusesPipelineStages(t *testing.T) {
	cfg, data := offloadTestConfig(t)
	cfg.Backend = devicetest.NewEmulated()
	job := JobConfig{Train: cfg, Schedule: jobspec.Schedule1F1B, Sync: DefaultSyncConfig(), Job: 1}
	_, err := NewWorker(job, EvenPlan(cfg.Model.Layers+2, []string{"a", "b"}), "a", nil, data)
	if err == nil || !strings.Contains(err.Error(), "one stage per replica") {
		t.Fatalf("got %v, want a refusal of the two-stage plan", err)
	}
}
