// norm.cu: LayerNorm and RMSNorm. Forward and the input's gradient run one block of 256
// threads per row (fixed-order tree sums); the parameters' gradients one thread per column,
// rows in order.
#include "common.cuh"

// layernorm_forward: y = (x−mean)·rstd·w + b per row; keeps mean and rstd.
extern "C" __global__ void layernorm_forward(float *y, float *mean, float *rstd, const float *x,
		const float *w, const float *b, int rows, int n, float eps) {
	__shared__ float sh[256];
	int r = BID_X;
	const float *xr = x + (long)r * n;
	float s = 0.0f;
	for (int j = TID_X; j < n; j += BDIM_X) s += xr[j];
	float mu = block_sum(s, sh) / n;
	float v = 0.0f;
	for (int j = TID_X; j < n; j += BDIM_X) {
		float d = xr[j] - mu;
		v += d * d;
	}
	float rs = 1.0f / sqrt_rn(block_sum(v, sh) / n + eps);
	float *yr = y + (long)r * n;
	for (int j = TID_X; j < n; j += BDIM_X) yr[j] = (xr[j] - mu) * rs * w[j] + b[j];
	if (TID_X == 0) {
		mean[r] = mu;
		rstd[r] = rs;
	}
}

// layernorm_backward_dx: dx += rstd·(dxhat − mean(dxhat) − xhat·mean(dxhat·xhat)), with
// dxhat = dy·w.
extern "C" __global__ void layernorm_backward_dx(float *dx, const float *dy, const float *x,
		const float *mean, const float *rstd, const float *w, int rows, int n) {
	__shared__ float sh[256];
	int r = BID_X;
	const float *xr = x + (long)r * n, *dyr = dy + (long)r * n;
	float mu = mean[r], rs = rstd[r];
	float s1 = 0.0f, s2 = 0.0f;
	for (int j = TID_X; j < n; j += BDIM_X) {
		float dxh = dyr[j] * w[j];
		s1 += dxh;
		s2 += dxh * (xr[j] - mu) * rs;
	}
	float m1 = block_sum(s1, sh) / n;
	float m2 = block_sum(s2, sh) / n;
	float *dxr = dx + (long)r * n;
	for (int j = TID_X; j < n; j += BDIM_X) {
		float xh = (xr[j] - mu) * rs;
		dxr[j] += rs * (dyr[j] * w[j] - m1 - xh * m2);
	}
}

// layernorm_backward_dw: dw[j] += Σ_r dy·xhat, db[j] += Σ_r dy.
extern "C" __global__ void layernorm_backward_dw(float *dw, float *db, const float *dy, const float *x,
		const float *mean, const float *rstd, int rows, int n) {
	long j = gid();
	if (j >= n) return;
	float sw = 0.0f, sb = 0.0f;
	for (int r = 0; r < rows; r++) {
		float d = dy[(long)r * n + j];
		sw += d * (x[(long)r * n + j] - mean[r]) * rstd[r];
		sb += d;
	}
	dw[j] += sw;
	db[j] += sb;
}

// rmsnorm_forward: rstd = 1/√(Σx²/n + eps), y = x·rstd·w.
extern "C" __global__ void rmsnorm_forward(float *y, float *rstd, const float *x, const float *w,
		int rows, int n, float eps) {
	__shared__ float sh[256];
	int r = BID_X;
	const float *xr = x + (long)r * n;
	float s = 0.0f;
	for (int j = TID_X; j < n; j += BDIM_X) s += xr[j] * xr[j];
	float rs = 1.0f / sqrt_rn(block_sum(s, sh) / n + eps);
	float *yr = y + (long)r * n;
	for (int j = TID_X; j < n; j += BDIM_X) yr[j] = xr[j] * rs * w[j];
	if (TID_X == 0) rstd[r] = rs;
}

// rmsnorm_backward_dx: dx += rstd·(dy·w − x·rstd²·Σ(dy·w·x)/n).
extern "C" __global__ void rmsnorm_backward_dx(float *dx, const float *dy, const float *x,
		const float *rstd, const float *w, int rows, int n) {
	__shared__ float sh[256];
	int r = BID_X;
	const float *xr = x + (long)r * n, *dyr = dy + (long)r * n;
	float rs = rstd[r];
	float s = 0.0f;
	for (int j = TID_X; j < n; j += BDIM_X) s += dyr[j] * w[j] * xr[j];
	float m = block_sum(s, sh) / n;
	float *dxr = dx + (long)r * n;
	for (int j = TID_X; j < n; j += BDIM_X) dxr[j] += rs * (dyr[j] * w[j] - xr[j] * rs * rs * m);
}

// rmsnorm_backward_dw: dw[j] += Σ_r dy·x·rstd.
extern "C" __global__ void rmsnorm_backward_dw(float *dw, const float *dy, const float *x,
		const float *rstd, int rows, int n) {
	long j = gid();
	if (j >= n) return;
	float s = 0.0f;
	for (int r = 0; r < rows; r++) s += dy[(long)r * n + j] * x[(long)r * n + j] * rstd[r];
	dw[j] += s;
}
