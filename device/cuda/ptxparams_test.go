package cuda

import (
	"strings"
	"testing"
)

// TestPTXSignaturesOfEveryKernel parses the embedded PTX: every kernel the backend
// launches has a parameter list of the types launch passes.
func TestPTXSignaturesOfEveryKernel(t *testing.T) {
	for mod, names := range kernelNames {
		src, err := ptxSource(mod)
		if err != nil {
			t.Fatal(err)
		}
		sigs, err := ptxSignatures(string(src))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if len(sigs[n]) == 0 {
				t.Errorf("%s: no parameters parsed for %s", mod, n)
			}
		}
	}
}

// TestCheckArgs: the launch check refuses a wrong count, a float for an int, an int for
// a pointer, and accepts what the PTX declares.
func TestCheckArgs(t *testing.T) {
	src, _ := ptxSource("elementwise.ptx")
	sigs, err := ptxSignatures(string(src))
	if err != nil {
		t.Fatal(err)
	}
	sig := sigs["scale"] // (float *x, float s, long n)
	if err := checkArgs("scale", sig, []any{uint64(1), float32(2), int64(3)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []any
		want string
	}{
		{[]any{uint64(1), float32(2)}, "takes 3 parameters, launched with 2"},
		{[]any{uint64(1), 2, int64(3)}, "parameter 1 is .f32, launched with a int"},
		{[]any{3, float32(2), int64(3)}, "parameter 0 is .u64, launched with a int"},
	} {
		if err := checkArgs("scale", sig, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.args, err, c.want)
		}
	}
}
