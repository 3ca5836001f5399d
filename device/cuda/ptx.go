package cuda

import (
	"embed"
	"fmt"
	"strings"
)

// ptxFiles are the kernels compiled by `go generate` (kernels/*.ptx, see
// internal/ptxgen), with the manifest that records their sources' hashes.
//
//go:embed kernels/*.ptx kernels/manifest.json
var ptxFiles embed.FS

// kernelNames lists, per PTX module, the kernels the backend launches: the backend loads
// exactly these, and a test checks that the embedded PTX defines each one.
var kernelNames = map[string][]string{
	"gemm.ptx":         {"gemm_f32", "add_bias", "bias_grad"},
	"elementwise.ptx":  {"gelu_forward", "gelu_backward", "swiglu_forward", "swiglu_backward", "add", "scale", "adamw", "f32_to_bf16", "bf16_to_f32", "sum_squares_partial"},
	"norm.ptx":         {"layernorm_forward", "layernorm_backward_dx", "layernorm_backward_dw", "rmsnorm_forward", "rmsnorm_backward_dx", "rmsnorm_backward_dw"},
	"embedding.ptx":    {"embedding_forward", "embedding_backward_wte", "embedding_backward_wpe"},
	"rope.ptx":         {"rope"},
	"attention.ptx":    {"attention_forward", "attention_backward_q", "attention_backward_kv"},
	"crossentropy.ptx": {"cross_entropy"},
}

// ptxSource is the embedded PTX of module name, NUL-terminated for cuModuleLoadData.
func ptxSource(name string) ([]byte, error) {
	b, err := ptxFiles.ReadFile("kernels/" + name)
	if err != nil {
		return nil, fmt.Errorf("embedded PTX %s: %w", name, err)
	}
	return append(b, 0), nil
}

// ptxDefines reports whether the PTX text defines the kernel entry name.
func ptxDefines(ptx, name string) bool {
	return strings.Contains(ptx, ".entry "+name+"(")
}
