// gemm.cu: C = alpha·op(A)·op(B) + beta·C on row-major matrices. A block of 16×16
// threads computes a 64×64 tile of C, each thread a 4×4 grid of elements (rows ty + 16i,
// columns tx + 16j), staging 64×16 slices of op(A) and 16×64 of op(B) in shared memory.
// Each element of C is one thread's chain of fused multiply-adds over k in order 0, 1, …,
// k−1, whatever m, n and the tile it falls in (padding adds fma(0, 0, acc) = acc): a window
// of C has the same bits as the whole product.
#include "common.cuh"

#define BM 64
#define BN 64
#define BK 16

extern "C" __global__ void gemm_f32(int tA, int tB, int m, int n, int k, float alpha,
		const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
	__shared__ float As[BK][BM + 4]; // As[q][r] = op(A)[row0 + r][k0 + q]
	__shared__ float Bs[BK][BN + 4]; // Bs[q][c] = op(B)[k0 + q][col0 + c]
	int tx = TID_X, ty = TID_Y, tid = ty * 16 + tx;
	int row0 = BID_Y * BM, col0 = BID_X * BN;
	float acc[4][4];
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
	for (int k0 = 0; k0 < k; k0 += BK) {
		for (int e = 0; e < 4; e++) {
			int idx = tid + 256 * e, r, q, c;
			// Consecutive threads read consecutive addresses of each operand's storage.
			if (tA) { r = idx % BM; q = idx / BM; } else { q = idx % BK; r = idx / BK; }
			int gr = row0 + r, gq = k0 + q;
			As[q][r] = (gr < m && gq < k) ? (tA ? A[(long)gq * lda + gr] : A[(long)gr * lda + gq]) : 0.0f;
			if (tB) { q = idx % BK; c = idx / BK; } else { c = idx % BN; q = idx / BN; }
			int gc = col0 + c;
			gq = k0 + q;
			Bs[q][c] = (gq < k && gc < n) ? (tB ? B[(long)gc * ldb + gq] : B[(long)gq * ldb + gc]) : 0.0f;
		}
		SYNC();
		for (int q = 0; q < BK; q++) {
			float a[4], b[4];
			for (int i = 0; i < 4; i++) a[i] = As[q][ty + 16 * i];
			for (int j = 0; j < 4; j++) b[j] = Bs[q][tx + 16 * j];
			for (int i = 0; i < 4; i++)
				for (int j = 0; j < 4; j++) acc[i][j] = FMA(a[i], b[j], acc[i][j]);
		}
		SYNC();
	}
	for (int i = 0; i < 4; i++) {
		int row = row0 + ty + 16 * i;
		for (int j = 0; j < 4; j++) {
			int col = col0 + tx + 16 * j;
			if (row < m && col < n) {
				float *cp = C + (long)row * ldc + col;
				*cp = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * *cp;
			}
		}
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
