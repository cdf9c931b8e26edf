"""llama.py: a Llama decoder in plain PyTorch, computing what Hugging Face
transformers' LlamaForCausalLM computes, and its safetensors and config.json
files, for kjv-small (transformers is not installed where it is trained).

The forward pass follows LlamaForCausalLM step by step: token embedding;
per layer RMSNorm (x * rsqrt(mean(x^2) + eps) in float32, then times the
weight), attention with rotary position embedding (inverse frequencies
theta^(-2i/d), the cos/sin tables repeated over both halves of a head,
rotate_half(x) = (-x2, x1)), grouped-query attention (KV head j serves
query heads j*g .. j*g+g-1), causal softmax in float32 over scores scaled
by 1/sqrt(head_dim), the output projection, a residual add; RMSNorm, the
SiLU-gated MLP (down(silu(gate(x)) * up(x))), a residual add; a final
RMSNorm and the LM head, tied to the embedding.  The parameter names are
transformers' (model.layers.N.self_attn.q_proj.weight, ...), so the
state dict is the checkpoint.
"""

import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, vocab, hidden, layers, heads, kv_heads, intermediate,
                 context, rope_theta=10000.0, eps=1e-5, bos=0, eos=(0,)):
        self.vocab = vocab
        self.hidden = hidden
        self.layers = layers
        self.heads = heads
        self.kv_heads = kv_heads
        self.head_dim = hidden // heads
        self.intermediate = intermediate
        self.context = context
        self.rope_theta = rope_theta
        self.eps = eps
        self.bos = bos
        self.eos = list(eos)

    def hf(self):
        """config.json as transformers writes it for LlamaForCausalLM"""
        return {
            "architectures": ["LlamaForCausalLM"],
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": self.bos,
            "eos_token_id": self.eos,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "hidden_size": self.hidden,
            "initializer_range": 0.02,
            "intermediate_size": self.intermediate,
            "max_position_embeddings": self.context,
            "mlp_bias": False,
            "model_type": "llama",
            "num_attention_heads": self.heads,
            "num_hidden_layers": self.layers,
            "num_key_value_heads": self.kv_heads,
            "pretraining_tp": 1,
            "rms_norm_eps": self.eps,
            "rope_scaling": None,
            "rope_theta": self.rope_theta,
            "tie_word_embeddings": True,
            "torch_dtype": "bfloat16",
            "use_cache": True,
            "vocab_size": self.vocab,
        }


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(cfg, n, device):
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(
        0, cfg.head_dim, 2, dtype=torch.int64).float() / cfg.head_dim))
    pos = torch.arange(n, dtype=torch.float32)
    freqs = torch.outer(pos, inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(device), emb.sin().to(device)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.heads * d, cfg.hidden, bias=False)

    def forward(self, x, cos, sin, mask):
        c = self.cfg
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, c.heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        g = c.heads // c.kv_heads
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        s = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(c.head_dim)
        p = F.softmax(s + mask, dim=-1, dtype=torch.float32).to(q.dtype)
        o = torch.matmul(p, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.up_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.eps)


class Llama(nn.Module):
    """LlamaForCausalLM with tied embeddings; forward(ids [B, T]) returns
    logits [B, T, vocab]"""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Body(cfg)
        cos, sin = rope_tables(cfg, cfg.context, "cpu")
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def init_weights(self, std=0.02):
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, mean=0.0, std=std)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.model.embed_tokens(ids)
        cos = self.cos[:t].to(x.dtype)
        sin = self.sin[:t].to(x.dtype)
        mask = torch.full((t, t), float("-inf")).triu(1).to(x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        x = self.model.norm(x)
        return F.linear(x, self.model.embed_tokens.weight)


def count_params(model):
    return sum(p.numel() for p in model.parameters())


# ---- safetensors ------------------------------------------------------------

def to_bf16_bytes(t):
    """a float32 tensor's bf16 bytes, rounded to nearest even (as
    torch's .to(torch.bfloat16)), little endian"""
    return t.detach().to(torch.bfloat16).view(torch.int16).numpy() \
        .astype("<i2").tobytes()


def save_safetensors(path, tensors):
    """writes {name: float32 tensor} as bf16 safetensors: an 8-byte little
    endian header length, the JSON header (names sorted, each with dtype,
    shape and [begin, end) offsets), padded with spaces to 8 bytes, then
    the raw data"""
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        data = to_bf16_bytes(tensors[name].contiguous())
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """{name: float32 tensor} of a bf16 safetensors file (bf16 widened
    exactly)"""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        if h["dtype"] != "BF16":
            raise ValueError("%s: dtype %s" % (name, h["dtype"]))
        a, b = h["data_offsets"]
        raw = np.frombuffer(body[a:b], dtype="<u2").astype(np.uint32) << 16
        out[name] = torch.from_numpy(raw.view(np.float32).copy()) \
            .reshape(h["shape"])
    return out


def load_folder(folder):
    """the Llama a folder's config.json and model.safetensors describe,
    its weights the bf16 ones widened to float32"""
    with open(os.path.join(folder, "config.json")) as f:
        hf = json.load(f)
    cfg = Config(hf["vocab_size"], hf["hidden_size"],
                 hf["num_hidden_layers"], hf["num_attention_heads"],
                 hf["num_key_value_heads"], hf["intermediate_size"],
                 hf["max_position_embeddings"], hf["rope_theta"],
                 hf["rms_norm_eps"], hf["bos_token_id"], hf["eos_token_id"])
    model = Llama(cfg)
    model.load_state_dict(load_safetensors(os.path.join(
        folder, "model.safetensors")), strict=True)
    return model, cfg


def checkpoint_tensors(model):
    """the state dict under transformers' names, without the tied head"""
    return {k: v.detach().float() for k, v in model.state_dict().items()}
