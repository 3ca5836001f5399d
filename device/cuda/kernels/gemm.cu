// gemm.cu: C = alpha·op(A)·op(B) + beta·C on row-major matrices, 16×16 tiles. Each element
// of C is one thread's sum over k in order 0, 1, …, k−1 (fused multiply-adds), whatever m,
// n and the tile it falls in: a window of C has the same bits as the whole product.
#include "common.cuh"

#define TILE 16

extern "C" __global__ void gemm_f32(int tA, int tB, int m, int n, int k, float alpha,
		const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
	__shared__ float As[TILE][TILE + 1];
	__shared__ float Bs[TILE][TILE + 1];
	int tx = TID_X, ty = TID_Y;
	int row = BID_Y * TILE + ty, col = BID_X * TILE + tx;
	float acc = 0.0f;
	for (int k0 = 0; k0 < k; k0 += TILE) {
		int ka = k0 + tx;
		As[ty][tx] = (row < m && ka < k) ? (tA ? A[(long)ka * lda + row] : A[(long)row * lda + ka]) : 0.0f;
		int kb = k0 + ty;
		Bs[ty][tx] = (kb < k && col < n) ? (tB ? B[(long)col * ldb + kb] : B[(long)kb * ldb + col]) : 0.0f;
		SYNC();
		for (int q = 0; q < TILE; q++) acc = FMA(As[ty][q], Bs[q][tx], acc);
		SYNC();
	}
	if (row < m && col < n) {
		float *c = C + (long)row * ldc + col;
		*c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
	}
}

// add_bias: y[r][j] += bias[j] over rows×out.
extern "C" __global__ void add_bias(float *y, const float *bias, int rows, int out) {
	long i = gid();
	if (i < (long)rows * out) y[i] += bias[i % out];
}

// bias_grad: db[j] += Σ_r dy[r][j], rows in order, one thread per column.
extern "C" __global__ void bias_grad(float *db, const float *dy, int rows, int out) {
	long j = gid();
	if (j >= out) return;
	float s = 0.0f;
	for (int r = 0; r < rows; r++) s += dy[(long)r * out + j];
	db[j] += s;
}
