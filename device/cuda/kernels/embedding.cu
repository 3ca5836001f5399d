// embedding.cu: token and position embeddings. The backward pass gives each table element
// one thread that sums its rows in order r = 0, 1, …, so no atomics and the same bits
// every time.
#include "common.cuh"

// embedding_forward: out[r] = wte[tokens[r]] + wpe[r mod T] (wpe may be null).
extern "C" __global__ void embedding_forward(float *out, const float *wte, const float *wpe,
		const int *tokens, int rows, int T, int d) {
	long i = gid();
	if (i >= (long)rows * d) return;
	int r = i / d, j = i % d;
	float v = wte[(long)tokens[r] * d + j];
	out[i] = wpe ? v + wpe[(long)(r % T) * d + j] : v;
}

// embedding_backward_wte: dwte[tokens[r]][j] += dy[r][j], one thread per column j walking
// the rows in order.
extern "C" __global__ void embedding_backward_wte(float *dwte, const float *dy, const int *tokens,
		int rows, int d) {
	long j = gid();
	if (j >= d) return;
	for (int r = 0; r < rows; r++) dwte[(long)tokens[r] * d + j] += dy[(long)r * d + j];
}

// embedding_backward_wpe: dwpe[t][j] += dy[r][j] for r ≡ t (mod T), in order.
extern "C" __global__ void embedding_backward_wpe(float *dwpe, const float *dy, int rows, int T, int d) {
	long i = gid();
	if (i >= (long)T * d) return;
	int t = i / d, j = i % d;
	for (int r = t; r < rows; r += T) dwpe[i] += dy[(long)r * d + j];
}
