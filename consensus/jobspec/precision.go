package jobspec

import "fmt"

// Precision is the arithmetic a job trains in: train.precision in a job spec, --precision
// on `meshnode train`.
type Precision string

// Precisions.
const (
	// PrecisionAuto is the best the node's backend implements: fp32 on every backend
	// today. The default.
	PrecisionAuto Precision = "auto"
	// PrecisionFP32 is float32 everywhere: weights, activations, gradients, moments.
	PrecisionFP32 Precision = "fp32"
	// PrecisionBF16 is bfloat16 activations and GEMM inputs with float32 master weights
	// (issue 23). No backend trains in it yet, so validation refuses it.
	PrecisionBF16 Precision = "bf16"
)

// Precisions lists every precision, the default first.
func Precisions() []Precision { return []Precision{PrecisionAuto, PrecisionFP32, PrecisionBF16} }

// Check returns nil for a precision a job can train in ("" is auto), else an error naming
// field: an unknown word, or bf16, which no backend implements yet.
func (p Precision) Check(field string) error {
	if p == "" {
		return nil
	}
	if err := check(field, p, Precisions()); err != nil {
		return err
	}
	if p == PrecisionBF16 {
		return fmt.Errorf("%s: bf16 is not implemented yet: every backend trains in fp32 (docs/gpu.md); use fp32 or auto", field)
	}
	return nil
}

// Resolve is the precision a backend trains in: fp32 for auto, "" and fp32.
func (p Precision) Resolve() Precision {
	if p == "" || p == PrecisionAuto {
		return PrecisionFP32
	}
	return p
}

// ParsePrecision converts s, as field holds it, to a Precision it accepts.
func ParsePrecision(field, s string) (Precision, error) {
	p := Precision(s)
	if err := p.Check(field); err != nil {
		return "", err
	}
	return p, nil
}
