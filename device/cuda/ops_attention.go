//go:build cgo && linux && (amd64 || arm64)

package cuda

import (
	"fmt"

	"github.com/meshnode/meshnode/device"
)

// maxHeadDim is what the attention kernels' registers hold (kernels/attention.cu MAXC·32).
const maxHeadDim = 256

// attnRows is the query (or key) rows one block of the attention kernels handles: four
// warps of 32 threads.
const attnRows = 4

// AttentionSaveLen is B·H·T: each query row's log-sum-exp. The T×T probabilities are
// never stored; the backward pass recomputes them.
func (b *Backend) AttentionSaveLen(B, T, H int) int { return B * H * T }

// AttentionForward is GroupedAttentionForward over the fused projection, with KVH = H.
func (b *Backend) AttentionForward(out, save, qkv device.Tensor, B, T, H, hd int) {
	if B*T == 0 || !b.enter() {
		return
	}
	defer b.leave()
	d := H * hd
	p := b.in(qkv, B*T*3*d)
	b.attnForward(b.out(out, B*T*d), b.out(save, b.AttentionSaveLen(B, T, H)), p, p+uint64(4*d), p+uint64(8*d), B, T, H, H, hd, 3*d, 3*d)
}

// AttentionBackward is GroupedAttentionBackward over the fused projection and gradient.
func (b *Backend) AttentionBackward(dqkv, dout, save, qkv device.Tensor, B, T, H, hd int) {
	if B*T == 0 || !b.enter() {
		return
	}
	defer b.leave()
	d := H * hd
	p, dp := b.in(qkv, B*T*3*d), b.out(dqkv, B*T*3*d)
	off := uint64(4 * d)
	b.attnBackward(dp, dp+off, dp+2*off, b.in(dout, B*T*d), b.in(save, b.AttentionSaveLen(B, T, H)), p, p+off, p+2*off, B, T, H, H, hd, 3*d, 3*d)
}

// GroupedAttentionForward: one warp per query row, online softmax over the keys j ≤ i
// (attention_forward); save receives each row's log-sum-exp.
func (b *Backend) GroupedAttentionForward(out, save, q, k, v device.Tensor, B, T, H, KVH, hd int) {
	if B*T == 0 || !b.enter() {
		return
	}
	defer b.leave()
	pq, pk, pv := b.in(q, B*T*H*hd), b.in(k, B*T*KVH*hd), b.in(v, B*T*KVH*hd)
	b.attnForward(b.out(out, B*T*H*hd), b.out(save, b.AttentionSaveLen(B, T, H)), pq, pk, pv, B, T, H, KVH, hd, H*hd, KVH*hd)
}

// GroupedAttentionBackward: D and dq per query row (attention_backward_q), then dk and dv
// per key row over the query heads that read it (attention_backward_kv).
func (b *Backend) GroupedAttentionBackward(dq, dk, dv, dout, save, q, k, v device.Tensor, B, T, H, KVH, hd int) {
	if B*T == 0 || !b.enter() {
		return
	}
	defer b.leave()
	pq, pk, pv := b.in(q, B*T*H*hd), b.in(k, B*T*KVH*hd), b.in(v, B*T*KVH*hd)
	b.attnBackward(b.out(dq, B*T*H*hd), b.out(dk, B*T*KVH*hd), b.out(dv, B*T*KVH*hd), b.in(dout, B*T*H*hd),
		b.in(save, b.AttentionSaveLen(B, T, H)), pq, pk, pv, B, T, H, KVH, hd, H*hd, KVH*hd)
}

func (b *Backend) attnShape(B, H, KVH, hd int) bool {
	if hd < 1 || hd > maxHeadDim || KVH < 1 || H%KVH != 0 || B*H > maxGridY {
		b.fail(fmt.Errorf("cuda: attention of %d sequences, %d heads, %d key/value heads of dimension %d: the kernels need 1 ≤ hd ≤ %d, KVH dividing H and B·H ≤ %d", B, H, KVH, hd, maxHeadDim, maxGridY))
		return false
	}
	return true
}

// maxGridY is CUDA's limit on a grid's second dimension.
const maxGridY = 65535

func (b *Backend) attnForward(out, save, q, k, v uint64, B, T, H, KVH, hd, qs, ks int) {
	if !b.attnShape(B, H, KVH, hd) {
		return
	}
	b.launch("attention_forward", (T+attnRows-1)/attnRows, B*H, 32*attnRows, 1, out, save, q, k, v, B, T, H, KVH, hd, qs, ks)
}

func (b *Backend) attnBackward(dq, dk, dv, dout, lse, q, k, v uint64, B, T, H, KVH, hd, qs, ks int) {
	if !b.attnShape(B, H, KVH, hd) {
		return
	}
	D := b.stage.alloc(b, uint64(4*B*H*T)) // D = dout·out per query row, scratch
	if D == 0 {
		return
	}
	g := (T + attnRows - 1) / attnRows
	b.launch("attention_backward_q", g, B*H, 32*attnRows, 1, dq, D, dout, lse, q, k, v, B, T, H, KVH, hd, qs, ks)
	b.launch("attention_backward_kv", g, B*KVH, 32*attnRows, 1, dk, dv, dout, lse, D, q, k, v, B, T, H, KVH, hd, qs, ks)
}
