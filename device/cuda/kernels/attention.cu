// attention.cu: causal (grouped-query) attention, flash-style: no T×T matrix. A warp owns
// one query row (or, backward, one key row); each lane holds hd/32 of the head's columns.
// The forward pass keeps the softmax's log-sum-exp per row (online softmax), the backward
// pass recomputes the probabilities from it, so the memory kept grows with T, not T².
// Every sum runs in a fixed order (keys in order, warp butterflies), so the same bits
// every time, with no atomics.
//
// Layout: query head h of row (b, t) is q[(b·T+t)·qs + h·hd …], key/value head h/(H/KVH)
// is k[(b·T+t)·ks + kh·hd …] (and v likewise); out and dout are B·T×(H·hd).
// The forward pass saves lse[B·H·T]; the backward pass reads it (never writes it) and
// keeps D_i = dout_i·out_i in a scratch buffer of B·H·T floats.
#include "common.cuh"

#define MAXC 8 // hd ≤ 32·MAXC = 256

struct attn_args {
	int B, T, H, KVH, hd, qs, ks;
};

static __device__ inline void load_row(float *dst, const float *src, int hd) {
	int lane = TID_X & 31;
	for (int c = 0; c < MAXC; c++) {
		int d = lane + 32 * c;
		dst[c] = d < hd ? src[d] : 0.0f;
	}
}

static __device__ inline float dot_row(const float *a, const float *src, int hd) {
	int lane = TID_X & 31;
	float s = 0.0f;
	for (int c = 0; c < MAXC; c++) {
		int d = lane + 32 * c;
		if (d < hd) s = FMA(a[c], src[d], s);
	}
	return warp_sum(s);
}

// attention_forward: grid (ceil(T/4), B·H), 128 threads: warp w of block x is query row
// i = 4x + w of sequence b, head h.
extern "C" __global__ void attention_forward(float *out, float *lse, const float *q, const float *k,
		const float *v, int B, int T, int H, int KVH, int hd, int qs, int ks) {
	int i = BID_X * 4 + (TID_X >> 5);
	int bh = BID_Y, b = bh / H, h = bh % H, kh = h / (H / KVH);
	if (i >= T) return;
	float sc = 1.0f / sqrt_rn((float)hd);
	float qv[MAXC], acc[MAXC];
	load_row(qv, q + ((long)b * T + i) * qs + h * hd, hd);
	for (int c = 0; c < MAXC; c++) acc[c] = 0.0f;
	float m = -__builtin_huge_valf(), l = 0.0f;
	int lane = TID_X & 31;
	for (int j = 0; j <= i; j++) {
		long kr = ((long)b * T + j) * ks + kh * hd;
		float s = dot_row(qv, k + kr, hd) * sc;
		float mn = fmaxf_(m, s);
		float corr = expf_(m - mn), p = expf_(s - mn);
		l = l * corr + p;
		for (int c = 0; c < MAXC; c++) {
			int d = lane + 32 * c;
			if (d < hd) acc[c] = acc[c] * corr + p * v[kr + d];
		}
		m = mn;
	}
	float *o = out + ((long)b * T + i) * H * hd + h * hd;
	for (int c = 0; c < MAXC; c++) {
		int d = lane + 32 * c;
		if (d < hd) o[d] = acc[c] / l;
	}
	if (lane == 0) lse[(long)bh * T + i] = m + logf_(l);
}

// attention_backward_q: per query row, recomputes out_i from lse to get D_i = dout_i·out_i
// (kept in D), then dq_i = sc·Σ_j p_ij·(dout_i·v_j − D_i)·k_j (overwritten).
extern "C" __global__ void attention_backward_q(float *dq, float *D, const float *dout, const float *lse,
		const float *q, const float *k, const float *v, int B, int T, int H, int KVH, int hd, int qs, int ks) {
	int i = BID_X * 4 + (TID_X >> 5);
	int bh = BID_Y, b = bh / H, h = bh % H, kh = h / (H / KVH);
	if (i >= T) return;
	int lane = TID_X & 31;
	float sc = 1.0f / sqrt_rn((float)hd);
	float qv[MAXC], dov[MAXC], acc[MAXC];
	load_row(qv, q + ((long)b * T + i) * qs + h * hd, hd);
	load_row(dov, dout + ((long)b * T + i) * H * hd + h * hd, hd);
	float L = lse[(long)bh * T + i];
	for (int c = 0; c < MAXC; c++) acc[c] = 0.0f;
	for (int j = 0; j <= i; j++) {
		long kr = ((long)b * T + j) * ks + kh * hd;
		float p = expf_(dot_row(qv, k + kr, hd) * sc - L);
		for (int c = 0; c < MAXC; c++) {
			int d = lane + 32 * c;
			if (d < hd) acc[c] += p * v[kr + d];
		}
	}
	float Di = 0.0f;
	for (int c = 0; c < MAXC; c++) Di = FMA(dov[c], acc[c], Di);
	Di = warp_sum(Di);
	for (int c = 0; c < MAXC; c++) acc[c] = 0.0f;
	for (int j = 0; j <= i; j++) {
		long kr = ((long)b * T + j) * ks + kh * hd;
		float p = expf_(dot_row(qv, k + kr, hd) * sc - L);
		float ds = p * (dot_row(dov, v + kr, hd) - Di) * sc;
		for (int c = 0; c < MAXC; c++) {
			int d = lane + 32 * c;
			if (d < hd) acc[c] += ds * k[kr + d];
		}
	}
	float *o = dq + ((long)b * T + i) * qs + h * hd;
	for (int c = 0; c < MAXC; c++) {
		int d = lane + 32 * c;
		if (d < hd) o[d] = acc[c];
	}
	if (lane == 0) D[(long)bh * T + i] = Di;
}

// attention_backward_kv: per key row j of key/value head kh, over the query heads that
// read it (in order) and the rows i ≥ j (in order): dv_j = Σ p_ij·dout_i and
// dk_j = sc·Σ p_ij·(dout_i·v_j − D_i)·q_i (overwritten). grid (ceil(T/4), B·KVH).
extern "C" __global__ void attention_backward_kv(float *dk, float *dv, const float *dout, const float *lse,
		const float *D, const float *q, const float *k, const float *v, int B, int T, int H, int KVH, int hd,
		int qs, int ks) {
	int j = BID_X * 4 + (TID_X >> 5);
	int bkh = BID_Y, b = bkh / KVH, kh = bkh % KVH, group = H / KVH;
	if (j >= T) return;
	int lane = TID_X & 31;
	float sc = 1.0f / sqrt_rn((float)hd);
	float kv[MAXC], vv[MAXC], dka[MAXC], dva[MAXC];
	long kr = ((long)b * T + j) * ks + kh * hd;
	load_row(kv, k + kr, hd);
	load_row(vv, v + kr, hd);
	for (int c = 0; c < MAXC; c++) dka[c] = dva[c] = 0.0f;
	for (int h = kh * group; h < (kh + 1) * group; h++) {
		long bh = (long)b * H + h;
		for (int i = j; i < T; i++) {
			const float *qi = q + ((long)b * T + i) * qs + h * hd;
			const float *doi = dout + ((long)b * T + i) * H * hd + h * hd;
			float p = expf_(dot_row(kv, qi, hd) * sc - lse[bh * T + i]);
			float ds = p * (dot_row(vv, doi, hd) - D[bh * T + i]) * sc;
			for (int c = 0; c < MAXC; c++) {
				int d = lane + 32 * c;
				if (d < hd) {
					dva[c] += p * doi[d];
					dka[c] += ds * qi[d];
				}
			}
		}
	}
	for (int c = 0; c < MAXC; c++) {
		int d = lane + 32 * c;
		if (d < hd) {
			dk[kr + d] = dka[c];
			dv[kr + d] = dva[c];
		}
	}
}
