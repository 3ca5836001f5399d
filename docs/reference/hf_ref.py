#!/usr/bin/python3
"""Hugging Face model directories for meshnode's interop checks (docs/models.md, "Hugging
Face interop"), in plain PyTorch: no transformers, the files written and read by hand.

Write mode is families_ref.py's trainer (same flags, same model, same recipe) that first
writes the weights it starts from as a Hugging Face directory, as save_pretrained would:
config.json with the family's field names, the weights in float32 or bfloat16 (then the
model itself starts from the bfloat16-rounded weights, so both sides train from the same
numbers), in one model.safetensors or in shards with a model.safetensors.index.json, GPT-2
optionally with GPT2Model's names (no "transformer." prefix) and its attn.bias buffers.

  /usr/bin/python3 hf_ref.py --family gpt2 --data corpus.txt --write-hf dir --dtype bf16 \\
      --shards 2 --bare-names --steps 20 --json

Logits mode loads a Hugging Face directory meshnode exported (config.json and
model.safetensors, float32) into the same model and prints its logits for a token list, as
one JSON array of the positions' rows:

  /usr/bin/python3 hf_ref.py --logits dir --tokens 1,2,3
"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import families_ref as fr  # noqa: E402


def hf_config(a):
    """The config.json of families_ref's model a, with Hugging Face's field names."""
    I = a.intermediate or 4 * a.d_model
    if a.family == "gpt2":
        return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": a.layers, "n_head": a.heads,
                "n_embd": a.d_model, "n_positions": a.context, "n_inner": None if I == 4 * a.d_model else I,
                "vocab_size": a.vocab, "layer_norm_epsilon": a.norm_eps, "activation_function": "gelu_new",
                "tie_word_embeddings": True, "torch_dtype": a.dtype_name}
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": a.d_model,
            "intermediate_size": I, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
            "num_key_value_heads": a.kv_heads or a.heads, "rms_norm_eps": a.norm_eps, "rope_theta": a.rope_theta,
            "max_position_embeddings": a.context, "tie_word_embeddings": bool(a.tied), "vocab_size": a.vocab,
            "hidden_act": "silu", "rope_scaling": None, "torch_dtype": a.dtype_name}


def tensor_bytes(t, dtype):
    """Little-endian bytes of t as F32 or BF16."""
    t = t.detach().contiguous()
    if dtype == "BF16":
        flat = t.to(torch.bfloat16).view(torch.int16).reshape(-1).tolist()
        return struct.pack(f"<{len(flat)}h", *flat)
    flat = t.to(torch.float32).reshape(-1).tolist()
    return struct.pack(f"<{len(flat)}f", *flat)


def write_st(path, tensors, dtype):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        b = tensor_bytes(t, dtype)
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_hf(a, model):
    """Writes model's weights as a Hugging Face directory (after rounding them to bfloat16
    for --dtype bf16)."""
    os.makedirs(a.write_hf, exist_ok=True)
    dtype = "BF16" if a.dtype == "bf16" else "F32"
    if dtype == "BF16":
        with torch.no_grad():
            for p in model.params:
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    tensors = {}
    for name, p in model.W.items():
        if a.bare_names and name.startswith("transformer."):
            name = name[len("transformer."):]
        tensors[name] = p
    if a.bare_names and a.family == "gpt2":  # GPT2Model's causal-mask buffers, not weights
        for i in range(a.layers):
            tensors[f"h.{i}.attn.bias"] = torch.tril(torch.ones(a.context, a.context)).view(1, 1, a.context, a.context)
    with open(os.path.join(a.write_hf, "config.json"), "w") as f:
        json.dump(hf_config(a), f, indent=2)
    if a.shards <= 1:
        write_st(os.path.join(a.write_hf, "model.safetensors"), tensors, dtype)
        return
    names = sorted(tensors)
    weight_map = {}
    for k in range(a.shards):
        shard = f"model-{k + 1:05d}-of-{a.shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[k::a.shards]}
        write_st(os.path.join(a.write_hf, shard), part, dtype)
        weight_map.update({n: shard for n in part})
    with open(os.path.join(a.write_hf, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)


class Namespace:
    pass


def model_of(directory):
    """families_ref's model of a meshnode export's config.json, its weights loaded."""
    with open(os.path.join(directory, "config.json")) as f:
        c = json.load(f)
    a = Namespace()
    if c["model_type"] == "gpt2":
        a.family, a.layers, a.heads, a.kv_heads = "gpt2", c["n_layer"], c["n_head"], 0
        a.d_model, a.context, a.norm_eps = c["n_embd"], c["n_positions"], c["layer_norm_epsilon"]
        a.intermediate, a.rope_theta, a.tied = c.get("n_inner") or 0, 10000.0, True
        a.gpt2_tied = c.get("tie_word_embeddings", True)  # false: meshnode's gpt family
    else:
        a.family, a.layers, a.heads = "llama", c["num_hidden_layers"], c["num_attention_heads"]
        a.kv_heads, a.d_model, a.context = c["num_key_value_heads"], c["hidden_size"], c["max_position_embeddings"]
        a.norm_eps, a.intermediate, a.rope_theta = c["rms_norm_eps"], c["intermediate_size"], c["rope_theta"]
        a.tied = c["tie_word_embeddings"]
    a.vocab = c["vocab_size"]
    model = fr.Model(a)
    model.load(fr.read_safetensors(os.path.join(directory, "model.safetensors")))
    return model


def main():
    if "--logits" in sys.argv:
        i = sys.argv.index("--logits")
        directory = sys.argv[i + 1]
        tokens = [int(x) for x in sys.argv[sys.argv.index("--tokens") + 1].split(",")]
        torch.set_num_threads(1)
        with torch.no_grad():
            logits = model_of(directory).logits(torch.tensor([tokens], dtype=torch.long))[0]
        print(json.dumps(logits.tolist()))
        return
    ap = fr.arguments()
    ap.add_argument("--write-hf", required=True, help="write the starting weights here as a Hugging Face directory")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--bare-names", action="store_true", help="gpt2: GPT2Model's names, without transformer.")
    a = ap.parse_args()
    a.dtype_name = "bfloat16" if a.dtype == "bf16" else "float32"
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    model = fr.Model(a)
    write_hf(a, model)
    fr.train(a, model)


if __name__ == "__main__":
    main()
