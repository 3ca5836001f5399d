package model

import (
	"fmt"

	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/kernels"
)

// LlamaBlock is one Llama decoder layer (Hugging Face's LlamaDecoderLayer), pre-RMSNorm:
//
//	x2 = x + o_proj(attn(rope(q_proj(h)), rope(k_proj(h)), v_proj(h))),  h = input_layernorm(x)
//	y  = x2 + down_proj(silu(gate_proj(m))·up_proj(m)),                  m = post_attention_layernorm(x2)
//
// Attention is causal and grouped-query (KVHeadCount key/value heads, each read by
// Heads/KVHeadCount query heads); projections have no bias and are stored [out, in].
type LlamaBlock struct {
	cfg              Config
	index            int
	inNorm, postNorm *rmsNorm
	q, k, v, o       linearT
	gate, up, down   linearT
	cos, sin         []float32 // the rotary tables, Context×HeadDim/2
	paramsInOrder    []*Param
}

// ropeTables are the rotary cosines and sines of a model, shared by its blocks.
type ropeTables struct{ cos, sin []float32 }

func newRopeTables(cfg Config) *ropeTables {
	c, s := kernels.RopeTables(cfg.Context, cfg.HeadDim(), cfg.theta())
	return &ropeTables{cos: c, sin: s}
}

func newLlamaBlock(cfg Config, i int, shell bool, rope *ropeTables) *LlamaBlock {
	d, kvd, hid, eps := cfg.DModel, cfg.KVHeadCount()*cfg.HeadDim(), cfg.Hidden(), cfg.normEps()
	p := fmt.Sprintf("model.layers.%d.", i)
	b := &LlamaBlock{cfg: cfg, index: i, cos: rope.cos, sin: rope.sin,
		inNorm:   newRMSNorm(shell, p+"input_layernorm.weight", d, eps),
		q:        newLinearT(shell, p+"self_attn.q_proj.weight", d, d),
		k:        newLinearT(shell, p+"self_attn.k_proj.weight", d, kvd),
		v:        newLinearT(shell, p+"self_attn.v_proj.weight", d, kvd),
		o:        newLinearT(shell, p+"self_attn.o_proj.weight", d, d),
		postNorm: newRMSNorm(shell, p+"post_attention_layernorm.weight", d, eps),
		gate:     newLinearT(shell, p+"mlp.gate_proj.weight", d, hid),
		up:       newLinearT(shell, p+"mlp.up_proj.weight", d, hid),
		down:     newLinearT(shell, p+"mlp.down_proj.weight", hid, d)}
	b.paramsInOrder = []*Param{b.inNorm.w, b.q.w, b.k.w, b.v.w, b.o.w, b.postNorm.w, b.gate.w, b.up.w, b.down.w}
	return b
}

func (b *LlamaBlock) Name() string     { return fmt.Sprintf("block.%d", b.index) }
func (b *LlamaBlock) Params() []*Param { return b.paramsInOrder }

// llamaSaved is what a Llama block's forward pass keeps: its input, every intermediate
// activation (q and k after the rotation) and the attention's saved state.
type llamaSaved struct {
	x, h, q, k, v, save, att, x2, m, g, u, a device.Tensor
	n1, n2                                   layerNormSaved
}

func (b *LlamaBlock) tables() (cos, sin device.Tensor) {
	return device.Host(b.cos), device.Host(b.sin)
}

func (b *LlamaBlock) Forward(ws *Workspace, mb *Batch, x []float32) ([]float32, Saved) {
	s := &llamaSaved{x: ws.input(x)}
	b.forwardAttn(ws, mb, s)
	b.forwardMLP(ws, mb, s)
	return ws.output(b.output(ws, mb, s)), s
}

// forwardAttn runs the attention half from s.x: s.x2 = x + o_proj(attn(…)).
func (b *LlamaBlock) forwardAttn(ws *Workspace, mb *Batch, s *llamaSaved) {
	rows, T, H, KVH, hd, be := mb.Rows(), mb.T, b.cfg.Heads, b.cfg.KVHeadCount(), b.cfg.HeadDim(), ws.backend()
	cos, sin := b.tables()
	s.h, s.n1 = b.inNorm.forward(ws, s.x, rows)
	s.q, s.k, s.v = b.q.forward(ws, s.h, rows), b.k.forward(ws, s.h, rows), b.v.forward(ws, s.h, rows)
	be.RopeForward(s.q, s.q, cos, sin, rows, T, H, hd)
	be.RopeForward(s.k, s.k, cos, sin, rows, T, KVH, hd)
	s.save = ws.AllocTensor(be.AttentionSaveLen(mb.B, T, H))
	s.att = ws.AllocTensor(rows * b.cfg.DModel)
	be.GroupedAttentionForward(s.att, s.save, s.q, s.k, s.v, mb.B, T, H, KVH, hd)
	s.x2 = b.o.forward(ws, s.att, rows)
	be.Add(s.x2, s.x2, s.x)
}

// forwardMLP runs the MLP half from s.x2 up to the SwiGLU product: what its backward pass
// needs.
func (b *LlamaBlock) forwardMLP(ws *Workspace, mb *Batch, s *llamaSaved) {
	rows := mb.Rows()
	s.m, s.n2 = b.postNorm.forward(ws, s.x2, rows)
	s.g, s.u = b.gate.forward(ws, s.m, rows), b.up.forward(ws, s.m, rows)
	s.a = ws.AllocTensor(s.g.Len())
	ws.backend().SwiGLUForward(s.a, s.g, s.u)
}

// output is the block's output from the MLP half's activations: x2 + down_proj(a).
func (b *LlamaBlock) output(ws *Workspace, mb *Batch, s *llamaSaved) device.Tensor {
	y := b.down.forward(ws, s.a, mb.Rows())
	ws.backend().Add(y, y, s.x2)
	return y
}

func (b *LlamaBlock) Backward(ws *Workspace, mb *Batch, saved Saved, dy []float32) []float32 {
	s := saved.(*llamaSaved)
	dx2 := b.backwardMLP(ws, mb, s, ws.input(dy))
	return ws.output(b.backwardAttn(ws, mb, s, dx2))
}

// backwardMLP returns the gradient at x2: dy through the MLP branch plus the residual.
func (b *LlamaBlock) backwardMLP(ws *Workspace, mb *Batch, s *llamaSaved, dy device.Tensor) device.Tensor {
	rows, be := mb.Rows(), ws.backend()
	dx2 := ws.AllocTensor(dy.Len())
	be.Copy(dx2, dy)
	da := b.down.backward(ws, s.a, dy, rows)
	dg, du := ws.AllocTensor(da.Len()), ws.AllocTensor(da.Len())
	be.SwiGLUBackward(dg, du, s.g, s.u, da)
	dm := b.gate.backward(ws, s.m, dg, rows)
	be.Add(dm, dm, b.up.backward(ws, s.m, du, rows))
	b.postNorm.backward(ws, dx2, dm, s.x2, s.n2, rows)
	return dx2
}

// backwardAttn returns the gradient at x: dx2 through the attention branch plus the
// residual.
func (b *LlamaBlock) backwardAttn(ws *Workspace, mb *Batch, s *llamaSaved, dx2 device.Tensor) device.Tensor {
	rows, T, H, KVH, hd, be := mb.Rows(), mb.T, b.cfg.Heads, b.cfg.KVHeadCount(), b.cfg.HeadDim(), ws.backend()
	cos, sin := b.tables()
	dx := ws.AllocTensor(dx2.Len())
	be.Copy(dx, dx2)
	datt := b.o.backward(ws, s.att, dx2, rows)
	dq, dk, dv := ws.AllocTensor(s.q.Len()), ws.AllocTensor(s.k.Len()), ws.AllocTensor(s.v.Len())
	be.GroupedAttentionBackward(dq, dk, dv, datt, s.save, s.q, s.k, s.v, mb.B, T, H, KVH, hd)
	be.RopeBackward(dq, dq, cos, sin, rows, T, H, hd)
	be.RopeBackward(dk, dk, cos, sin, rows, T, KVH, hd)
	dh := b.q.backward(ws, s.h, dq, rows)
	be.Add(dh, dh, b.k.backward(ws, s.h, dk, rows))
	be.Add(dh, dh, b.v.backward(ws, s.h, dv, rows))
	b.inNorm.backward(ws, dx, dh, s.x, s.n1, rows)
	return dx
}
