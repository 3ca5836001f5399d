package jobspec

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// TestUpperBounds feeds the sizes that once made the leader allocate without bound or
// overflow (model.layers: 1e10, MaxInt64) and checks each is refused at validation with a
// message naming the field.
func TestUpperBounds(t *testing.T) {
	maxInt := strconv.FormatInt(math.MaxInt64, 10)
	cases := []struct{ yaml, want string }{
		{"model: {layers: 1e10}", "model.layers: must be ≤ 1024, got 10000000000"},
		{"model: {layers: " + maxInt + "}", "model.layers: must be ≤ 1024"},
		{"model: {layers: " + maxInt + "}\nparallel: {stages: 3}", "model.layers: must be ≤ 1024"},
		{"model: {d_model: 1048576, heads: 1}", "model.d_model: must be ≤ 16384"},
		{"model: {heads: 100000}", "model.heads: must be ≤ 256"},
		{"model: {context: " + maxInt + "}", "model.context: must be ≤ 65536"},
		{"train: {steps: " + maxInt + "}", "train.steps: must be ≤ 100000000"},
		{"train: {batch: " + maxInt + ", micro_batches: 1}", "train.batch: must be ≤ 65536"},
		{"parallel: {replicas: " + maxInt + ", stages: " + maxInt + "}\nplacement: {max_nodes: 4}", "parallel.replicas: must be \"auto\" or ≤ 1024"},
		{"placement: {min_nodes: " + maxInt + "}", "placement.min_nodes: must be ≤ 4096"},
		{"checkpoint: {keep: " + maxInt + "}", "checkpoint.keep: must be ≤ 1000"},
		{"model: {layers: 1024, d_model: 16384, heads: 128, context: 65536}", "model: needs about"},
		// Issue 25: outer_lr had no upper bound; data paths of ~2 MiB made every spec a
		// snapshot's worth.
		{"parallel: {outer_lr: 1e300}", "parallel.outer_lr: must be \"auto\" or > 0 and ≤ 10, got 1e+300"},
		{"parallel: {outer_lr: 10.5}", "parallel.outer_lr: must be \"auto\" or > 0 and ≤ 10"},
		{"data: {source: /" + strings.Repeat("a", 1024) + "}", "data.source: must be a path of at most 1024 bytes, got 1025 bytes"},
		{"data: {train: /" + strings.Repeat("a", 100<<10) + ".bin, val: v.bin}", "data.train: must be a path of at most 1024 bytes"},
		{"data: {train: t.bin, val: /" + strings.Repeat("a", 4096) + ".bin}", "data.val: must be a path of at most 1024 bytes"},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}

// TestUpperBoundsAcceptLargeValidModels checks that the bounds leave real models alone:
// a GPT-2 small shape validates.
func TestUpperBoundsAcceptLargeValidModels(t *testing.T) {
	s := DefaultSpec()
	s.Model = Model{Layers: 12, DModel: 768, Heads: 12, Context: 1024, Vocab: 50257}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if est := s.EstimatedTrainingBytes(); est < 16*124e6 || est > MaxTrainingBytes {
		t.Fatalf("GPT-2 small estimated at %.0f bytes", est)
	}
}

// FuzzParse checks that no input makes Parse panic and that whatever it accepts validates
// and is within every bound.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"", "name: a\nmodel: {layers: 2, d_model: 64, heads: 2, context: 32, vocab: 256}\n",
		"data: {train: a.bin, val: b.bin}\n", "parallel: {replicas: 2, stages: auto, codec: fp16}\n",
		"model: {layers: 1e10}", "train: {steps: 9223372036854775807}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			return
		}
		if verr := s.Validate(); verr != nil {
			t.Fatalf("Parse accepted a spec that does not validate: %v", verr)
		}
		if s.Model.Layers > MaxLayers || s.EstimatedTrainingBytes() > MaxTrainingBytes {
			t.Fatalf("accepted spec out of bounds: %+v", s.Model)
		}
	})
}
