package jobspec

import "fmt"

// Upper bounds of a spec. A spec arrives from the network (a submit forwarded to the leader)
// and its numbers size allocations on every node of the job, so each dimension is bounded
// before anything multiplies it. The bounds are far above what the engine can train in
// practice; they exist so that no arithmetic on a valid spec overflows and no node
// allocates without bound.
const (
	MaxLayers   = 1024
	MaxDModel   = 16384
	MaxHeads    = 256
	MaxContext  = 65536
	MaxVocab    = 1 << 16
	MaxSteps    = 100_000_000
	MaxBatch    = 65536
	MaxReplicas = 1024
	MaxNodes    = 4096
	// MaxCheckpointsKept bounds checkpoint.keep.
	MaxCheckpointsKept = 1000
	// MaxTrainingBytes bounds EstimatedTrainingBytes: 4 TiB for the whole job, summed over
	// every node that holds a part of it.
	MaxTrainingBytes = 4 << 40
	// MaxOuterLR bounds parallel.outer_lr: DiLoCo's outer steps are near 1 ("auto" picks
	// 0.7 or 1.0); ten times that only overshoots.
	MaxOuterLR = 10
	// MaxDataPathBytes bounds data.source, data.train and data.val (a path on the
	// submitting node): every spec is kept by every replica and listed to every client.
	MaxDataPathBytes = 1024
	// MinShardTokens and MaxShardTokens bound data.shard_tokens: 1 Ki tokens (2 KiB) to
	// 1 Gi tokens (2 GiB of uint16 ids) per shard.
	MinShardTokens = 1 << 10
	MaxShardTokens = 1 << 30
	// MaxTrainShards bounds data.train_shards, the training shards of a sharded dataset:
	// at the default 16 Mi tokens per shard, 2^40 tokens.
	MaxTrainShards = 1 << 16
	// MaxEncodedSpecBytes bounds a spec's JSON encoding, what the FSM stores and every job
	// listing carries; the field bounds keep a real spec far below it.
	MaxEncodedSpecBytes = 16 << 10
)

// EstimatedTrainingBytes is a lower estimate of the memory one replica of the job needs to
// train: fp32 weights, gradients and the two AdamW moments (16 bytes per parameter) plus
// the activations of one micro-batch kept for the backward pass. It is computed in float64
// so that it cannot overflow, and it is only meaningful once every model dimension is
// within its bound.
func (s Spec) EstimatedTrainingBytes() float64 {
	m := s.Model
	d, l, ctx := float64(m.DModel), float64(m.Layers), float64(m.Context)
	params := m.ParamCount()
	micro := 1.0 // "auto" may choose one sequence per micro-batch
	if m := s.Train.MicroBatches; !m.IsAuto {
		micro = float64(max(s.Train.Batch/max(m.N, 1), 1))
	}
	// Per block and token: about 16 d-wide fp32 tensors plus the heads' attention rows.
	acts := micro * ctx * l * (16*d + float64(m.Heads)*ctx) * 4
	if hid := float64(m.Hidden()); hid > 4*d {
		acts += micro * ctx * l * 3 * (hid - 4*d) * 4 // a wider MLP keeps wider activations
	}
	return 16*params + acts
}

// validateMemory refuses a spec whose estimated training memory is beyond MaxTrainingBytes.
// It runs only when the dimensions it multiplies are within their bounds.
func (s Spec) validateMemory(v *validator) {
	m := s.Model
	if !inRange(m.Layers, 1, MaxLayers) || !inRange(m.DModel, 1, MaxDModel) || !inRange(m.Heads, 1, MaxHeads) ||
		!inRange(m.Context, 1, MaxContext) || !inRange(m.Vocab, 1, MaxVocab) || !inRange(s.Train.Batch, 1, MaxBatch) ||
		!inRange(m.Intermediate, 0, maxIntermediate) || !inRange(m.KVHeads, 0, MaxHeads) {
		return
	}
	if est := s.EstimatedTrainingBytes(); est > MaxTrainingBytes {
		v.addf("model", "needs about %s to train one replica (weights, AdamW state and activations), more than the %s allowed: shrink model.layers, model.d_model or model.context",
			humanBytes(est), humanBytes(MaxTrainingBytes))
	}
}

func humanBytes(b float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for b >= 1024 && i < len(units)-1 {
		b /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}
