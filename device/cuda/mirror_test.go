package cuda

import (
	"math"
	"testing"

	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/device/cpu"
	"github.com/meshnode/meshnode/device/devicetest"
)

// mirror is a host backend that computes each operation the way the CUDA kernels do,
// written as a line-for-line Go transcription of kernels/*.cu: the same index arithmetic,
// the same reduction trees (a block's 256 threads, a warp's butterfly), the same online
// softmax and the same saved state. The conformance suite run on it checks the kernels'
// algorithms and indexing on a machine without a GPU; what it cannot check is the CUDA
// compilation itself, the launch geometry the driver sees, and the PTX approximations of
// exp and log (the mirror uses Go's math). Operations the kernels do not implement
// themselves (none today) fall through to the embedded CPU backend.
type mirror struct{ cpu.Backend }

var _ device.Backend = mirror{}

func h(t device.Tensor) []float32 { return t.Host() }

func expf(x float32) float32 { return float32(math.Exp(float64(x))) }
func logf(x float32) float32 { return float32(math.Log(float64(x))) }
func fma32(a, b, c float32) float32 {
	return float32(math.FMA(float64(a), float64(b), float64(c)))
}

// blockSum is common.cuh's block_sum over a block of len(v) (a power of two) threads.
func blockSum(v []float32) float32 {
	sh := append([]float32(nil), v...)
	for s := len(sh) / 2; s > 0; s >>= 1 {
		for t := 0; t < s; t++ {
			sh[t] += sh[t+s]
		}
	}
	return sh[0]
}

func blockMax(v []float32) float32 {
	sh := append([]float32(nil), v...)
	for s := len(sh) / 2; s > 0; s >>= 1 {
		for t := 0; t < s; t++ {
			sh[t] = max(sh[t], sh[t+s])
		}
	}
	return sh[0]
}

// warpSum is common.cuh's warp_sum: a butterfly, every lane ending with the same bits.
func warpSum(v [32]float32) float32 {
	for s := 16; s > 0; s >>= 1 {
		var n [32]float32
		for l := range 32 {
			n[l] = v[l] + v[l^s]
		}
		v = n
	}
	for l := 1; l < 32; l++ {
		if v[l] != v[0] {
			panic("butterfly lanes disagree")
		}
	}
	return v[0]
}

const threads = 256

// rowThreads runs a strided loop of 256 "threads" over n columns: each thread's partial
// of f(j), j ≡ t mod 256, in increasing j, as the kernels' `for (j = TID_X; j < n; j += BDIM_X)`.
func rowThreads(n int, f func(j int) float32) []float32 {
	p := make([]float32, threads)
	for t := range threads {
		for j := t; j < n; j += threads {
			p[t] += f(j)
		}
	}
	return p
}

// Gemm is gemm.cu block by block: 64×64 tiles of C, 16×16 threads of 4×4 elements each,
// 64×16 and 16×64 operand slices staged as the kernel's threads stage them.
func (mirror) Gemm(tA, tB bool, m, n, k int, alpha float32, a device.Tensor, lda int, b device.Tensor, ldb int, beta float32, c device.Tensor, ldc int) {
	const BM, BN, BK = 64, 64, 16
	A, B, C := h(a), h(b), h(c)
	for row0 := 0; row0 < m; row0 += BM {
		for col0 := 0; col0 < n; col0 += BN {
			var acc [256][4][4]float32 // per thread tid = ty·16 + tx
			for k0 := 0; k0 < k; k0 += BK {
				var As [BK][BM]float32
				var Bs [BK][BN]float32
				for tid := range 256 {
					for e := range 4 {
						idx := tid + 256*e
						var r, q, cc int
						if tA {
							r, q = idx%BM, idx/BM
						} else {
							q, r = idx%BK, idx/BK
						}
						gr, gq := row0+r, k0+q
						if gr < m && gq < k {
							if tA {
								As[q][r] = A[gq*lda+gr]
							} else {
								As[q][r] = A[gr*lda+gq]
							}
						}
						if tB {
							q, cc = idx%BK, idx/BK
						} else {
							cc, q = idx%BN, idx/BN
						}
						gc := col0 + cc
						gq = k0 + q
						if gq < k && gc < n {
							if tB {
								Bs[q][cc] = B[gc*ldb+gq]
							} else {
								Bs[q][cc] = B[gq*ldb+gc]
							}
						}
					}
				}
				for tid := range 256 {
					ty, tx := tid/16, tid%16
					for q := range BK {
						for i := range 4 {
							for j := range 4 {
								acc[tid][i][j] = fma32(As[q][ty+16*i], Bs[q][tx+16*j], acc[tid][i][j])
							}
						}
					}
				}
			}
			for tid := range 256 {
				ty, tx := tid/16, tid%16
				for i := range 4 {
					for j := range 4 {
						row, col := row0+ty+16*i, col0+tx+16*j
						if row < m && col < n {
							if beta == 0 {
								C[row*ldc+col] = alpha * acc[tid][i][j]
							} else {
								C[row*ldc+col] = alpha*acc[tid][i][j] + beta*C[row*ldc+col]
							}
						}
					}
				}
			}
		}
	}
}

func (be mirror) MatmulForward(y, x, w, bias device.Tensor, rows, in, out int) {
	be.Gemm(false, false, rows, out, in, 1, x, in, w, out, 0, y, out)
	if !bias.IsEmpty() {
		Y, bb := h(y), h(bias)
		for i := range rows * out {
			Y[i] += bb[i%out]
		}
	}
}

func (be mirror) MatmulBackward(dx, dw, db, dy, x, w device.Tensor, rows, in, out int) {
	be.Gemm(true, false, in, out, rows, 1, x, in, dy, out, 1, dw, out)
	if !db.IsEmpty() {
		D, DY := h(db), h(dy)
		for j := range out {
			var s float32
			for r := range rows {
				s += DY[r*out+j]
			}
			D[j] += s
		}
	}
	if !dx.IsEmpty() {
		be.Gemm(false, true, rows, in, out, 1, dy, out, w, out, 0, dx, in)
	}
}

func (mirror) EmbeddingForward(out, wte, wpe device.Tensor, tokens []int32, T, d int) {
	O, E, P := h(out), h(wte), h(wpe)
	for i := range len(tokens) * d {
		r, j := i/d, i%d
		v := E[int(tokens[r])*d+j]
		if P != nil {
			v += P[(r%T)*d+j]
		}
		O[i] = v
	}
}

func (mirror) EmbeddingBackward(dwte, dwpe, dy device.Tensor, tokens []int32, T, d, V int) {
	DE, DP, DY := h(dwte), h(dwpe), h(dy)
	rows := len(tokens)
	for j := range d {
		for r := range rows {
			DE[int(tokens[r])*d+j] += DY[r*d+j]
		}
	}
	if DP != nil {
		for i := range min(rows, T) * d {
			t, j := i/d, i%d
			for r := t; r < rows; r += T {
				DP[i] += DY[r*d+j]
			}
		}
	}
}

func (mirror) LayerNormForward(y, mean, rstd, x, w, b device.Tensor, rows, n int, eps float32) {
	Y, M, R, X, W, B := h(y), h(mean), h(rstd), h(x), h(w), h(b)
	for r := range rows {
		xr := X[r*n:]
		mu := blockSum(rowThreads(n, func(j int) float32 { return xr[j] })) / float32(n)
		v := blockSum(rowThreads(n, func(j int) float32 { d := xr[j] - mu; return d * d }))
		rs := 1 / float32(math.Sqrt(float64(v/float32(n)+eps)))
		for j := range n {
			Y[r*n+j] = (xr[j]-mu)*rs*W[j] + B[j]
		}
		M[r], R[r] = mu, rs
	}
}

func (mirror) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w device.Tensor, rows, n int) {
	DX, DW, DB, DY, X, M, R, W := h(dx), h(dw), h(db), h(dy), h(x), h(mean), h(rstd), h(w)
	for r := range rows {
		mu, rs := M[r], R[r]
		m1 := blockSum(rowThreads(n, func(j int) float32 { return DY[r*n+j] * W[j] })) / float32(n)
		m2 := blockSum(rowThreads(n, func(j int) float32 { return DY[r*n+j] * W[j] * (X[r*n+j] - mu) * rs })) / float32(n)
		for j := range n {
			xh := (X[r*n+j] - mu) * rs
			DX[r*n+j] += rs * (DY[r*n+j]*W[j] - m1 - xh*m2)
		}
	}
	for j := range n {
		var sw, sb float32
		for r := range rows {
			d := DY[r*n+j]
			sw += d * (X[r*n+j] - M[r]) * R[r]
			sb += d
		}
		DW[j] += sw
		DB[j] += sb
	}
}

func (mirror) RMSNormForward(y, rstd, x, w device.Tensor, rows, n int, eps float32) {
	Y, R, X, W := h(y), h(rstd), h(x), h(w)
	for r := range rows {
		xr := X[r*n:]
		s := blockSum(rowThreads(n, func(j int) float32 { return xr[j] * xr[j] }))
		rs := 1 / float32(math.Sqrt(float64(s/float32(n)+eps)))
		for j := range n {
			Y[r*n+j] = xr[j] * rs * W[j]
		}
		R[r] = rs
	}
}

func (mirror) RMSNormBackward(dx, dw, dy, x, rstd, w device.Tensor, rows, n int) {
	DX, DW, DY, X, R, W := h(dx), h(dw), h(dy), h(x), h(rstd), h(w)
	for r := range rows {
		rs := R[r]
		m := blockSum(rowThreads(n, func(j int) float32 { return DY[r*n+j] * W[j] * X[r*n+j] })) / float32(n)
		for j := range n {
			DX[r*n+j] += rs * (DY[r*n+j]*W[j] - X[r*n+j]*rs*rs*m)
		}
	}
	for j := range n {
		var s float32
		for r := range rows {
			s += DY[r*n+j] * X[r*n+j] * R[r]
		}
		DW[j] += s
	}
}

const geluK0, geluK1 = float32(0.7978845608028654), float32(0.044715)

func tanhf(u float32) float32 {
	a := u
	if u < 0 {
		a = -u
	}
	t := 1 - 2/(expf(2*a)+1)
	if u < 0 {
		return -t
	}
	return t
}

func (mirror) GeluForward(y, x device.Tensor) {
	Y, X := h(y), h(x)
	for i := range Y {
		v := X[i]
		Y[i] = 0.5 * v * (1 + tanhf(geluK0*(v+geluK1*v*v*v)))
	}
}

func (mirror) GeluBackward(dx, x, dy device.Tensor) {
	DX, X, DY := h(dx), h(x), h(dy)
	for i := range DX {
		v := X[i]
		t := tanhf(geluK0 * (v + geluK1*v*v*v))
		du := geluK0 * (1 + 3*geluK1*v*v)
		DX[i] = DY[i] * (0.5*(1+t) + 0.5*v*(1-t*t)*du)
	}
}

func sigmoid(g float32) float32 { return 1 / (1 + expf(-g)) }

func (mirror) SwiGLUForward(hh, gate, up device.Tensor) {
	H, G, U := h(hh), h(gate), h(up)
	for i := range H {
		g := G[i]
		H[i] = g * sigmoid(g) * U[i]
	}
}

func (mirror) SwiGLUBackward(dgate, dup, gate, up, dh device.Tensor) {
	DG, DU, G, U, DH := h(dgate), h(dup), h(gate), h(up), h(dh)
	for i := range DG {
		g, u, d := G[i], U[i], DH[i]
		s := sigmoid(g)
		DU[i] = d * g * s
		DG[i] = d * u * s * (1 + g*(1-s))
	}
}

func (mirror) ropeMirror(y, x, cos, sin device.Tensor, rows, T, heads, hd int, inverse bool) {
	Y, X, C, S := h(y), h(x), h(cos), h(sin)
	half := hd / 2
	for i := range rows * heads * half {
		k, rh := i%half, i/half
		r := rh / heads
		base := rh * hd
		c, s := C[(r%T)*half+k], S[(r%T)*half+k]
		if inverse {
			s = -s
		}
		x1, x2 := X[base+k], X[base+k+half]
		Y[base+k] = x1*c - x2*s
		Y[base+k+half] = x2*c + x1*s
	}
}

func (be mirror) RopeForward(y, x, cos, sin device.Tensor, rows, T, heads, hd int) {
	be.ropeMirror(y, x, cos, sin, rows, T, heads, hd, false)
}

func (be mirror) RopeBackward(dx, dy, cos, sin device.Tensor, rows, T, heads, hd int) {
	be.ropeMirror(dx, dy, cos, sin, rows, T, heads, hd, true)
}

func (mirror) CrossEntropy(losses []float64, dlogits, logits device.Tensor, targets []int32, V int, scale float32) {
	L, DL := h(logits), h(dlogits)
	for r := range targets {
		x := L[r*V : (r+1)*V]
		mx := float32(math.Inf(-1))
		p := make([]float32, threads)
		for t := range threads {
			p[t] = mx
			for j := t; j < V; j += threads {
				p[t] = max(p[t], x[j])
			}
		}
		mx = blockMax(p)
		s := blockSum(rowThreads(V, func(j int) float32 { return expf(x[j] - mx) }))
		t := targets[r]
		losses[r] = float64(logf(s)) + float64(mx) - float64(x[t])
		if DL == nil {
			continue
		}
		inv := 1 / s
		for j := range V {
			pj := expf(x[j]-mx) * inv
			if int32(j) == t {
				pj--
			}
			DL[r*V+j] = pj * scale
		}
	}
}

func (mirror) Scale(x device.Tensor, s float32) {
	for i, v := range h(x) {
		h(x)[i] = s * v
	}
}

func (mirror) SumSquares(x device.Tensor) float64 {
	X := h(x)
	var total float64
	for blk := range sumSquaresBlocksMirror {
		sh := make([]float64, threads)
		for t := range threads {
			for i := blk*threads + t; i < len(X); i += sumSquaresBlocksMirror * threads {
				sh[t] += float64(X[i]) * float64(X[i])
			}
		}
		for s := threads / 2; s > 0; s >>= 1 {
			for t := 0; t < s; t++ {
				sh[t] += sh[t+s]
			}
		}
		total += sh[0]
	}
	return total
}

// sumSquaresBlocksMirror is ops_optim.go's sumSquaresBlocks (that file needs the driver).
const sumSquaresBlocksMirror = 256

// AttentionSaveLen is ops_attention.go's: the log-sum-exp per query row.
func (mirror) AttentionSaveLen(B, T, H int) int { return B * H * T }

func (be mirror) AttentionForward(out, save, qkv device.Tensor, B, T, H, hd int) {
	d := H * hd
	Q := h(qkv)
	attnForwardMirror(h(out), h(save), Q, Q[d:], Q[2*d:], B, T, H, H, hd, 3*d, 3*d)
}

func (be mirror) AttentionBackward(dqkv, dout, save, qkv device.Tensor, B, T, H, hd int) {
	d := H * hd
	Q, DQ := h(qkv), h(dqkv)
	attnBackwardMirror(DQ, DQ[d:], DQ[2*d:], h(dout), h(save), Q, Q[d:], Q[2*d:], B, T, H, H, hd, 3*d, 3*d)
}

func (be mirror) GroupedAttentionForward(out, save, q, k, v device.Tensor, B, T, H, KVH, hd int) {
	attnForwardMirror(h(out), h(save), h(q), h(k), h(v), B, T, H, KVH, hd, H*hd, KVH*hd)
}

func (be mirror) GroupedAttentionBackward(dq, dk, dv, dout, save, q, k, v device.Tensor, B, T, H, KVH, hd int) {
	attnBackwardMirror(h(dq), h(dk), h(dv), h(dout), h(save), h(q), h(k), h(v), B, T, H, KVH, hd, H*hd, KVH*hd)
}

const maxc = 8

// loadRow and dotRow are attention.cu's load_row and dot_row for the 32 lanes at once:
// lane l holds columns l, l+32, …
func loadRow(src []float32, hd int) (r [32][maxc]float32) {
	for l := range 32 {
		for c := range maxc {
			if d := l + 32*c; d < hd {
				r[l][c] = src[d]
			}
		}
	}
	return r
}

func dotRow(a *[32][maxc]float32, src []float32, hd int) float32 {
	var s [32]float32
	for l := range 32 {
		for c := range maxc {
			if d := l + 32*c; d < hd {
				s[l] = fma32(a[l][c], src[d], s[l])
			}
		}
	}
	return warpSum(s)
}

func attnForwardMirror(out, lse, q, k, v []float32, B, T, H, KVH, hd, qs, ks int) {
	sc := 1 / float32(math.Sqrt(float64(hd)))
	for bh := range B * H {
		b, hh := bh/H, bh%H
		kh := hh / (H / KVH)
		for i := range T {
			qv := loadRow(q[(b*T+i)*qs+hh*hd:], hd)
			var acc [32][maxc]float32
			m, l := float32(math.Inf(-1)), float32(0)
			for j := 0; j <= i; j++ {
				kr := (b*T+j)*ks + kh*hd
				s := dotRow(&qv, k[kr:], hd) * sc
				mn := max(m, s)
				corr, p := expf(m-mn), expf(s-mn)
				l = l*corr + p
				for ln := range 32 {
					for c := range maxc {
						if d := ln + 32*c; d < hd {
							acc[ln][c] = acc[ln][c]*corr + p*v[kr+d]
						}
					}
				}
				m = mn
			}
			o := out[(b*T+i)*H*hd+hh*hd:]
			for ln := range 32 {
				for c := range maxc {
					if d := ln + 32*c; d < hd {
						o[d] = acc[ln][c] / l
					}
				}
			}
			lse[bh*T+i] = m + logf(l)
		}
	}
}

func attnBackwardMirror(dq, dk, dv, dout, save, q, k, v []float32, B, T, H, KVH, hd, qs, ks int) {
	sc := 1 / float32(math.Sqrt(float64(hd)))
	lse, D := save, make([]float32, B*H*T) // D: the backend's scratch
	for bh := range B * H {                // attention_backward_q
		b, hh := bh/H, bh%H
		kh := hh / (H / KVH)
		for i := range T {
			qv := loadRow(q[(b*T+i)*qs+hh*hd:], hd)
			dov := loadRow(dout[(b*T+i)*H*hd+hh*hd:], hd)
			L := lse[bh*T+i]
			var acc [32][maxc]float32
			for j := 0; j <= i; j++ {
				kr := (b*T+j)*ks + kh*hd
				p := expf(dotRow(&qv, k[kr:], hd)*sc - L)
				for ln := range 32 {
					for c := range maxc {
						if d := ln + 32*c; d < hd {
							acc[ln][c] += p * v[kr+d]
						}
					}
				}
			}
			var di [32]float32
			for ln := range 32 {
				for c := range maxc {
					di[ln] = fma32(dov[ln][c], acc[ln][c], di[ln])
				}
			}
			Di := warpSum(di)
			acc = [32][maxc]float32{}
			for j := 0; j <= i; j++ {
				kr := (b*T+j)*ks + kh*hd
				p := expf(dotRow(&qv, k[kr:], hd)*sc - L)
				ds := p * (dotRow(&dov, v[kr:], hd) - Di) * sc
				for ln := range 32 {
					for c := range maxc {
						if d := ln + 32*c; d < hd {
							acc[ln][c] += ds * k[kr+d]
						}
					}
				}
			}
			o := dq[(b*T+i)*qs+hh*hd:]
			for ln := range 32 {
				for c := range maxc {
					if d := ln + 32*c; d < hd {
						o[d] = acc[ln][c]
					}
				}
			}
			D[bh*T+i] = Di
		}
	}
	group := H / KVH
	for bkh := range B * KVH { // attention_backward_kv
		b, kh := bkh/KVH, bkh%KVH
		for j := range T {
			kr := (b*T+j)*ks + kh*hd
			kv, vv := loadRow(k[kr:], hd), loadRow(v[kr:], hd)
			var dka, dva [32][maxc]float32
			for hh := kh * group; hh < (kh+1)*group; hh++ {
				bh := b*H + hh
				for i := j; i < T; i++ {
					qi := q[(b*T+i)*qs+hh*hd:]
					doi := dout[(b*T+i)*H*hd+hh*hd:]
					p := expf(dotRow(&kv, qi, hd)*sc - lse[bh*T+i])
					ds := p * (dotRow(&vv, doi, hd) - D[bh*T+i]) * sc
					for ln := range 32 {
						for c := range maxc {
							if d := ln + 32*c; d < hd {
								dva[ln][c] += p * doi[d]
								dka[ln][c] += ds * qi[d]
							}
						}
					}
				}
			}
			for ln := range 32 {
				for c := range maxc {
					if d := ln + 32*c; d < hd {
						dk[kr+d] = dka[ln][c]
						dv[kr+d] = dva[ln][c]
					}
				}
			}
		}
	}
}

// TestKernelAlgorithmsPassTheSuite runs the conformance suite on the kernels' Go
// transcription: their reductions, index arithmetic and flash-style attention (the
// log-sum-exp save, the recomputed probabilities) meet every backend's specification.
func TestKernelAlgorithmsPassTheSuite(t *testing.T) { devicetest.Run(t, mirror{}) }
