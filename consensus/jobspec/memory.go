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
}

// Recomputes lists every recomputation choice, the default first.
func Recomputes() []Recompute { return []Recompute{RecomputeAuto, RecomputeOn, RecomputeOff} }

// Valid reports whether r is a known choice.
func (r Recompute) Valid() bool { return slices.Contains(Recomputes(), r) }

// Check returns nil for a known choice, else an error naming field and the choices.
func (r Recompute) Check(field string) error { return check(field, r, Recomputes()) }

func (m Memory) validate(v *validator) {
	v.add(m.Recompute.Check("memory.recompute"))
}
