package device

// Backend is one implementation of the operations a GPT's training step runs. Every
// method's doc comment is its specification; device/devicetest checks an implementation
// against it (values against pure-Go references, gradients against finite differences,
// determinism, no writes outside the outputs).
//
// Shapes are explicit arguments; tensors are row-major and must hold at least the elements
// their shape needs (an implementation panics on a tensor too short, as a programming
// error). All tensors of one call belong to the backend's Device. Outputs must not overlap
// inputs unless a method says they may. Host arguments (token ids, targets, per-row losses)
// are Go slices: they are small, and a device backend copies them.
//
// Methods report no errors: a device backend may queue its work (a stream) and keeps the
// first failure, which Sync returns (CUDA's sticky error); the CPU backend cannot fail.
//
// Determinism: the same inputs give the same bits on every call. Where an implementation
// parallelises, it must partition outputs and never split a reduction in a way that
// depends on the degree of parallelism (the CPU backend's results do not depend on its
// thread count).
type Backend interface {
	// Name identifies the implementation and the path it chose, e.g. "cpu/avx512".
	Name() string
	// Device is where the backend's tensors are.
	Device() Device

	// Alloc returns a new zeroed tensor of n elements of dtype in the backend's memory.
	Alloc(n int, dtype DType) Tensor
	// CopyFromHost copies src into dst (len(src) = dst.Len()).
	CopyFromHost(dst Tensor, src []float32)
	// CopyToHost copies src into dst (len(dst) = src.Len()).
	CopyToHost(dst []float32, src Tensor)
	// Copy sets dst = src (same length; they must not overlap).
	Copy(dst, src Tensor)
	// Zero sets every element of t to 0.
	Zero(t Tensor)
	// Sync waits for every operation issued so far and returns the first error any of them
	// had since the backend was made.
	Sync() error

	// Gemm computes C = alpha·op(A)·op(B) + beta·C on row-major matrices: op(A) is m×k (A
	// stored m×k with row stride lda, or k×m when tA, then op(A) = Aᵀ), op(B) is k×n (B
	// stored k×n with stride ldb, or n×k when tB), C is m×n with stride ldc. When beta is
	// 0, C's prior contents are not read. Elements outside C's m×n window are not written.
	// The sum over k may be ordered as the implementation likes, but the same order for
	// every m, n and degree of parallelism.
	Gemm(tA, tB bool, m, n, k int, alpha float32, a Tensor, lda int, b Tensor, ldb int, beta float32, c Tensor, ldc int)
	// MatmulForward is the linear layer y = x·W + bias: x is rows×in, W is in×out (GPT-2's
	// Conv1D layout), bias has out elements or is empty (no bias), y is rows×out.
	MatmulForward(y, x, w, bias Tensor, rows, in, out int)
	// MatmulBackward propagates dy (rows×out) through MatmulForward: dw += xᵀ·dy,
	// db[j] += Σ_r dy[r][j] (rows in order; skipped when db is empty) and dx = dy·Wᵀ
	// (overwritten; skipped when dx is empty).
	MatmulBackward(dx, dw, db, dy, x, w Tensor, rows, in, out int)

	// EmbeddingForward sets out[r] = wte[tokens[r]] + wpe[r mod T] for each of the
	// len(tokens) rows of d columns; wte is V×d, wpe at least T×d, tokens in [0, V). An
	// empty wpe is no position table (Llama's): out[r] = wte[tokens[r]].
	EmbeddingForward(out, wte, wpe Tensor, tokens []int32, T, d int)
	// EmbeddingBackward accumulates dwte[tokens[r]] += dy[r] and dwpe[r mod T] += dy[r],
	// each table row summing its contributions in row order r = 0, 1, …; an empty dwpe is
	// skipped.
	EmbeddingBackward(dwte, dwpe, dy Tensor, tokens []int32, T, d, V int)

	// LayerNormForward normalises each row of the rows×n matrix x:
	// mean = Σx/n, rstd = 1/√(Σ(x−mean)²/n + eps), y = (x−mean)·rstd·w + b, and keeps each
	// row's mean and rstd (rows elements each) for the backward pass.
	LayerNormForward(y, mean, rstd, x, w, b Tensor, rows, n int, eps float32)
	// LayerNormBackward propagates dy through LayerNormForward: it accumulates the input's
	// gradient into dx (dx += ∂L/∂x) and the parameters' into dw and db.
	LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w Tensor, rows, n int)

	// GeluForward sets y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) elementwise over
	// y.Len() elements; y may be x.
	GeluForward(y, x Tensor)
	// GeluBackward sets dx = dy·gelu'(x) elementwise over dx.Len() elements; dx may be dy.
	GeluBackward(dx, x, dy Tensor)

	// AttentionSaveLen is the number of F32 elements AttentionForward keeps for the
	// backward pass of B sequences of T positions and H heads (the CPU keeps the B·H·T·T
	// probabilities; a fused kernel keeps less).
	AttentionSaveLen(B, T, H int) int
	// AttentionForward is causal multi-head self-attention over a fused projection: qkv is
	// B·T×3d (q | k | v, each third H heads of hd = d/H contiguous columns), out is B·T×d
	// (heads side by side). For each sequence and head, s[i][j] = q_i·k_j/√hd for j ≤ i,
	// p[i] = softmax(s[i][0..i]) and out_i = Σ_j p[i][j]·v_j. save (AttentionSaveLen
	// elements) receives what AttentionBackward needs.
	AttentionForward(out, save, qkv Tensor, B, T, H, hd int)
	// AttentionBackward propagates dout (B·T×d) through AttentionForward, given its save and
	// qkv, and overwrites dqkv (B·T×3d).
	AttentionBackward(dqkv, dout, save, qkv Tensor, B, T, H, hd int)

	// GroupedAttentionForward is causal grouped-query attention (Llama's) over separate
	// projections: q is B·T×(H·hd), k and v B·T×(KVH·hd), KVH dividing H; query head h
	// reads key/value head h/(H/KVH) (the key/value heads repeated, Hugging Face's
	// repeat_kv). Otherwise as AttentionForward: s[i][j] = q_i·k_j/√hd for j ≤ i,
	// p[i] = softmax(s[i][0..i]), out_i = Σ_j p[i][j]·v_j, out B·T×(H·hd). save holds
	// AttentionSaveLen(B, T, H) elements.
	GroupedAttentionForward(out, save, q, k, v Tensor, B, T, H, KVH, hd int)
	// GroupedAttentionBackward propagates dout through GroupedAttentionForward, given its
	// save, q, k and v, and overwrites dq, dk and dv; a key/value head's gradient sums the
	// query heads that read it.
	GroupedAttentionBackward(dq, dk, dv, dout, save, q, k, v Tensor, B, T, H, KVH, hd int)

	// RMSNormForward normalises each row of the rows×n matrix x by its root mean square
	// (Llama's RMSNorm): rstd = 1/√(Σx²/n + eps), y = x·rstd·w; it keeps each row's rstd
	// (rows elements) for the backward pass.
	RMSNormForward(y, rstd, x, w Tensor, rows, n int, eps float32)
	// RMSNormBackward propagates dy through RMSNormForward: it accumulates the input's
	// gradient into dx (dx += ∂L/∂x) and the weight's into dw.
	RMSNormBackward(dx, dw, dy, x, rstd, w Tensor, rows, n int)

	// RopeForward applies rotary position embeddings to x (rows×(heads·hd), row r at
	// position r mod T) in Hugging Face's rotate_half convention: for each head and
	// i < hd/2, with c = cos[t][i] and s = sin[t][i] (T×hd/2 tables),
	// y[i] = x[i]·c − x[i+hd/2]·s and y[i+hd/2] = x[i+hd/2]·c + x[i]·s. y may be x.
	RopeForward(y, x, cos, sin Tensor, rows, T, heads, hd int)
	// RopeBackward propagates dy through RopeForward (the inverse rotation) and
	// overwrites dx; dx may be dy.
	RopeBackward(dx, dy, cos, sin Tensor, rows, T, heads, hd int)

	// SwiGLUForward sets h = silu(gate)·up elementwise over h.Len() elements, with
	// silu(g) = g/(1 + e^−g) (Llama's MLP); h may be gate or up.
	SwiGLUForward(h, gate, up Tensor)
	// SwiGLUBackward propagates dh through SwiGLUForward and overwrites dgate and dup;
	// dgate may be dh.
	SwiGLUBackward(dgate, dup, gate, up, dh Tensor)

	// CrossEntropy computes, for each row r of the N×V matrix logits (N = len(targets)),
	// losses[r] = log Σ_j exp(logits[r][j]) − logits[r][targets[r]]. When dlogits is not
	// empty it also sets dlogits[r][j] = (softmax(logits[r])[j] − [j = targets[r]])·scale,
	// the gradient of Σ_r scale·losses[r]; dlogits may be logits.
	CrossEntropy(losses []float64, dlogits, logits Tensor, targets []int32, V int, scale float32)

	// Add sets dst = a + b elementwise over dst.Len() elements; dst may be a or b.
	Add(dst, a, b Tensor)
	// Scale sets x = s·x elementwise.
	Scale(x Tensor, s float32)
	// SumSquares returns Σ x² accumulated in float64 in an order that does not depend on
	// the degree of parallelism (global-norm clipping sums it over every parameter).
	SumSquares(x Tensor) float64
	// AdamWStep applies one AdamW update to the parameters p with gradient g and moments
	// m, v (all p.Len() elements), step being the 1-based count of updates so far, in
	// float32 in PyTorch's order of operations:
	//
	//	p ← p·(1 − lr·wd)                      (only when decay)
	//	m ← β1·m + (1 − β1)·g
	//	v ← β2·v + (1 − β2)·g²
	//	p ← p − (lr / (1 − β1^step)) · m / (√v / √(1 − β2^step) + eps)
	AdamWStep(o AdamW, p, g, m, v Tensor, step int, decay bool)
}

// AdamW holds the hyper-parameters of one AdamW update (docs/gpt.md).
type AdamW struct {
	// LR is the learning rate of this step.
	LR float64
	// Beta1 and Beta2 are the moment decay rates (0.9 and 0.95).
	Beta1, Beta2 float64
	// Eps is added to the denominator (1e-8).
	Eps float64
	// WeightDecay is the decoupled decay, applied only where the caller asks (matrices).
	WeightDecay float64
}
