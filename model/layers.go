package model

import (
	"fmt"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/kernels"
)

// Embedding is layer 0: token plus position embedding, wte[token] + wpe[position]; Llama's
// has no position table (its positions are rotary, in the blocks): wte[token].
type Embedding struct {
	cfg      Config
	wte, wpe *Param // wpe nil for llama
}

// NewEmbedding returns the embedding layer of cfg, zero-initialised.
func NewEmbedding(cfg Config) *Embedding { return newEmbedding(cfg, false) }

func newEmbedding(cfg Config, shell bool) *Embedding {
	if cfg.FamilyName() == jobspec.FamilyLlama {
		return &Embedding{cfg: cfg, wte: newParam(shell, "model.embed_tokens.weight", cfg.Vocab, cfg.DModel)}
	}
	return &Embedding{cfg: cfg,
		wte: newParam(shell, "transformer.wte.weight", cfg.Vocab, cfg.DModel),
		wpe: newParam(shell, "transformer.wpe.weight", cfg.Context, cfg.DModel)}
}

func (e *Embedding) Name() string { return "embed" }
func (e *Embedding) Params() []*Param {
	if e.wpe == nil {
		return []*Param{e.wte}
	}
	return []*Param{e.wte, e.wpe}
}

// positionValue and positionGrad are the position table's weights and gradient, empty
// tensors when there is none. They are separate because the forward pass may touch only
// the weights: an offloaded stage's store binds the gradient's memory only around the
// backward pass, and moves it concurrently otherwise.
func (e *Embedding) positionValue() device.Tensor {
	if e.wpe == nil {
		return device.Tensor{}
	}
	return e.wpe.value()
}

func (e *Embedding) positionGrad() device.Tensor {
	if e.wpe == nil {
		return device.Tensor{}
	}
	return e.wpe.grad()
}

func (e *Embedding) Forward(ws *Workspace, mb *Batch, _ []float32) ([]float32, Saved) {
	y := ws.AllocTensor(mb.Rows() * e.cfg.DModel)
	wpe := e.positionValue()
	ws.backend().EmbeddingForward(y, e.wte.value(), wpe, mb.Inputs, mb.T, e.cfg.DModel)
	return ws.output(y), nil
}

func (e *Embedding) Backward(ws *Workspace, mb *Batch, _ Saved, dy []float32) []float32 {
	if e.wte.Frozen {
		return nil // a frozen embedding (LoRA's base) has nothing to learn from dy
	}
	dwpe := e.positionGrad()
	ws.backend().EmbeddingBackward(e.wte.grad(), dwpe, ws.input(dy), mb.Inputs, mb.T, e.cfg.DModel, e.cfg.Vocab)
	return nil
}

// Block is one pre-LayerNorm transformer block: x += attn(ln_1(x)); x += mlp(ln_2(x)).
type Block struct {
	cfg           Config
	index         int
	ln1, ln2      layerNorm
	attn, proj    linear
	fc, mlpProj   linear
	paramsInOrder []*Param
}

// NewBlock returns block i of cfg with LayerNorm weights 1 and everything else 0.
func NewBlock(cfg Config, i int) *Block { return newBlock(cfg, i, false) }

func newBlock(cfg Config, i int, shell bool) *Block {
	d, hid, eps, p := cfg.DModel, cfg.Hidden(), cfg.normEps(), fmt.Sprintf("transformer.h.%d.", i)
	b := &Block{cfg: cfg, index: i,
		ln1: newLayerNorm(shell, p+"ln_1", d, eps), attn: newLinear(shell, p+"attn.c_attn", d, 3*d),
		proj: newLinear(shell, p+"attn.c_proj", d, d), ln2: newLayerNorm(shell, p+"ln_2", d, eps),
		fc: newLinear(shell, p+"mlp.c_fc", d, hid), mlpProj: newLinear(shell, p+"mlp.c_proj", hid, d)}
	b.paramsInOrder = []*Param{b.ln1.w, b.ln1.b, b.attn.w, b.attn.b, b.proj.w, b.proj.b,
		b.ln2.w, b.ln2.b, b.fc.w, b.fc.b, b.mlpProj.w, b.mlpProj.b}
	return b
}

func (b *Block) Name() string     { return fmt.Sprintf("block.%d", b.index) }
func (b *Block) Params() []*Param { return b.paramsInOrder }

// blockSaved is what a block's forward pass keeps: its input, the attention's saved state
// (save) and every intermediate activation.
type blockSaved struct {
	x, ln1, qkv, save, att, x2, ln2, h, g device.Tensor
	n1, n2                                layerNormSaved
}

func (b *Block) Forward(ws *Workspace, mb *Batch, x []float32) ([]float32, Saved) {
	s := &blockSaved{x: ws.input(x)}
	b.forwardAttn(ws, mb, s)
	b.forwardMLP(ws, mb, s)
	return ws.output(b.output(ws, mb, s)), s
}

// output is the block's output from the MLP half's activations: x2 + mlp_proj(g).
func (b *Block) output(ws *Workspace, mb *Batch, s *blockSaved) device.Tensor {
	y := b.mlpProj.forward(ws, s.g, mb.Rows())
	ws.backend().Add(y, y, s.x2)
	return y
}

// forwardAttn runs the attention half from s.x: s.x2 = x + attn(ln_1(x)).
func (b *Block) forwardAttn(ws *Workspace, mb *Batch, s *blockSaved) {
	rows, d, H, be := mb.Rows(), b.cfg.DModel, b.cfg.Heads, ws.backend()
	s.ln1, s.n1 = b.ln1.forward(ws, s.x, rows)
	s.qkv = b.attn.forward(ws, s.ln1, rows)
	s.save = ws.AllocTensor(be.AttentionSaveLen(mb.B, mb.T, H))
	s.att = ws.AllocTensor(rows * d)
	be.AttentionForward(s.att, s.save, s.qkv, mb.B, mb.T, H, d/H)
	s.x2 = b.proj.forward(ws, s.att, rows)
	be.Add(s.x2, s.x2, s.x)
}

// forwardMLP runs the MLP half from s.x2 up to the GELU: what its backward pass needs.
func (b *Block) forwardMLP(ws *Workspace, mb *Batch, s *blockSaved) {
	rows := mb.Rows()
	s.ln2, s.n2 = b.ln2.forward(ws, s.x2, rows)
	s.h = b.fc.forward(ws, s.ln2, rows)
	s.g = ws.AllocTensor(s.h.Len())
	ws.backend().GeluForward(s.g, s.h)
}

func (b *Block) Backward(ws *Workspace, mb *Batch, saved Saved, dy []float32) []float32 {
	s := saved.(*blockSaved)
	dx2 := b.backwardMLP(ws, mb, s, ws.input(dy))
	return ws.output(b.backwardAttn(ws, mb, s, dx2))
}

// backwardMLP returns the gradient at x2: dy through the MLP branch plus the residual.
func (b *Block) backwardMLP(ws *Workspace, mb *Batch, s *blockSaved, dy device.Tensor) device.Tensor {
	rows, be := mb.Rows(), ws.backend()
	dx2 := ws.AllocTensor(dy.Len())
	be.Copy(dx2, dy)
	dg := b.mlpProj.backward(ws, s.g, dy, rows)
	be.GeluBackward(dg, s.h, dg)
	dln2 := b.fc.backward(ws, s.ln2, dg, rows)
	b.ln2.backward(ws, dx2, dln2, s.x2, s.n2, rows)
	return dx2
}

// backwardAttn returns the gradient at x: dx2 through the attention branch plus the
// residual.
func (b *Block) backwardAttn(ws *Workspace, mb *Batch, s *blockSaved, dx2 device.Tensor) device.Tensor {
	rows, d, H, be := mb.Rows(), b.cfg.DModel, b.cfg.Heads, ws.backend()
	dx := ws.AllocTensor(dx2.Len())
	be.Copy(dx, dx2)
	datt := b.proj.backward(ws, s.att, dx2, rows)
	dqkv := ws.AllocTensor(s.qkv.Len())
	be.AttentionBackward(dqkv, datt, s.save, s.qkv, mb.B, mb.T, H, d/H)
	dln1 := b.attn.backward(ws, s.ln1, dqkv, rows)
	b.ln1.backward(ws, dx, dln1, s.x, s.n1, rows)
	return dx
}

// Head is the last layer: the final normalisation (GPT-2's ln_f, Llama's model.norm), the
// lm_head projection and the mean cross-entropy against the batch's targets. A tied head's
// lm_head is its view of the embedding's token table, not listed among its parameters: the
// same Value when the embedding is in its stage, a copy otherwise, and a gradient of its
// own that is added into the embedding's at the end of a step (model/tied.go).
type Head struct {
	cfg    Config
	lnf    norm
	lmHead *Param
	tied   bool
}

// NewHead returns the head of cfg with its norm's weight 1 and a zero lm_head (for a tied
// head, a zero copy of the table: New and NewLayers share the embedding's when they build
// both).
func NewHead(cfg Config) *Head { return newHead(cfg, false, false) }

// newHead builds the head; sharesTable (a tied head built with its embedding) leaves its
// table's Value for tie to bind.
func newHead(cfg Config, shell, sharesTable bool) *Head {
	h := &Head{cfg: cfg, tied: cfg.TiedHead()}
	if cfg.FamilyName() == jobspec.FamilyLlama {
		h.lnf = newRMSNorm(shell, "model.norm.weight", cfg.DModel, cfg.normEps())
	} else {
		ln := newLayerNorm(shell, "transformer.ln_f", cfg.DModel, cfg.normEps())
		h.lnf = &ln
	}
	if h.tied && sharesTable && !shell {
		h.lmHead = &Param{Name: "lm_head.weight", Grad: kernels.NewTensor(cfg.Vocab, cfg.DModel), Decay: true}
	} else {
		h.lmHead = newParam(shell, "lm_head.weight", cfg.Vocab, cfg.DModel)
	}
	return h
}

func (h *Head) Name() string { return "head" }

// Params lists the norm's parameters and, unless the head is tied, lm_head.
func (h *Head) Params() []*Param {
	if h.tied {
		return h.lnf.params()
	}
	return append(h.lnf.params(), h.lmHead)
}

type headSaved struct {
	x, lnf, logits device.Tensor
	n              layerNormSaved
}

// Logits returns the rows×V logits of x without computing a loss (for sampling).
func (h *Head) Logits(ws *Workspace, x []float32, rows int) []float32 {
	lnf, _ := h.lnf.forward(ws, ws.input(x), rows)
	return ws.output(h.logits(ws, lnf, rows))
}

func (h *Head) logits(ws *Workspace, lnf device.Tensor, rows int) device.Tensor {
	d, V := h.cfg.DModel, h.cfg.Vocab
	logits := ws.AllocTensor(rows * V)
	ws.backend().Gemm(false, true, rows, V, d, 1, lnf, d, h.lmHead.value(), d, 0, logits, V)
	return logits
}

func (h *Head) Forward(ws *Workspace, mb *Batch, x []float32) ([]float32, Saved) {
	rows := mb.Rows()
	s := &headSaved{x: ws.input(x)}
	s.lnf, s.n = h.lnf.forward(ws, s.x, rows)
	s.logits = h.logits(ws, s.lnf, rows)
	losses := mb.RowLoss
	if losses == nil {
		losses = make([]float64, rows)
	}
	ws.backend().CrossEntropy(losses, device.Tensor{}, s.logits, mb.Targets, h.cfg.Vocab, 0)
	var sum float64
	for _, l := range losses {
		sum += l
	}
	// The loss is computed on the host; the output is its one-element host view.
	y := ws.output(ws.AllocTensor(1))
	y[0] = float32(sum / float64(rows))
	return y, s
}

func (h *Head) Backward(ws *Workspace, mb *Batch, saved Saved, dy []float32) []float32 {
	s := saved.(*headSaved)
	rows, d, V := mb.Rows(), h.cfg.DModel, h.cfg.Vocab
	be := ws.backend()
	// The logits buffer becomes dlogits: the gradient of dy[0]·mean(loss).
	scratch := make([]float64, rows)
	be.CrossEntropy(scratch, s.logits, s.logits, mb.Targets, V, dy[0]/float32(rows))
	dlogits := s.logits
	if !h.lmHead.Frozen {
		be.Gemm(true, false, V, d, rows, 1, dlogits, V, s.lnf, d, 1, h.lmHead.grad(), d)
	}
	dlnf := ws.AllocTensor(rows * d)
	be.Gemm(false, false, rows, d, V, 1, dlogits, V, h.lmHead.value(), d, 0, dlnf, d)
	dx := ws.allocZero(rows * d)
	h.lnf.backward(ws, dx, dlnf, s.x, s.n, rows)
	return ws.output(dx)
}
