package kernels

import "math"

// GroupedAttentionForward is causal grouped-query self-attention (Llama's) over separate
// projections: q is B·T×(H·hd), k and v are B·T×(KVH·hd), each row H (or KVH) heads of hd
// contiguous columns, and KVH divides H. Query head h reads key/value head h/(H/KVH) (the
// key/value heads repeated, Hugging Face's repeat_kv). Per batch element b and head h, as
// AttentionForward with those columns:
//
//	s[i][j] = (q_i · k_j) / √hd  for j ≤ i;  p[i] = softmax(s[i][0..i]);  out_i = Σ_j p[i][j]·v_j
//
// out is B·T×(H·hd); probs receives the B·H·T·T probabilities for the backward pass. With
// KVH = H it computes what AttentionForward computes on the fused q | k | v.
func GroupedAttentionForward(out, probs, q, k, v []float32, B, T, H, KVH, hd int) {
	d, kvd, g := H*hd, KVH*hd, H/KVH
	scale := float32(1 / math.Sqrt(float64(hd)))
	ParallelFor(B*H, 1, func(lo, hi int) {
		for bh := lo; bh < hi; bh++ {
			b, h := bh/H, bh%H
			qh, kh, vh := q[b*T*d+h*hd:], k[b*T*kvd+(h/g)*hd:], v[b*T*kvd+(h/g)*hd:]
			p := probs[bh*T*T : (bh+1)*T*T]
			o := out[b*T*d+h*hd:]
			for i0 := 0; i0 < T; i0 += attnBlock {
				i1 := min(T, i0+attnBlock)
				GemmSerial(false, true, i1-i0, i1, hd, scale, qh[i0*d:], d, kh, kvd, 0, p[i0*T:], T)
			}
			causalSoftmax(p, T)
			for i0 := 0; i0 < T; i0 += attnBlock {
				i1 := min(T, i0+attnBlock)
				GemmSerial(false, false, i1-i0, hd, i1, 1, p[i0*T:], T, vh, kvd, 0, o[i0*d:], d)
			}
		}
	})
}

// GroupedAttentionBackward propagates dout (B·T×(H·hd)) through GroupedAttentionForward
// and overwrites dq, dk and dv. A key/value head's gradient is the sum over the query heads
// that read it, added in head order (h = j·g, j·g+1, …), whatever the thread count: work is
// split by (batch element, key/value head).
func GroupedAttentionBackward(dq, dk, dv, dout, probs, q, k, v []float32, B, T, H, KVH, hd int) {
	d, kvd, g := H*hd, KVH*hd, H/KVH
	scale := float32(1 / math.Sqrt(float64(hd)))
	ParallelFor(B*KVH, 1, func(lo, hi int) {
		dp := make([]float32, T*T)
		for bj := lo; bj < hi; bj++ {
			b, j := bj/KVH, bj%KVH
			kh, vh := k[b*T*kvd+j*hd:], v[b*T*kvd+j*hd:]
			dkh, dvh := dk[b*T*kvd+j*hd:], dv[b*T*kvd+j*hd:]
			for h := j * g; h < (j+1)*g; h++ {
				beta := float32(1)
				if h == j*g {
					beta = 0
				}
				qh, dqh, do := q[b*T*d+h*hd:], dq[b*T*d+h*hd:], dout[b*T*d+h*hd:]
				p := probs[(b*H+h)*T*T : (b*H+h+1)*T*T]
				for i0 := 0; i0 < T; i0 += attnBlock {
					i1 := min(T, i0+attnBlock)
					GemmSerial(false, true, i1-i0, i1, hd, 1, do[i0*d:], d, vh, kvd, 0, dp[i0*T:], T)
				}
				for j0 := 0; j0 < T; j0 += attnBlock {
					j1 := min(T, j0+attnBlock)
					GemmSerial(true, false, j1-j0, hd, T-j0, 1, p[j0*T+j0:], T, do[j0*d:], d, beta, dvh[j0*kvd:], kvd)
				}
				softmaxBackwardRows(dp, p, T, scale)
				for i0 := 0; i0 < T; i0 += attnBlock {
					i1 := min(T, i0+attnBlock)
					GemmSerial(false, false, i1-i0, hd, i1, 1, dp[i0*T:], T, kh, kvd, 0, dqh[i0*d:], d)
				}
				for j0 := 0; j0 < T; j0 += attnBlock {
					j1 := min(T, j0+attnBlock)
					GemmSerial(true, false, j1-j0, hd, T-j0, 1, dp[j0*T+j0:], T, qh[j0*d:], d, beta, dkh[j0*kvd:], kvd)
				}
			}
		}
	})
}
