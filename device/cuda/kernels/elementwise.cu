// elementwise.cu: the operations of one element at a time (GELU, SwiGLU, Add, Scale,
// AdamW, bf16 conversion). One thread per element.
#include "common.cuh"

#define GELU_K0 0.7978845608028654f // √(2/π)
#define GELU_K1 0.044715f

// gelu_forward: y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); y may be x.
extern "C" __global__ void gelu_forward(float *y, const float *x, long n) {
	long i = gid();
	if (i >= n) return;
	float v = x[i];
	float u = GELU_K0 * (v + GELU_K1 * v * v * v);
	y[i] = 0.5f * v * (1.0f + tanhf_(u));
}

// gelu_backward: dx = dy·gelu'(x); dx may be dy.
extern "C" __global__ void gelu_backward(float *dx, const float *x, const float *dy, long n) {
	long i = gid();
	if (i >= n) return;
	float v = x[i];
	float u = GELU_K0 * (v + GELU_K1 * v * v * v);
	float t = tanhf_(u);
	float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * v * v);
	float g = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
	dx[i] = dy[i] * g;
}

static __device__ inline float sigmoid(float g) { return 1.0f / (1.0f + expf_(-g)); }

// swiglu_forward: h = silu(gate)·up, silu(g) = g·σ(g); h may be gate or up.
extern "C" __global__ void swiglu_forward(float *h, const float *gate, const float *up, long n) {
	long i = gid();
	if (i >= n) return;
	float g = gate[i];
	h[i] = g * sigmoid(g) * up[i];
}

// swiglu_backward: dup = dh·silu(g), dgate = dh·up·σ(g)·(1 + g·(1 − σ(g))); dgate may be dh.
extern "C" __global__ void swiglu_backward(float *dgate, float *dup, const float *gate, const float *up, const float *dh, long n) {
	long i = gid();
	if (i >= n) return;
	float g = gate[i], u = up[i], d = dh[i];
	float s = sigmoid(g);
	dup[i] = d * g * s;
	dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
}

// add: dst = a + b; dst may be a or b.
extern "C" __global__ void add(float *dst, const float *a, const float *b, long n) {
	long i = gid();
	if (i < n) dst[i] = a[i] + b[i];
}

// scale: x = s·x.
extern "C" __global__ void scale(float *x, float s, long n) {
	long i = gid();
	if (i < n) x[i] = s * x[i];
}

// adamw: one AdamW update in PyTorch's order (kernels.AdamW.Step's), the step-dependent
// constants computed by the host as the CPU computes them.
extern "C" __global__ void adamw(float *p, const float *g, float *m, float *v, long n, float keep,
		float b1, float b2, float c1, float c2, float step_size, float bc2, float eps) {
	long i = gid();
	if (i >= n) return;
	float gi = g[i];
	float mi = m[i] * b1 + c1 * gi;
	float vi = v[i] * b2 + c2 * gi * gi;
	m[i] = mi;
	v[i] = vi;
	float denom = sqrt_rn(vi) / bc2 + eps;
	p[i] = p[i] * keep - step_size * (mi / denom);
}

// f32_to_bf16 rounds to nearest even (NaN stays a quiet NaN).
extern "C" __global__ void f32_to_bf16(bf16_t *dst, const float *src, long n) {
	long i = gid();
	if (i >= n) return;
	unsigned u = __builtin_bit_cast(unsigned, src[i]);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		dst[i] = (bf16_t)((u >> 16) | 0x40u);
		return;
	}
	u += 0x7fffu + ((u >> 16) & 1u);
	dst[i] = (bf16_t)(u >> 16);
}

// bf16_to_f32 is exact.
extern "C" __global__ void bf16_to_f32(float *dst, const bf16_t *src, long n) {
	long i = gid();
	if (i < n) dst[i] = __builtin_bit_cast(float, (unsigned)src[i] << 16);
}

// sum_squares_partial: partial[block] = Σ x² over the elements i ≡ thread (mod the grid),
// in float64; the grid is fixed by the host, so the order never depends on the device.
extern "C" __global__ void sum_squares_partial(double *partial, const float *x, long n) {
	__shared__ double sh[256];
	double s = 0;
	long stride = (long)GDIM_X * BDIM_X;
	for (long i = gid(); i < n; i += stride) s += (double)x[i] * (double)x[i];
	unsigned t = TID_X;
	sh[t] = s;
	SYNC();
	for (unsigned k = BDIM_X / 2; k > 0; k >>= 1) {
		if (t < k) sh[t] += sh[t + k];
		SYNC();
	}
	if (t == 0) partial[BID_X] = sh[0];
}
