#!/usr/bin/python3
"""Reference trainer for meshnode's model families (docs/models.md): GPT-2 (learned
positions, LayerNorm, tanh GELU, lm_head tied to wte) and Llama (RMSNorm, rotary positions
in Hugging Face's rotate_half convention, SwiGLU, grouped-query attention, no biases, tied
or untied), built from config in plain PyTorch with Hugging Face's parameter names and
layouts (GPT-2's Conv1D weights [in, out]; Llama's nn.Linear weights [out, in]), trained
with docs/gpt.md's recipe (AdamW 0.9/0.95, decay 0.1 on tensors of >= 2 dimensions,
clipping 1.0, warm-up then cosine) on its sampler.

Needs Debian's python3-torch; nothing else (safetensors are read and written by hand).

  /usr/bin/python3 families_ref.py --family llama --kv-heads 2 --tied --data corpus.txt \\
      --write-init init.safetensors --steps 20 --json

--write-init writes the weights it starts from (Hugging Face names; a tied lm_head is not
stored, as save_pretrained leaves it out), so meshnode can start from the same ones;
--init starts from such a file instead of the random init.
"""
import argparse
import json
import math
import os
import struct
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


def splitmix64(seed, i):
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", (name, meta["dtype"])
        a, b = meta["data_offsets"]
        out[name] = torch.frombuffer(bytearray(blob[a:b]), dtype=torch.float32).reshape(meta["shape"]).clone()
    return out


def write_safetensors(path, tensors, metadata):
    """The safetensors format: an 8-byte little-endian header length, the JSON header
    (names sorted, padded with spaces to 8 bytes), the raw little-endian data."""
    header, blobs, off = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().to(torch.float32)
        try:
            b = t.numpy().tobytes()
        except (RuntimeError, ImportError):  # torch built without numpy
            flat = t.reshape(-1).tolist()
            b = struct.pack(f"<{len(flat)}f", *flat)
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class Model(torch.nn.Module):
    """Both families as a dict of named parameters; forward is the family's computation."""

    def __init__(self, a):
        super().__init__()
        self.a = a
        d, L, V, T = a.d_model, a.layers, a.vocab, a.context
        H, KV = a.heads, a.kv_heads or a.heads
        hd = d // H
        I = a.intermediate or 4 * d
        rs = 0.02 / math.sqrt(2 * L)
        p = {}
        if a.family == "gpt2":
            p["transformer.wte.weight"] = torch.randn(V, d) * 0.02
            p["transformer.wpe.weight"] = torch.randn(T, d) * 0.02
            for i in range(L):
                h = f"transformer.h.{i}."
                p[h + "ln_1.weight"], p[h + "ln_1.bias"] = torch.ones(d), torch.zeros(d)
                p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"] = torch.randn(d, 3 * d) * 0.02, torch.zeros(3 * d)
                p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"] = torch.randn(d, d) * rs, torch.zeros(d)
                p[h + "ln_2.weight"], p[h + "ln_2.bias"] = torch.ones(d), torch.zeros(d)
                p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"] = torch.randn(d, I) * 0.02, torch.zeros(I)
                p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"] = torch.randn(I, d) * rs, torch.zeros(d)
            p["transformer.ln_f.weight"], p["transformer.ln_f.bias"] = torch.ones(d), torch.zeros(d)
            self.embed = "transformer.wte.weight"
            self.tied = getattr(a, "gpt2_tied", True)  # hf_ref.py reads untied exports
        else:
            p["model.embed_tokens.weight"] = torch.randn(V, d) * 0.02
            for i in range(L):
                h = f"model.layers.{i}."
                p[h + "input_layernorm.weight"] = torch.ones(d)
                p[h + "self_attn.q_proj.weight"] = torch.randn(d, d) * 0.02
                p[h + "self_attn.k_proj.weight"] = torch.randn(KV * hd, d) * 0.02
                p[h + "self_attn.v_proj.weight"] = torch.randn(KV * hd, d) * 0.02
                p[h + "self_attn.o_proj.weight"] = torch.randn(d, d) * rs
                p[h + "post_attention_layernorm.weight"] = torch.ones(d)
                p[h + "mlp.gate_proj.weight"] = torch.randn(I, d) * 0.02
                p[h + "mlp.up_proj.weight"] = torch.randn(I, d) * 0.02
                p[h + "mlp.down_proj.weight"] = torch.randn(d, I) * rs
            p["model.norm.weight"] = torch.ones(d)
            self.embed = "model.embed_tokens.weight"
            self.tied = a.tied
        if not self.tied:
            p["lm_head.weight"] = torch.randn(V, d) * 0.02
        self.names = list(p)
        self.params = torch.nn.ParameterList([torch.nn.Parameter(p[n]) for n in self.names])
        self.W = dict(zip(self.names, self.params))
        self.H, self.KV, self.hd, self.I = H, KV, hd, I
        # Hugging Face's rotary tables (LlamaRotaryEmbedding), float32.
        inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(T).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

    def load(self, tensors):
        with torch.no_grad():
            for n in self.names:
                if n not in tensors:
                    sys.exit(f"init file lacks {n}")
                self.W[n].copy_(tensors[n])

    def head(self, x):
        lm = self.W[self.embed] if self.tied else self.W["lm_head.weight"]
        return x @ lm.t()

    def attend(self, q, k, v, B, T):
        """q: B,T,H·hd; k, v: B,T,KV·hd -> B,T,H·hd, causal, KV heads repeated."""
        H, KV, hd = self.H, self.KV, self.hd
        q = q.view(B, T, H, hd).transpose(1, 2)
        k = k.view(B, T, KV, hd).transpose(1, 2)
        v = v.view(B, T, KV, hd).transpose(1, 2)
        if self.a.family == "llama":
            q, k = rope(q, self.cos[:T], self.sin[:T]), rope(k, self.cos[:T], self.sin[:T])
        if KV != H:  # Hugging Face's repeat_kv
            k = k[:, :, None].expand(B, KV, H // KV, T, hd).reshape(B, H, T, hd)
            v = v[:, :, None].expand(B, KV, H // KV, T, hd).reshape(B, H, T, hd)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(-1)
        return (att @ v).transpose(1, 2).reshape(B, T, H * hd)

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))

    def logits(self, idx):
        """B,T token ids -> B,T,V logits."""
        W, a = self.W, self.a
        B, T = idx.shape
        d, eps = a.d_model, a.norm_eps
        if a.family == "gpt2":
            x = W["transformer.wte.weight"][idx] + W["transformer.wpe.weight"][:T]
            for i in range(a.layers):
                h = f"transformer.h.{i}."
                n = F.layer_norm(x, (d,), W[h + "ln_1.weight"], W[h + "ln_1.bias"], eps)
                q, k, v = (n @ W[h + "attn.c_attn.weight"] + W[h + "attn.c_attn.bias"]).split(d, dim=2)
                x = x + self.attend(q, k, v, B, T) @ W[h + "attn.c_proj.weight"] + W[h + "attn.c_proj.bias"]
                n = F.layer_norm(x, (d,), W[h + "ln_2.weight"], W[h + "ln_2.bias"], eps)
                m = F.gelu(n @ W[h + "mlp.c_fc.weight"] + W[h + "mlp.c_fc.bias"], approximate="tanh")
                x = x + m @ W[h + "mlp.c_proj.weight"] + W[h + "mlp.c_proj.bias"]
            x = F.layer_norm(x, (d,), W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps)
        else:
            x = W["model.embed_tokens.weight"][idx]
            for i in range(a.layers):
                h = f"model.layers.{i}."
                n = rms_norm(x, W[h + "input_layernorm.weight"], eps)
                q = F.linear(n, W[h + "self_attn.q_proj.weight"])
                k = F.linear(n, W[h + "self_attn.k_proj.weight"])
                v = F.linear(n, W[h + "self_attn.v_proj.weight"])
                x = x + F.linear(self.attend(q, k, v, B, T), W[h + "self_attn.o_proj.weight"])
                n = rms_norm(x, W[h + "post_attention_layernorm.weight"], eps)
                g = F.silu(F.linear(n, W[h + "mlp.gate_proj.weight"])) * F.linear(n, W[h + "mlp.up_proj.weight"])
                x = x + F.linear(g, W[h + "mlp.down_proj.weight"])
            x = rms_norm(x, W["model.norm.weight"], eps)
        return self.head(x)


def rms_norm(x, w, eps):
    """Hugging Face's LlamaRMSNorm."""
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


def lr_at(step, max_lr, warmup, steps):
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if steps <= warmup:
        return max_lr
    t = (step - warmup) / max(1, steps - warmup)
    return 0.1 * max_lr + 0.9 * max_lr * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))


def arguments():
    """The model's and the recipe's flags (hf_ref.py adds its own)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", choices=["gpt2", "llama"], required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--intermediate", type=int, default=0)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--tied", action="store_true", help="llama: lm_head is embed_tokens (gpt2 always ties)")
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--norm-eps", type=float, default=1e-5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", required=True, help="a text file: bytes are tokens, the first 95%% train")
    ap.add_argument("--init", help="safetensors with Hugging Face names to start from")
    ap.add_argument("--write-init", help="write the starting weights here")
    ap.add_argument("--json", action="store_true")
    return ap


def main():
    a = arguments().parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    model = Model(a)
    if a.init:
        model.load(read_safetensors(a.init))
    if a.write_init:
        write_safetensors(a.write_init, dict(model.W), {"family": a.family})
    train(a, model)


def train(a, model):
    """docs/gpt.md's recipe on the sampler's batches, printing each step's loss."""
    with open(a.data, "rb") as f:
        raw = f.read()
    train = raw[:len(raw) - len(raw) * 5 // 100]
    decay = [p for p in model.params if p.dim() >= 2]
    no_decay = [p for p in model.params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    span = len(train) - a.context - 1
    for step in range(a.steps):
        offs = [splitmix64(a.seed, step * a.batch + r) % span for r in range(a.batch)]
        x = torch.tensor([list(train[o:o + a.context]) for o in offs], dtype=torch.long)
        y = torch.tensor([list(train[o + 1:o + 1 + a.context]) for o in offs], dtype=torch.long)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.lr, a.warmup, a.steps)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.params, 1.0)
        opt.step()
        rec = {"event": "step", "step": step + 1, "train_loss": loss.item()}
        print(json.dumps(rec) if a.json else f"step={step + 1} train_loss={loss.item():.6f}", flush=True)


if __name__ == "__main__":
    main()
