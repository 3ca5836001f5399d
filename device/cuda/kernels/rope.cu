// rope.cu: rotary position embeddings, Hugging Face's rotate_half convention. One thread
// per (row, head, i < hd/2) pair; it reads both elements before writing, so y may be x.
#include "common.cuh"

extern "C" __global__ void rope(float *y, const float *x, const float *cosT, const float *sinT,
		int rows, int T, int heads, int hd, int inverse) {
	int half = hd / 2;
	long i = gid();
	if (i >= (long)rows * heads * half) return;
	int k = i % half;
	long rh = i / half; // row·heads + head
	int r = rh / heads;
	long base = rh * hd;
	float c = cosT[(long)(r % T) * half + k], s = sinT[(long)(r % T) * half + k];
	if (inverse) s = -s;
	float x1 = x[base + k], x2 = x[base + k + half];
	y[base + k] = x1 * c - x2 * s;
	y[base + k + half] = x2 * c + x1 * s;
}
