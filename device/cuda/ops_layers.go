//go:build cgo && linux && (amd64 || arm64)

package cuda

import "github.com/meshnode/meshnode/device"

// rowBlock is the threads of a kernel that gives each row one block.
const rowBlock = 256

// EmbeddingForward: out[r] = wte[tokens[r]] + wpe[r mod T] (embedding_forward).
func (b *Backend) EmbeddingForward(out, wte, wpe device.Tensor, tokens []int32, T, d int) {
	rows := len(tokens)
	if rows == 0 || !b.enter() {
		return
	}
	defer b.leave()
	pt := b.int32s(tokens)
	pwte, pwpe := b.in(wte, 0), b.in(wpe, min(rows, T)*d)
	b.launch1D("embedding_forward", rows*d, b.out(out, rows*d), pwte, pwpe, pt, rows, T, d)
}

// EmbeddingBackward: dwte[tokens[r]] += dy[r], dwpe[r mod T] += dy[r], rows in order.
func (b *Backend) EmbeddingBackward(dwte, dwpe, dy device.Tensor, tokens []int32, T, d, V int) {
	rows := len(tokens)
	if rows == 0 || !b.enter() {
		return
	}
	defer b.leave()
	pt, pdy := b.int32s(tokens), b.in(dy, rows*d)
	b.launch1D("embedding_backward_wte", d, b.out(dwte, V*d), pdy, pt, rows, d)
	if !dwpe.IsEmpty() {
		n := min(rows, T)
		b.launch1D("embedding_backward_wpe", n*d, b.out(dwpe, n*d), pdy, rows, T, d)
	}
}

// LayerNormForward: one block per row (layernorm_forward).
func (b *Backend) LayerNormForward(y, mean, rstd, x, w, bias device.Tensor, rows, n int, eps float32) {
	if rows == 0 || !b.enter() {
		return
	}
	defer b.leave()
	px, pw, pb := b.in(x, rows*n), b.in(w, n), b.in(bias, n)
	b.launch("layernorm_forward", rows, 1, rowBlock, 1, b.out(y, rows*n), b.out(mean, rows), b.out(rstd, rows), px, pw, pb, rows, n, eps)
}

// LayerNormBackward: dx by rows (layernorm_backward_dx), dw and db by columns.
func (b *Backend) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w device.Tensor, rows, n int) {
	if rows == 0 || !b.enter() {
		return
	}
	defer b.leave()
	pdy, px, pm, pr, pw := b.in(dy, rows*n), b.in(x, rows*n), b.in(mean, rows), b.in(rstd, rows), b.in(w, n)
	b.launch("layernorm_backward_dx", rows, 1, rowBlock, 1, b.out(dx, rows*n), pdy, px, pm, pr, pw, rows, n)
	b.launch1D("layernorm_backward_dw", n, b.out(dw, n), b.out(db, n), pdy, px, pm, pr, rows, n)
}

// RMSNormForward: one block per row (rmsnorm_forward).
func (b *Backend) RMSNormForward(y, rstd, x, w device.Tensor, rows, n int, eps float32) {
	if rows == 0 || !b.enter() {
		return
	}
	defer b.leave()
	px, pw := b.in(x, rows*n), b.in(w, n)
	b.launch("rmsnorm_forward", rows, 1, rowBlock, 1, b.out(y, rows*n), b.out(rstd, rows), px, pw, rows, n, eps)
}

// RMSNormBackward: dx by rows, dw by columns.
func (b *Backend) RMSNormBackward(dx, dw, dy, x, rstd, w device.Tensor, rows, n int) {
	if rows == 0 || !b.enter() {
		return
	}
	defer b.leave()
	pdy, px, pr, pw := b.in(dy, rows*n), b.in(x, rows*n), b.in(rstd, rows), b.in(w, n)
	b.launch("rmsnorm_backward_dx", rows, 1, rowBlock, 1, b.out(dx, rows*n), pdy, px, pr, pw, rows, n)
	b.launch1D("rmsnorm_backward_dw", n, b.out(dw, n), pdy, px, pr, rows, n)
}

// elementwise runs fn over n = first.Len() elements with the given outputs and inputs
// (outputs may alias inputs: each thread reads its element before writing it).
func (b *Backend) elementwise(fn string, outs, ins []device.Tensor, extra ...any) {
	n := outs[0].Len()
	if n == 0 || !b.enter() {
		return
	}
	defer b.leave()
	var args []any
	// Stage inputs first: an output that is also an input must be staged once, as an
	// output, so that the written values come back.
	for _, t := range outs {
		args = append(args, b.out(t, n))
	}
	for _, t := range ins {
		p := uint64(0)
		for i, o := range outs {
			if sameTensor(t, o) {
				p = args[i].(uint64)
			}
		}
		if p == 0 {
			p = b.in(t, n)
		}
		args = append(args, p)
	}
	args = append(args, extra...)
	args = append(args, int64(n))
	b.launch1D(fn, n, args...)
}

// GeluForward: y = gelu(x) (gelu_forward).
func (b *Backend) GeluForward(y, x device.Tensor) {
	b.elementwise("gelu_forward", []device.Tensor{y}, []device.Tensor{x})
}

// GeluBackward: dx = dy·gelu'(x) (gelu_backward).
func (b *Backend) GeluBackward(dx, x, dy device.Tensor) {
	b.elementwise("gelu_backward", []device.Tensor{dx}, []device.Tensor{x, dy})
}

// SwiGLUForward: h = silu(gate)·up (swiglu_forward).
func (b *Backend) SwiGLUForward(h, gate, up device.Tensor) {
	b.elementwise("swiglu_forward", []device.Tensor{h}, []device.Tensor{gate, up})
}

// SwiGLUBackward: dgate and dup from dh (swiglu_backward).
func (b *Backend) SwiGLUBackward(dgate, dup, gate, up, dh device.Tensor) {
	b.elementwise("swiglu_backward", []device.Tensor{dgate, dup}, []device.Tensor{gate, up, dh})
}

// Add: dst = a + b (add).
func (b *Backend) Add(dst, x, y device.Tensor) {
	b.elementwise("add", []device.Tensor{dst}, []device.Tensor{x, y})
}

// RopeForward rotates each (i, i+hd/2) pair by its position's angle (rope).
func (b *Backend) RopeForward(y, x, cos, sin device.Tensor, rows, T, heads, hd int) {
	b.rope(y, x, cos, sin, rows, T, heads, hd, 0)
}

// RopeBackward is the inverse rotation (rope with the sine negated).
func (b *Backend) RopeBackward(dx, dy, cos, sin device.Tensor, rows, T, heads, hd int) {
	b.rope(dx, dy, cos, sin, rows, T, heads, hd, 1)
}

func (b *Backend) rope(y, x, cos, sin device.Tensor, rows, T, heads, hd, inverse int) {
	n := rows * heads * hd
	if n == 0 || !b.enter() {
		return
	}
	defer b.leave()
	half := hd / 2
	pc, ps := b.in(cos, min(rows, T)*half), b.in(sin, min(rows, T)*half)
	py := b.out(y, n)
	px := py
	if !sameTensor(x, y) {
		px = b.in(x, n)
	}
	b.launch1D("rope", rows*heads*half, py, px, pc, ps, rows, T, heads, hd, inverse)
}

// sameTensor reports whether a and c are the same view: an output given again as an
// input must be staged once.
func sameTensor(a, c device.Tensor) bool {
	if a.Len() != c.Len() || a.IsEmpty() {
		return false
	}
	ha, hc := a.Host(), c.Host()
	if ha != nil || hc != nil {
		return ha != nil && hc != nil && &ha[0] == &hc[0]
	}
	ma, oa := a.Memory()
	mc, oc := c.Memory()
	return ma == mc && oa == oc
}
