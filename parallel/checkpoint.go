package parallel

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/meshnode/meshnode/model"
)

// A checkpoint of a single-process run is a directory step-N holding:
const (
	// ModelFile: the weights with GPT-2 names (any GPT-2 implementation can load it; its
	// metadata records the model's shape and the step).
	ModelFile = "model.safetensors"
	// OptimizerFile: the AdamW moments, the companion that makes a resumed run exact.
	OptimizerFile = "optimizer.safetensors"
	// TrainerFile: the run's configuration and step, as JSON.
	TrainerFile = "trainer.json"
)

type trainerFile struct {
	Step   int         `json:"step"`
	Config TrainConfig `json:"config"`
}

// StepDir is the name of the checkpoint directory of step n.
func StepDir(n int) string { return "step-" + strconv.Itoa(n) }

// SaveCheckpoint writes the current state to outDir/step-N (created if needed) and
// returns that directory. Each file is written atomically.
func (t *Trainer) SaveCheckpoint(outDir string) (string, error) {
	snap, err := t.w.Snapshot()
	if err != nil {
		return "", fmt.Errorf("checkpoint: the offloaded state is lost: %w", err)
	}
	step, params, opt, optMeta := snap.Step, snap.Model, snap.Optimizer, snap.OptimizerMeta
	dir := filepath.Join(outDir, StepDir(step))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	meta := t.cfg.Model.Metadata()
	meta["step"] = strconv.Itoa(step)
	if err := model.WriteSafetensors(filepath.Join(dir, ModelFile), params, meta); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := model.WriteSafetensors(filepath.Join(dir, OptimizerFile), opt, optMeta); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	b, _ := json.MarshalIndent(trainerFile{Step: step, Config: t.cfg}, "", "  ")
	if err := model.WriteFileAtomic(filepath.Join(dir, TrainerFile), append(b, '\n')); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	return dir, nil
}

// Checkpoint is a checkpoint read back from disk.
type Checkpoint struct {
	Dir       string
	Step      int
	Config    TrainConfig
	Model     *model.TensorFile
	Optimizer *model.TensorFile
}

// LoadCheckpoint reads the checkpoint at path: a step-N directory, or a directory of them
// (an --out directory), in which case the highest step is taken.
func LoadCheckpoint(path string) (*Checkpoint, error) {
	dir, err := latestStepDir(path)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, TrainerFile))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", model.ErrBadCheckpoint, err)
	}
	var tf trainerFile
	if err := json.Unmarshal(b, &tf); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", model.ErrBadCheckpoint, filepath.Join(dir, TrainerFile), err)
	}
	ck := &Checkpoint{Dir: dir, Step: tf.Step, Config: tf.Config}
	if ck.Model, err = model.ReadSafetensors(filepath.Join(dir, ModelFile)); err != nil {
		return nil, err
	}
	if ck.Optimizer, err = model.ReadSafetensors(filepath.Join(dir, OptimizerFile)); err != nil {
		return nil, err
	}
	return ck, nil
}

func latestStepDir(path string) (string, error) {
	if _, err := os.Stat(filepath.Join(path, TrainerFile)); err == nil {
		return path, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return "", fmt.Errorf("%w: %v", model.ErrBadCheckpoint, err)
	}
	best, bestStep := "", -1
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "step-"))
		if e.IsDir() && strings.HasPrefix(e.Name(), "step-") && err == nil && n > bestStep {
			best, bestStep = filepath.Join(path, e.Name()), n
		}
	}
	if best == "" {
		return "", fmt.Errorf("%w: %s holds no %s and no step-N checkpoint directory", model.ErrBadCheckpoint, path, TrainerFile)
	}
	return best, nil
}

// Restore replaces the trainer's weights, optimizer state and step with the checkpoint's.
// The model shapes must match; nothing changes if anything is missing or mis-shaped.
func (t *Trainer) Restore(ck *Checkpoint) error {
	if ck.Step > t.cfg.Steps {
		return fmt.Errorf("checkpoint %s is at step %d, beyond steps = %d", ck.Dir, ck.Step, t.cfg.Steps)
	}
	if err := t.w.Restore(ck.Model, ck.Optimizer, ck.Step); err != nil {
		return fmt.Errorf("%s: %w", ck.Dir, err)
	}
	return nil
}
