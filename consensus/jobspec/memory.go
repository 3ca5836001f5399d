package jobspec

import "slices"

// Recompute says whether pipeline stages recompute activations in the backward pass.
type Recompute string

// Recomputation choices.
const (
	// RecomputeAuto lets the balancer recompute only when no plan fits memory without it.
	RecomputeAuto Recompute = "auto"
	// RecomputeOn recomputes in every stage.
	RecomputeOn Recompute = "on"
	// RecomputeOff never recomputes.
	RecomputeOff Recompute = "off"
)

// Memory says how the job trades compute for memory.
type Memory struct {
	// Recompute is "auto" (the default), "on" or "off": whether stages keep each block's
	// activations for the backward pass or only its input, recomputing the rest (the same
	// losses and gradients; one more forward pass per block).
	Recompute Recompute `json:"recompute" yaml:"recompute"`
	// Zero is the ZeRO stage across data-parallel replicas in parallel.sync: sync: 0 (the
	// default) keeps every replica's full optimizer state, 1 shards the AdamW moments
	// across the replicas, 2 also the reduced gradients. The same losses as 0.
	Zero int `json:"zero,omitempty" yaml:"zero"`
	// Offload is "auto" (the default), "on" or "off": whether the balancer may keep a
	// stage's training state (weights, gradients, AdamW moments) that does not fit its node's
	// memory on the node's disk, read and written every step at the disk's measured
	// bandwidth. auto: only when no plan fits otherwise, after smaller micro-batches and
	// recomputation; on: in any plan, priced against the alternatives; off: never. A spec
	// stored before the field existed ("") plans without offload.
	Offload Offload `json:"offload,omitempty" yaml:"offload"`
}

// Recomputes lists every recomputation choice, the default first.
func Recomputes() []Recompute { return []Recompute{RecomputeAuto, RecomputeOn, RecomputeOff} }

// Valid reports whether r is a known choice.
func (r Recompute) Valid() bool { return slices.Contains(Recomputes(), r) }

// Check returns nil for a known choice, else an error naming field and the choices.
func (r Recompute) Check(field string) error { return check(field, r, Recomputes()) }

func (m Memory) validate(v *validator) {
	v.add(m.Recompute.Check("memory.recompute"))
	if m.Offload != "" {
		v.add(m.Offload.Check("memory.offload"))
	}
}

// validateZero checks memory.zero: 0, 1 or 2, and sharding only where replicas reduce
// uncompressed gradients every step (parallel.sync: sync, parallel.codec: none).
func (s Spec) validateZero(v *validator) {
	if err := CheckZero(s.Memory.Zero, s.Parallel.Sync, s.Parallel.Codec, SpecNames); err != nil {
		v.errs = append(v.errs, err)
	}
}

// Offload says whether pipeline stages may keep training state on disk.
type Offload string

// Offload choices.
const (
	// OffloadAuto lets the balancer offload only when no plan fits memory otherwise, after
	// smaller micro-batches and recomputation.
	OffloadAuto Offload = "auto"
	// OffloadOn lets the balancer offload in any plan, its disk I/O priced against the
	// alternatives: a stage offloads only the state that does not fit beside its
	// activations.
	OffloadOn Offload = "on"
	// OffloadOff never offloads.
	OffloadOff Offload = "off"
)

// Offloads lists every offload choice, the default first.
func Offloads() []Offload { return []Offload{OffloadAuto, OffloadOn, OffloadOff} }

// Valid reports whether o is a known choice.
func (o Offload) Valid() bool { return slices.Contains(Offloads(), o) }

// Check returns nil for a known choice, else an error naming field and the choices.
func (o Offload) Check(field string) error { return check(field, o, Offloads()) }
