#!/usr/bin/python3
"""Reference trainer for meshnode's GPT: the model, data, sampler, schedule and
optimiser that docs/gpt.md describes, written in PyTorch, so that meshnode's losses and
speed can be compared with a widely used framework on the same machine.

Needs Debian's python3-torch (apt-get install -y python3-torch); nothing else.

  OPENBLAS_NUM_THREADS=2 /usr/bin/python3 gpt_ref.py --steps 300 --json
  /usr/bin/python3 gpt_ref.py --init INIT.safetensors --steps 20 --lr 1e-3 --warmup 5 --json

--init loads a safetensors file with GPT-2 tensor names (transformer.wte.weight, ...),
e.g. the step-0 checkpoint that `meshnode train` writes, so both start from the same
weights; then per-step losses must agree up to float32 rounding.
"""
import argparse
import json
import math
import os
import resource
import struct
import subprocess
import sys
import time

# Debian's torch runs matmuls on OpenBLAS, whose thread pool torch.set_num_threads does not
# control; with both pools spinning on 2 cores training runs at half speed. Passive waiting
# is the best setting measured here (see docs/PERFORMANCE.md).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


def splitmix64(seed, i):
    """The sampler's hash: splitmix64's finaliser over seed + (i+1)*golden (mod 2^64)."""
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def gostd_corpus(goroot=None):
    """builtin:gostd: non-test .go files under GOROOT/src, no testdata/ or vendor/ segments,
    sorted by slash path relative to src; file k goes to validation when k % 20 == 19;
    each split is its files' bytes, each followed by one newline byte."""
    if goroot is None:
        goroot = subprocess.run(["go", "env", "GOROOT"], capture_output=True, text=True,
                                check=True).stdout.strip()
    src = os.path.join(goroot, "src")
    files = []
    for dp, dns, fns in os.walk(src):
        for fn in fns:
            rel = os.path.relpath(os.path.join(dp, fn), src).replace(os.sep, "/")
            parts = rel.split("/")
            if not fn.endswith(".go") or fn.endswith("_test.go"):
                continue
            if "testdata" in parts or "vendor" in parts:
                continue
            if not os.path.isfile(os.path.join(dp, fn)) or os.path.islink(os.path.join(dp, fn)):
                continue
            files.append(rel)
    files.sort(key=lambda s: s.encode())
    train, val = bytearray(), bytearray()
    for k, rel in enumerate(files):
        with open(os.path.join(src, rel), "rb") as f:
            b = f.read()
        dst = val if k % 20 == 19 else train
        dst += b
        dst += b"\n"
    return bytes(train), bytes(val)


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
        t = torch.frombuffer(bytearray(blob[a:b]), dtype=torch.float32)
        out[name] = t.reshape(meta["shape"]).clone()
    return out


class GPT(torch.nn.Module):
    """GPT-2 architecture with GPT-2 tensor names and layouts (Conv1D weights are
    [in, out]); untied lm_head; LayerNorm eps 1e-5; tanh GELU; no dropout."""

    def __init__(self, vocab, ctx, layers, d, heads):
        super().__init__()
        self.layers, self.d, self.heads = layers, d, heads
        P = torch.nn.Parameter
        p = {
            "transformer.wte.weight": torch.randn(vocab, d) * 0.02,
            "transformer.wpe.weight": torch.randn(ctx, d) * 0.02,
            "transformer.ln_f.weight": torch.ones(d),
            "transformer.ln_f.bias": torch.zeros(d),
            "lm_head.weight": torch.randn(vocab, d) * 0.02,
        }
        rs = 0.02 / math.sqrt(2 * layers)
        for i in range(layers):
            h = f"transformer.h.{i}."
            p[h + "ln_1.weight"] = torch.ones(d)
            p[h + "ln_1.bias"] = torch.zeros(d)
            p[h + "attn.c_attn.weight"] = torch.randn(d, 3 * d) * 0.02
            p[h + "attn.c_attn.bias"] = torch.zeros(3 * d)
            p[h + "attn.c_proj.weight"] = torch.randn(d, d) * rs
            p[h + "attn.c_proj.bias"] = torch.zeros(d)
            p[h + "ln_2.weight"] = torch.ones(d)
            p[h + "ln_2.bias"] = torch.zeros(d)
            p[h + "mlp.c_fc.weight"] = torch.randn(d, 4 * d) * 0.02
            p[h + "mlp.c_fc.bias"] = torch.zeros(4 * d)
            p[h + "mlp.c_proj.weight"] = torch.randn(4 * d, d) * rs
            p[h + "mlp.c_proj.bias"] = torch.zeros(d)
        self.names = list(p)
        self.params = torch.nn.ParameterList([P(p[n]) for n in self.names])
        self.by_name = dict(zip(self.names, self.params))
        mask = torch.tril(torch.ones(ctx, ctx, dtype=torch.bool))
        self.register_buffer("mask", mask, persistent=False)

    def load(self, tensors):
        missing = set(self.names) - set(tensors)
        if missing:
            sys.exit(f"init file lacks {sorted(missing)[:5]}...")
        with torch.no_grad():
            for n in self.names:
                if tuple(tensors[n].shape) != tuple(self.by_name[n].shape):
                    sys.exit(f"{n}: shape {tuple(tensors[n].shape)} != {tuple(self.by_name[n].shape)}")
                self.by_name[n].copy_(tensors[n])

    def forward(self, idx, targets):
        W = self.by_name
        B, T = idx.shape
        d, H = self.d, self.heads
        x = W["transformer.wte.weight"][idx] + W["transformer.wpe.weight"][:T]
        for i in range(self.layers):
            h = f"transformer.h.{i}."
            a = F.layer_norm(x, (d,), W[h + "ln_1.weight"], W[h + "ln_1.bias"], 1e-5)
            qkv = a @ W[h + "attn.c_attn.weight"] + W[h + "attn.c_attn.bias"]
            q, k, v = qkv.split(d, dim=2)
            q = q.view(B, T, H, d // H).transpose(1, 2)
            k = k.view(B, T, H, d // H).transpose(1, 2)
            v = v.view(B, T, H, d // H).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(d // H)
            att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, d)
            x = x + y @ W[h + "attn.c_proj.weight"] + W[h + "attn.c_proj.bias"]
            m = F.layer_norm(x, (d,), W[h + "ln_2.weight"], W[h + "ln_2.bias"], 1e-5)
            m = F.gelu(m @ W[h + "mlp.c_fc.weight"] + W[h + "mlp.c_fc.bias"], approximate="tanh")
            x = x + m @ W[h + "mlp.c_proj.weight"] + W[h + "mlp.c_proj.bias"]
        x = F.layer_norm(x, (d,), W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], 1e-5)
        logits = x @ W["lm_head.weight"].t()
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def lr_at(step, max_lr, warmup, steps):
    """Linear warm-up to max_lr over `warmup` steps, then cosine to 0.1*max_lr at `steps`."""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if steps <= warmup:
        return max_lr
    t = (step - warmup) / max(1, steps - warmup)
    return 0.1 * max_lr + 0.9 * max_lr * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))


def windows(data, offsets, ctx):
    x = torch.tensor([list(data[o:o + ctx]) for o in offsets], dtype=torch.long)
    y = torch.tensor([list(data[o + 1:o + 1 + ctx]) for o in offsets], dtype=torch.long)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-windows", type=int, default=128)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OPENBLAS_NUM_THREADS", "2")))
    ap.add_argument("--init", help="safetensors with GPT-2 names to start from")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    train, val = gostd_corpus()
    model = GPT(256, a.context, a.layers, a.d_model, a.heads)
    if a.init:
        model.load(read_safetensors(a.init))
    decay = [p for n, p in zip(model.names, model.params) if p.dim() >= 2]
    no_decay = [p for n, p in zip(model.names, model.params) if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    nval = a.eval_windows
    val_offsets = [k * (len(val) - a.context - 1) // nval for k in range(nval)]

    def evaluate():
        with torch.no_grad():
            tot = 0.0
            for j in range(0, nval, a.batch):
                x, y = windows(val, val_offsets[j:j + a.batch], a.context)
                tot += model(x, y).item() * len(x)
            return tot / nval

    def emit(obj):
        print(json.dumps(obj) if a.json else " ".join(f"{k}={v}" for k, v in obj.items()), flush=True)

    span = len(train) - a.context - 1
    train_s = 0.0
    tok = 0
    for step in range(a.steps):
        t0 = time.perf_counter()
        offs = [splitmix64(a.seed, step * a.batch + r) % span for r in range(a.batch)]
        x, y = windows(train, offs, a.context)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.lr, a.warmup, a.steps)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.params, 1.0)
        opt.step()
        lv = loss.item()
        train_s += time.perf_counter() - t0
        tok += a.batch * a.context
        rec = {"event": "step", "step": step + 1, "train_loss": round(lv, 6)}
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            rec["val_loss"] = round(evaluate(), 6)
            rec["tokens_per_sec"] = round(tok / train_s, 1)
        emit(rec)
    emit({"event": "done", "step": a.steps, "val_loss": round(evaluate(), 6),
          "tokens_per_sec": round(tok / train_s, 1),
          "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
          "threads": a.threads, "torch": torch.__version__})


if __name__ == "__main__":
    main()
