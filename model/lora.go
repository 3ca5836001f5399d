package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/device"
)

// LoRA is an adapter configuration: rank, alpha and target modules (jobspec.LoRA).
type LoRA = jobspec.LoRA

// loraAdapter adds scale·B·A·x to a linear layer's output, as Hugging Face PEFT's LoRA
// layer does: A is [rank, in] (PEFT's lora_A.weight), B is [out, rank] (lora_B.weight),
// scale is alpha/rank. A nil adapter does nothing.
type loraAdapter struct {
	a, b          *Param
	rank, in, out int
	scale         float32
}

// forward adds scale·(x·Aᵀ)·Bᵀ to y (rows×out).
func (ad *loraAdapter) forward(ws *Workspace, x, y device.Tensor, rows int) {
	if ad == nil {
		return
	}
	be := ws.backend()
	u := ws.AllocTensor(rows * ad.rank)
	be.Gemm(false, true, rows, ad.rank, ad.in, 1, x, ad.in, ad.a.value(), ad.in, 0, u, ad.rank)
	be.Gemm(false, true, rows, ad.out, ad.rank, ad.scale, u, ad.rank, ad.b.value(), ad.rank, 1, y, ad.out)
}

// backward accumulates dB += scale·dyᵀ·u and dA += duᵀ·x with u = x·Aᵀ (recomputed: one
// thin product, instead of keeping it in every block's saved state) and du = scale·dy·B,
// and adds du·A to dx.
func (ad *loraAdapter) backward(ws *Workspace, x, dy, dx device.Tensor, rows int) {
	if ad == nil {
		return
	}
	be, r := ws.backend(), ad.rank
	u := ws.AllocTensor(rows * r)
	be.Gemm(false, true, rows, r, ad.in, 1, x, ad.in, ad.a.value(), ad.in, 0, u, r)
	be.Gemm(true, false, ad.out, r, rows, ad.scale, dy, ad.out, u, r, 1, ad.b.grad(), r)
	du := ws.AllocTensor(rows * r)
	be.Gemm(false, false, rows, r, ad.out, ad.scale, dy, ad.out, ad.b.value(), r, 0, du, r)
	be.Gemm(true, false, r, ad.in, rows, 1, du, r, x, ad.in, 1, ad.a.grad(), ad.in)
	be.Gemm(false, false, rows, ad.in, r, 1, du, r, ad.a.value(), ad.in, 1, dx, ad.in)
}

// loraTarget is one adapted linear layer: its base weight, the adapter, and whether the
// weight is stored [in, out] (GPT-2's Conv1D) rather than [out, in].
type loraTarget struct {
	module   string // canonical module name (jobspec.LoRAModules)
	w        *Param
	ad       *loraAdapter
	inOutLay bool
}

// LoRALayer is a layer fine-tuned with LoRA: its base parameters are frozen (Param.Frozen,
// no gradient, Grad nil) and Params lists only its adapters, so everything that trains,
// synchronises and checkpoints a stage's parameters touches the adapters alone. The
// embedding and the head have no adapters: their Params is empty.
type LoRALayer struct {
	Layer
	base     []*Param
	adapters []*Param
	targets  []loraTarget
}

// Params lists the layer's adapters (lora_A then lora_B of each target, in block order).
func (l *LoRALayer) Params() []*Param { return l.adapters }

// BaseParams lists the frozen base parameters, as the layer's own Params lists them.
func (l *LoRALayer) BaseParams() []*Param { return l.base }

// Unwrap is the adapted layer.
func (l *LoRALayer) Unwrap() Layer { return l.Layer }

// loraSeedStream separates the adapters' random streams from the base initialisation's
// (which use stream i for layer i).
const loraSeedStream = 1 << 40

// WithLoRA attaches adapters of lo to the targeted linear layers of layers' blocks (looking
// through Recomputed and wrappers with an Unwrap method), freezes every base
// parameter and returns the layers wrapped in LoRALayer. A is drawn from seed as PyTorch's
// default Linear initialisation (Kaiming-uniform, a = √5: U(−1/√in, 1/√in)), each block
// from its own stream; B is zero, so the adapted model starts as the base. The base
// weights keep their values: load them (LoadParams on BaseParams) before or after.
func WithLoRA(cfg Config, layers []Layer, lo LoRA, seed uint64) ([]Layer, error) {
	if err := lo.Check("lora", cfg.FamilyName()); err != nil {
		return nil, err
	}
	modules, _ := lo.Modules("lora.targets", cfg.FamilyName())
	scale := float32(lo.Scale())
	out := make([]Layer, len(layers))
	for i, l := range layers {
		if _, ok := l.(*LoRALayer); ok {
			return nil, fmt.Errorf("lora: layer %s already has adapters", l.Name())
		}
		ll := &LoRALayer{Layer: l, base: l.Params()}
		for _, p := range ll.base {
			p.Frozen, p.Grad = true, nil
		}
		if h, ok := unwrapLayer(l).(*Head); ok && h.tied {
			// A tied head's view of the token table (not among its Params: the
			// embedding's) is frozen with the table.
			h.lmHead.Frozen, h.lmHead.Grad = true, nil
		}
		for _, t := range blockLinears(unwrapLayer(l), modules) {
			t.ad = newLoRAAdapter(t.w, lo.Rank, t.in, t.out, scale)
			*t.slot = t.ad
			ll.targets = append(ll.targets, loraTarget{module: t.module, w: t.w, ad: t.ad, inOutLay: t.inOutLay})
			ll.adapters = append(ll.adapters, t.ad.a, t.ad.b)
		}
		if blk := blockIndex(unwrapLayer(l)); blk >= 0 {
			initAdapters(ll.targets, seed, blk)
		}
		out[i] = ll
	}
	return out, nil
}

func newLoRAAdapter(w *Param, rank, in, out int, scale float32) *loraAdapter {
	stem := strings.TrimSuffix(w.Name, ".weight")
	return &loraAdapter{a: newParam(false, stem+".lora_A.weight", rank, in),
		b: newParam(false, stem+".lora_B.weight", out, rank), rank: rank, in: in, out: out, scale: scale}
}

// initAdapters draws every A of block blk's targets, in order, from the block's stream.
func initAdapters(ts []loraTarget, seed uint64, blk int) {
	rng := rand.New(rand.NewPCG(seed, loraSeedStream+uint64(blk)))
	for _, t := range ts {
		bound := 1 / math.Sqrt(float64(t.ad.in))
		for i := range t.ad.a.Value.Data {
			t.ad.a.Value.Data[i] = float32((2*rng.Float64() - 1) * bound)
		}
	}
}

// unwrapLayer looks through wrappers: Recomputed, and any with an Unwrap method
// (LoRALayer).
func unwrapLayer(l Layer) Layer {
	for {
		switch w := l.(type) {
		case *Recomputed:
			l = w.Layer
		case interface{ Unwrap() Layer }:
			l = w.Unwrap()
		default:
			return l
		}
	}
}

func blockIndex(l Layer) int {
	switch b := l.(type) {
	case *Block:
		return b.index
	case *LlamaBlock:
		return b.index
	}
	return -1
}

// linearSlot is a block's linear layer that may take an adapter: where to attach it.
type linearSlot struct {
	module   string
	w        *Param
	in, out  int
	inOutLay bool
	slot     **loraAdapter
	ad       *loraAdapter
}

// blockLinears lists the linear layers of block l named by modules, in block order (none
// for the embedding and the head).
func blockLinears(l Layer, modules []string) []*linearSlot {
	var all []*linearSlot
	switch b := l.(type) {
	case *Block:
		for _, m := range []struct {
			name string
			lin  *linear
		}{{"qkv", &b.attn}, {"o", &b.proj}, {"up", &b.fc}, {"down", &b.mlpProj}} {
			all = append(all, &linearSlot{module: m.name, w: m.lin.w, in: m.lin.in, out: m.lin.out, inOutLay: true, slot: &m.lin.lora})
		}
	case *LlamaBlock:
		for _, m := range []struct {
			name string
			lin  *linearT
		}{{"q", &b.q}, {"k", &b.k}, {"v", &b.v}, {"o", &b.o}, {"gate", &b.gate}, {"up", &b.up}, {"down", &b.down}} {
			all = append(all, &linearSlot{module: m.name, w: m.lin.w, in: m.lin.in, out: m.lin.out, slot: &m.lin.lora})
		}
	}
	var out []*linearSlot
	for _, s := range all {
		for _, m := range modules {
			if s.module == m {
				out = append(out, s)
			}
		}
	}
	return out
}

// BaseParams lists layers' base parameters: a LoRALayer's frozen ones, any other layer's
// Params.
func BaseParams(layers []Layer) []*Param {
	var ps []*Param
	for _, l := range layers {
		if ll, ok := l.(*LoRALayer); ok {
			ps = append(ps, ll.base...)
		} else {
			ps = append(ps, l.Params()...)
		}
	}
	return ps
}

// LoRAParamCount is the number of adapter parameters lo adds to cfg, computed from the
// shape alone: rank·(in + out) for each targeted linear layer of each block.
func LoRAParamCount(cfg Config, lo LoRA) (int64, error) {
	modules, err := lo.Modules("lora.targets", cfg.FamilyName())
	if err != nil {
		return 0, err
	}
	d, kvd, hid := int64(cfg.DModel), int64(cfg.KVHeadCount()*cfg.HeadDim()), int64(cfg.Hidden())
	dims := map[string][2]int64{"q": {d, d}, "k": {d, kvd}, "v": {d, kvd}, "o": {d, d},
		"gate": {d, hid}, "up": {d, hid}, "down": {hid, d}, "qkv": {d, 3 * d}}
	var n int64
	for _, m := range modules {
		n += int64(lo.Rank) * (dims[m][0] + dims[m][1])
	}
	return n * int64(cfg.Layers), nil
}
