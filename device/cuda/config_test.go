package cuda

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // "" valid
	}{
		{DefaultConfig(), ""},
		{Config{}, ""},
		{Config{GEMM: GemmCublasLtTF32, Ordinal: 3}, ""},
		{Config{Ordinal: -1}, "ordinal must be ≥ 0 (got -1)"},
		{Config{GEMM: "fast"}, `gemm must be kernel, cublaslt or cublaslt-tf32 (got "fast")`},
	} {
		err := c.cfg.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: got %v, want %q", c.cfg, err, c.want)
		}
	}
}
