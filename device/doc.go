// Package device is the engine's device layer: the Backend interface through which the
// model computes, and the Tensor that a backend's operations read and write.
//
// A Backend is one implementation of every operation a GPT's training step needs, each
// with its backward pass where it has one: GEMM and the linear layer's matmul, the token
// and position embedding, LayerNorm, GELU, causal multi-head attention, softmax
// cross-entropy, the elementwise operations of the residual stream, the global-norm
// arithmetic and AdamW. The model is written once against it (llm.c keeps one set of layer
// functions for its CPU and CUDA files; gonum's BLAS interface takes implementations),
// and the backend is chosen once, by whoever builds the model's workspace.
//
// A Tensor is a view of elements of one DType in the memory of one Device. A tensor in
// host memory holds its float32 elements as a Go slice (Host); a tensor in device memory
// holds the backend's opaque Memory and an offset, and the host sees its elements only
// through the backend's explicit copies (CopyToHost, CopyFromHost). The CPU backend's
// tensors are host tensors, so for it every view and every "copy" across the boundary is
// free.
//
// Implementations: device/cpu (today's kernels, bit for bit). device/devicetest is the
// conformance suite every backend runs: values against pure-Go references, gradients
// against finite differences, determinism, guard values around every output.
//
// The package holds no implementation and imports nothing of meshnode's: backends import
// it, not the other way round.
package device
