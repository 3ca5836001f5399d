package model

import (
	"fmt"

	"github.com/meshnode/meshnode/kernels"
)

// Embedding is layer 0: token plus position embedding, wte[token] + wpe[position].
type Embedding struct {
	cfg      Config
	wte, wpe *Param
}

// NewEmbedding returns the embedding layer of cfg, zero-initialised.
func NewEmbedding(cfg Config) *Embedding { return newEmbedding(cfg, false) }

func newEmbedding(cfg Config, shell bool) *Embedding {
	return &Embedding{cfg: cfg,
		wte: newParam(shell, "transformer.wte.weight", cfg.Vocab, cfg.DModel),
		wpe: newParam(shell, "transformer.wpe.weight", cfg.Context, cfg.DModel)}
}

func (e *Embedding) Name() string     { return "embed" }
func (e *Embedding) Params() []*Param { return []*Param{e.wte, e.wpe} }

func (e *Embedding) Forward(ws *Workspace, mb *Batch, _ []float32) ([]float32, Saved) {
	y := ws.AllocDirty(mb.Rows() * e.cfg.DModel)
	kernels.EmbeddingForward(y, e.wte.Value.Data, e.wpe.Value.Data, mb.Inputs, mb.T, e.cfg.DModel)
	return y, nil
}

func (e *Embedding) Backward(_ *Workspace, mb *Batch, _ Saved, dy []float32) []float32 {
	kernels.EmbeddingBackward(e.wte.Grad.Data, e.wpe.Grad.Data, dy, mb.Inputs, mb.T, e.cfg.DModel, e.cfg.Vocab)
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
	d, p := cfg.DModel, fmt.Sprintf("transformer.h.%d.", i)
	b := &Block{cfg: cfg, index: i,
		ln1: newLayerNorm(shell, p+"ln_1", d), attn: newLinear(shell, p+"attn.c_attn", d, 3*d),
		proj: newLinear(shell, p+"attn.c_proj", d, d), ln2: newLayerNorm(shell, p+"ln_2", d),
		fc: newLinear(shell, p+"mlp.c_fc", d, 4*d), mlpProj: newLinear(shell, p+"mlp.c_proj", 4*d, d)}
	b.paramsInOrder = []*Param{b.ln1.w, b.ln1.b, b.attn.w, b.attn.b, b.proj.w, b.proj.b,
		b.ln2.w, b.ln2.b, b.fc.w, b.fc.b, b.mlpProj.w, b.mlpProj.b}
	return b
}

func (b *Block) Name() string     { return fmt.Sprintf("block.%d", b.index) }
func (b *Block) Params() []*Param { return b.paramsInOrder }

type blockSaved struct {
	x, ln1, qkv, probs, att, x2, ln2, h, g []float32
	n1, n2                                 layerNormSaved
}

func (b *Block) Forward(ws *Workspace, mb *Batch, x []float32) ([]float32, Saved) {
	s := &blockSaved{x: x}
	b.forwardAttn(ws, mb, s)
	b.forwardMLP(ws, mb, s)
	return b.output(ws, mb, s), s
}

// output is the block's output from the MLP half's activations: x2 + mlp_proj(g).
func (b *Block) output(ws *Workspace, mb *Batch, s *blockSaved) []float32 {
	y := b.mlpProj.forward(ws, s.g, mb.Rows())
	kernels.AddTo(y, s.x2)
	return y
}

// forwardAttn runs the attention half from s.x: s.x2 = x + attn(ln_1(x)).
func (b *Block) forwardAttn(ws *Workspace, mb *Batch, s *blockSaved) {
	rows, d, H := mb.Rows(), b.cfg.DModel, b.cfg.Heads
	s.ln1, s.n1 = b.ln1.forward(ws, s.x, rows)
	s.qkv = b.attn.forward(ws, s.ln1, rows)
	s.probs = ws.AllocDirty(mb.B * H * mb.T * mb.T)
	s.att = ws.AllocDirty(rows * d)
	kernels.AttentionForward(s.att, s.probs, s.qkv, mb.B, mb.T, H, d/H)
	s.x2 = b.proj.forward(ws, s.att, rows)
	kernels.AddTo(s.x2, s.x)
}

// forwardMLP runs the MLP half from s.x2 up to the GELU: what its backward pass needs.
func (b *Block) forwardMLP(ws *Workspace, mb *Batch, s *blockSaved) {
	rows := mb.Rows()
	s.ln2, s.n2 = b.ln2.forward(ws, s.x2, rows)
	s.h = b.fc.forward(ws, s.ln2, rows)
	s.g = ws.AllocDirty(len(s.h))
	kernels.GeluForward(s.g, s.h)
}

func (b *Block) Backward(ws *Workspace, mb *Batch, saved Saved, dy []float32) []float32 {
	s := saved.(*blockSaved)
	dx2 := b.backwardMLP(ws, mb, s, dy)
	return b.backwardAttn(ws, mb, s, dx2)
}

// backwardMLP returns the gradient at x2: dy through the MLP branch plus the residual.
func (b *Block) backwardMLP(ws *Workspace, mb *Batch, s *blockSaved, dy []float32) []float32 {
	rows := mb.Rows()
	dx2 := ws.AllocDirty(len(dy))
	copy(dx2, dy)
	dg := b.mlpProj.backward(ws, s.g, dy, rows)
	kernels.GeluBackward(dg, s.h, dg)
	dln2 := b.fc.backward(ws, s.ln2, dg, rows)
	b.ln2.backward(dx2, dln2, s.x2, s.n2, rows)
	return dx2
}

// backwardAttn returns the gradient at x: dx2 through the attention branch plus the
// residual.
func (b *Block) backwardAttn(ws *Workspace, mb *Batch, s *blockSaved, dx2 []float32) []float32 {
	rows, d, H := mb.Rows(), b.cfg.DModel, b.cfg.Heads
	dx := ws.AllocDirty(len(dx2))
	copy(dx, dx2)
	datt := b.proj.backward(ws, s.att, dx2, rows)
	dqkv := ws.AllocDirty(len(s.qkv))
	kernels.AttentionBackward(dqkv, datt, s.probs, s.qkv, mb.B, mb.T, H, d/H)
	dln1 := b.attn.backward(ws, s.ln1, dqkv, rows)
	b.ln1.backward(dx, dln1, s.x, s.n1, rows)
	return dx
}

// Head is the last layer: final LayerNorm, the untied lm_head projection and the mean
// cross-entropy against the batch's targets.
type Head struct {
	cfg    Config
	lnf    layerNorm
	lmHead *Param
}

// NewHead returns the head of cfg with LayerNorm weight 1 and a zero lm_head.
func NewHead(cfg Config) *Head { return newHead(cfg, false) }

func newHead(cfg Config, shell bool) *Head {
	return &Head{cfg: cfg, lnf: newLayerNorm(shell, "transformer.ln_f", cfg.DModel),
		lmHead: newParam(shell, "lm_head.weight", cfg.Vocab, cfg.DModel)}
}

func (h *Head) Name() string     { return "head" }
func (h *Head) Params() []*Param { return []*Param{h.lnf.w, h.lnf.b, h.lmHead} }

type headSaved struct {
	x, lnf, logits []float32
	n              layerNormSaved
}

// Logits returns the rows×V logits of x without computing a loss (for sampling).
func (h *Head) Logits(ws *Workspace, x []float32, rows int) []float32 {
	lnf, _ := h.lnf.forward(ws, x, rows)
	return h.logits(ws, lnf, rows)
}

func (h *Head) logits(ws *Workspace, lnf []float32, rows int) []float32 {
	d, V := h.cfg.DModel, h.cfg.Vocab
	logits := ws.AllocDirty(rows * V)
	kernels.Gemm(false, true, rows, V, d, 1, lnf, d, h.lmHead.Value.Data, d, 0, logits, V)
	return logits
}

func (h *Head) Forward(ws *Workspace, mb *Batch, x []float32) ([]float32, Saved) {
	rows := mb.Rows()
	s := &headSaved{x: x}
	s.lnf, s.n = h.lnf.forward(ws, x, rows)
	s.logits = h.logits(ws, s.lnf, rows)
	losses := mb.RowLoss
	if losses == nil {
		losses = make([]float64, rows)
	}
	kernels.CrossEntropy(losses, nil, s.logits, mb.Targets, h.cfg.Vocab, 0)
	var sum float64
	for _, l := range losses {
		sum += l
	}
	y := ws.AllocDirty(1)
	y[0] = float32(sum / float64(rows))
	return y, s
}

func (h *Head) Backward(ws *Workspace, mb *Batch, saved Saved, dy []float32) []float32 {
	s := saved.(*headSaved)
	rows, d, V := mb.Rows(), h.cfg.DModel, h.cfg.Vocab
	// The logits buffer becomes dlogits: the gradient of dy[0]·mean(loss).
	scratch := make([]float64, rows)
	kernels.CrossEntropy(scratch, s.logits, s.logits, mb.Targets, V, dy[0]/float32(rows))
	dlogits := s.logits
	kernels.Gemm(true, false, V, d, rows, 1, dlogits, V, s.lnf, d, 1, h.lmHead.Grad.Data, d)
	dlnf := ws.AllocDirty(rows * d)
	kernels.Gemm(false, false, rows, d, V, 1, dlogits, V, h.lmHead.Value.Data, d, 0, dlnf, d)
	dx := ws.Alloc(rows * d)
	h.lnf.backward(dx, dlnf, s.x, s.n, rows)
	return dx
}
