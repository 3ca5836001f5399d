// crossentropy.cu: softmax cross-entropy, one block of 256 threads per row: the row's
// maximum and Σ exp in fixed-order tree sums, the loss in float64, and the gradient
// (softmax − one-hot)·scale written over the logits when asked.
#include "common.cuh"

extern "C" __global__ void cross_entropy(double *losses, float *dlogits, const float *logits,
		const int *targets, int V, float scale) {
	__shared__ float sh[256];
	int r = BID_X;
	const float *x = logits + (long)r * V;
	float mx = -__builtin_huge_valf();
	for (int j = TID_X; j < V; j += BDIM_X) mx = fmaxf_(mx, x[j]);
	mx = block_max(mx, sh);
	float s = 0.0f;
	for (int j = TID_X; j < V; j += BDIM_X) s += expf_(x[j] - mx);
	s = block_sum(s, sh);
	int t = targets[r];
	if (TID_X == 0) losses[r] = (double)logf_(s) + (double)mx - (double)x[t];
	SYNC(); // x[t] read before any thread overwrites it (dlogits may be logits)
	if (!dlogits) return;
	float *dl = dlogits + (long)r * V;
	float inv = 1.0f / s;
	for (int j = TID_X; j < V; j += BDIM_X) {
		float p = expf_(x[j] - mx) * inv;
		dl[j] = (p - (j == t ? 1.0f : 0.0f)) * scale;
	}
}
