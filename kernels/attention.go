package kernels

import "math"

// attentionRef is the specification of AttentionForward. For batch element b, head h and
// positions i, j < T, with q, k, v the head's hd columns of the q, k and v thirds of qkv:
//
//	s[i][j] = (q_i · k_j) / √hd              for j ≤ i (causal)
//	p[i][·] = softmax(s[i][0..i]),  p[i][j] = 0 for j > i
//	out_i   = Σ_j p[i][j]·v_j
func attentionRef(out, probs, qkv []float32, B, T, H, hd int) {
	d := H * hd
	scale := 1 / math.Sqrt(float64(hd))
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			p := probs[(b*H+h)*T*T : (b*H+h+1)*T*T]
			for i := 0; i < T; i++ {
				qi := qkv[(b*T+i)*3*d+h*hd:]
				mx := math.Inf(-1)
				s := make([]float64, i+1)
				for j := 0; j <= i; j++ {
					kj := qkv[(b*T+j)*3*d+d+h*hd:]
					var dot float64
					for c := 0; c < hd; c++ {
						dot += float64(qi[c]) * float64(kj[c])
					}
					s[j] = dot * scale
					mx = math.Max(mx, s[j])
				}
				var z float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					z += s[j]
				}
				for j := 0; j < T; j++ {
					p[i*T+j] = 0
					if j <= i {
						p[i*T+j] = float32(s[j] / z)
					}
				}
				o := out[(b*T+i)*d+h*hd : (b*T+i)*d+h*hd+hd]
				for c := range o {
					var acc float64
					for j := 0; j <= i; j++ {
						acc += float64(p[i*T+j]) * float64(qkv[(b*T+j)*3*d+2*d+h*hd+c])
					}
					o[c] = float32(acc)
				}
			}
		}
	}
}

// AttentionForward is causal multi-head self-attention over a fused QKV projection (see
// attentionRef). qkv is the B·T×3d matrix of q | k | v columns, each third split into H
// heads of hd = d/H contiguous columns; out is B·T×d, heads side by side; probs receives the
// B·H·T·T softmax probabilities (zero above the diagonal) for AttentionBackward.
// Heads run in parallel; each is a pair of GEMMs.
func AttentionForward(out, probs, qkv []float32, B, T, H, hd int) {
	d := H * hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	ParallelFor(B*H, 1, func(lo, hi int) {
		for bh := lo; bh < hi; bh++ {
			b, h := bh/H, bh%H
			base := b * T * 3 * d
			q, k, v := qkv[base+h*hd:], qkv[base+d+h*hd:], qkv[base+2*d+h*hd:]
			p := probs[bh*T*T : (bh+1)*T*T]
			o := out[b*T*d+h*hd:]
			// Row block [i0, i1) attends to positions [0, i1) only: the causal triangle
			// plus the block's diagonal, about half the work of the full square.
			for i0 := 0; i0 < T; i0 += attnBlock {
				i1 := min(T, i0+attnBlock)
				GemmSerial(false, true, i1-i0, i1, hd, scale, q[i0*3*d:], 3*d, k, 3*d, 0, p[i0*T:], T)
			}
			causalSoftmax(p, T)
			for i0 := 0; i0 < T; i0 += attnBlock {
				i1 := min(T, i0+attnBlock)
				GemmSerial(false, false, i1-i0, hd, i1, 1, p[i0*T:], T, v, 3*d, 0, o[i0*d:], d)
			}
		}
	})
}

// attnBlock is the row block of the causal attention GEMMs.
const attnBlock = 32

// causalSoftmax replaces each row i of the T×T scores p by the softmax of its first i+1
// entries and zeroes the rest.
func causalSoftmax(p []float32, T int) {
	for i := 0; i < T; i++ {
		row := p[i*T : i*T+i+1]
		mx := row[0]
		for _, s := range row[1:] {
			mx = max(mx, s)
		}
		inv := 1 / expShift(row, row, mx, 1)
		for j := range row {
			row[j] *= inv
		}
		clear(p[i*T+i+1 : i*T+T])
	}
}

// AttentionBackward propagates dout (B·T×d) through AttentionForward and overwrites dqkv
// (B·T×3d). With P the saved probabilities of one head and dO, V, K, Q its slices:
//
//	dP = dO·Vᵀ;  dV = Pᵀ·dO
//	dS[i][j] = P[i][j]·(dP[i][j] − Σ_l P[i][l]·dP[i][l]) / √hd
//	dQ = dS·K;  dK = dSᵀ·Q
func AttentionBackward(dqkv, dout, probs, qkv []float32, B, T, H, hd int) {
	d := H * hd
	scale := float32(1 / math.Sqrt(float64(hd)))
	ParallelFor(B*H, 1, func(lo, hi int) {
		dp := make([]float32, T*T)
		for bh := lo; bh < hi; bh++ {
			b, h := bh/H, bh%H
			base := b * T * 3 * d
			q, k, v := qkv[base+h*hd:], qkv[base+d+h*hd:], qkv[base+2*d+h*hd:]
			dq, dk, dv := dqkv[base+h*hd:], dqkv[base+d+h*hd:], dqkv[base+2*d+h*hd:]
			do := dout[b*T*d+h*hd:]
			p := probs[bh*T*T : (bh+1)*T*T]
			// P and dS are zero above the diagonal: row blocks of dP, dQ need columns
			// [0, i1) only, and row blocks [j0, j1) of dV, dK need rows [j0, T) only.
			for i0 := 0; i0 < T; i0 += attnBlock {
				i1 := min(T, i0+attnBlock)
				GemmSerial(false, true, i1-i0, i1, hd, 1, do[i0*d:], d, v, 3*d, 0, dp[i0*T:], T)
			}
			for j0 := 0; j0 < T; j0 += attnBlock {
				j1 := min(T, j0+attnBlock)
				GemmSerial(true, false, j1-j0, hd, T-j0, 1, p[j0*T+j0:], T, do[j0*d:], d, 0, dv[j0*3*d:], 3*d)
			}
			softmaxBackwardRows(dp, p, T, scale)
			for i0 := 0; i0 < T; i0 += attnBlock {
				i1 := min(T, i0+attnBlock)
				GemmSerial(false, false, i1-i0, hd, i1, 1, dp[i0*T:], T, k, 3*d, 0, dq[i0*3*d:], 3*d)
			}
			for j0 := 0; j0 < T; j0 += attnBlock {
				j1 := min(T, j0+attnBlock)
				GemmSerial(true, false, j1-j0, hd, T-j0, 1, dp[j0*T+j0:], T, q[j0*3*d:], 3*d, 0, dk[j0*3*d:], 3*d)
			}
		}
	})
}

// softmaxBackwardRows turns dP into dS in place: dS = P ⊙ (dP − rowsum(P ⊙ dP))·scale,
// for the causal part of each row (the rest is zero because P is).
func softmaxBackwardRows(dp, p []float32, T int, scale float32) {
	for i := 0; i < T; i++ {
		pr, dr := p[i*T:i*T+i+1], dp[i*T:i*T+T]
		var dot float32
		for j, pv := range pr {
			dot += pv * dr[j]
		}
		for j, pv := range pr {
			dr[j] = pv * (dr[j] - dot) * scale
		}
		clear(dr[i+1:])
	}
}
