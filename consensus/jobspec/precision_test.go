package jobspec

import "testing"

// TestPrecisionAccepted: auto, fp32 and the empty field are valid and train in fp32.
func TestPrecisionAccepted(t *testing.T) {
	for _, s := range []string{"", "auto", "fp32"} {
		spec, err := Parse([]byte("train: {precision: " + s + "}"))
		if s == "" {
			spec, err = Parse([]byte("train: {lr: 0.001}"))
		}
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if got := spec.Train.Precision.Resolve(); got != PrecisionFP32 {
			t.Fatalf("%q resolves to %q, want fp32", s, got)
		}
	}
}
