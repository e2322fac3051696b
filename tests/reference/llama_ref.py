"""Plain PyTorch reference of HF LlamaForCausalLM (forward and loss), plus
hand-written safetensors I/O and random configs for the reference tests.

Run with Debian's torch: /usr/bin/python3 (the `python3` first on PATH on the
development machines is a separate build without torch). Only the standard
library, numpy and torch are used; `transformers` is not needed.

Semantics follow transformers' modeling_llama exactly:
  - RMSNorm: x * rsqrt(mean(x^2) + eps) * w
  - RoPE, rotate_half convention: inv_freq = 1 / theta^(arange(0, HD, 2) / HD),
    angle = t * inv_freq, cos/sin = cat(freqs, freqs), x*cos + rotate_half(x)*sin,
    rotate_half(x) = cat(-x2, x1)
  - causal attention, grouped-query heads (kv head of query head h is
    h // (NH // NKV)), scale 1/sqrt(HD)
  - SwiGLU MLP: down(silu(gate(x)) * up(x)); residual connections
  - final norm, LM head (model.embed_tokens.weight when tie_word_embeddings)
  - cross-entropy, ignore_index -100, mean over kept targets. The labels are
    ALREADY shifted: labels[b, t] is the target of position t.
"""

import json
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F

IGNORE_INDEX = -100

# ----------------------------------------------------------------- config ---

CONFIG_DEFAULTS = {
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "max_position_embeddings": 2048,
}


def make_config(hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
                num_key_value_heads, vocab_size, rms_norm_eps=1e-6, rope_theta=10000.0,
                tie_word_embeddings=False, max_position_embeddings=2048):
    """An HF-style config.json dict of a LlamaForCausalLM."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": int(hidden_size),
        "intermediate_size": int(intermediate_size),
        "num_hidden_layers": int(num_hidden_layers),
        "num_attention_heads": int(num_attention_heads),
        "num_key_value_heads": int(num_key_value_heads),
        "vocab_size": int(vocab_size),
        "rms_norm_eps": float(rms_norm_eps),
        "rope_theta": float(rope_theta),
        "tie_word_embeddings": bool(tie_word_embeddings),
        "max_position_embeddings": int(max_position_embeddings),
        "torch_dtype": "float32",
    }


def random_config(rng, **overrides):
    """A small random LLaMA config (numpy Generator rng); keyword overrides win.

    Sizes are chosen to be awkward on purpose: odd vocabularies, intermediate
    sizes that are not multiples of the hidden size, grouped-query heads."""
    head_dim = int(rng.choice([8, 12, 16]))
    nkv = int(rng.choice([1, 2, 3]))
    group = int(rng.choice([1, 2, 3]))
    nh = nkv * group
    hidden = nh * head_dim
    cfg = dict(
        hidden_size=hidden,
        intermediate_size=int(rng.integers(hidden + 1, 4 * hidden)),
        num_hidden_layers=int(rng.integers(1, 5)),
        num_attention_heads=nh,
        num_key_value_heads=nkv,
        vocab_size=int(rng.choice([61, 97, 131, 257])),
        rms_norm_eps=float(rng.choice([1e-5, 1e-6, 3e-6])),
        rope_theta=float(rng.choice([10000.0, 500000.0, 1234.5])),
        tie_word_embeddings=bool(rng.integers(0, 2)),
        max_position_embeddings=64,
    )
    cfg.update(overrides)
    return make_config(**cfg)


def full_config(cfg):
    """cfg with HF's defaults filled in for optional keys."""
    out = dict(CONFIG_DEFAULTS)
    out.update(cfg)
    if out.get("num_key_value_heads") is None:
        out["num_key_value_heads"] = out["num_attention_heads"]
    return out


def load_config(path):
    with open(path) as f:
        return full_config(json.load(f))


def save_config(cfg, path):
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


# ------------------------------------------------------------- parameters ---

def param_shapes(cfg):
    """Ordered dict name -> shape of every parameter, HF names."""
    cfg = full_config(cfg)
    C = cfg["hidden_size"]
    Fi = cfg["intermediate_size"]
    V = cfg["vocab_size"]
    NH = cfg["num_attention_heads"]
    NKV = cfg["num_key_value_heads"]
    HD = C // NH
    shapes = {"model.embed_tokens.weight": (V, C)}
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        shapes[p + "self_attn.q_proj.weight"] = (NH * HD, C)
        shapes[p + "self_attn.k_proj.weight"] = (NKV * HD, C)
        shapes[p + "self_attn.v_proj.weight"] = (NKV * HD, C)
        shapes[p + "self_attn.o_proj.weight"] = (C, NH * HD)
        shapes[p + "mlp.gate_proj.weight"] = (Fi, C)
        shapes[p + "mlp.up_proj.weight"] = (Fi, C)
        shapes[p + "mlp.down_proj.weight"] = (C, Fi)
        shapes[p + "input_layernorm.weight"] = (C,)
        shapes[p + "post_attention_layernorm.weight"] = (C,)
    shapes["model.norm.weight"] = (C,)
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, C)
    return shapes


def matmul_param_count(cfg):
    """Parameters that take part in matrix products, lm_head included (also
    when tied: the head is a matmul either way). Embedding lookups excluded."""
    cfg = full_config(cfg)
    C = cfg["hidden_size"]
    Fi = cfg["intermediate_size"]
    NH = cfg["num_attention_heads"]
    NKV = cfg["num_key_value_heads"]
    HD = C // NH
    per_layer = NH * HD * C + 2 * NKV * HD * C + C * NH * HD + 3 * Fi * C
    return cfg["num_hidden_layers"] * per_layer + cfg["vocab_size"] * C


def random_params(cfg, rng, std=0.02, embed_std=None, norm_spread=0.2):
    """dict name -> float32 numpy array. Matrices ~ normal(0, std), the
    embedding ~ normal(0, embed_std or std), norm weights uniform in
    [1 - norm_spread, 1 + norm_spread] (so a wrong norm gradient shows)."""
    out = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 1:
            a = rng.uniform(1.0 - norm_spread, 1.0 + norm_spread, size=shape)
        elif name == "model.embed_tokens.weight":
            a = rng.normal(0.0, std if embed_std is None else embed_std, size=shape)
        else:
            a = rng.normal(0.0, std, size=shape)
        out[name] = a.astype(np.float32)
    return out


def random_batch(cfg, rng, B, T, ignore_frac=0.2):
    """(input_ids, labels) int32 [B, T]. labels are next tokens (already
    shifted), with a random fraction set to IGNORE_INDEX; at least one target
    is always kept so the mean loss is defined."""
    V = full_config(cfg)["vocab_size"]
    seq = rng.integers(0, V, size=(B, T + 1))
    ids = seq[:, :T].astype(np.int32)
    labels = seq[:, 1:].astype(np.int32)
    mask = rng.random(size=(B, T)) < ignore_frac
    labels[mask] = IGNORE_INDEX
    if (labels == IGNORE_INDEX).all():
        labels[0, 0] = seq[0, 1]
    return ids, labels


def to_torch_params(params, dtype=torch.float64, requires_grad=True):
    """dict of numpy/tensors -> dict of leaf torch tensors of dtype."""
    out = {}
    for name, a in params.items():
        t = torch.as_tensor(np.asarray(a)).to(dtype).clone()
        t.requires_grad_(requires_grad)
        out[name] = t
    return out


def init_torch_params(cfg, std=0.02, dtype=torch.float32, seed=0):
    """dict name -> torch.nn.Parameter, initialised as HF does (normal std
    for matrices, ones for norms). Used by the benchmark."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 1:
            t = torch.ones(shape, dtype=dtype)
        else:
            t = torch.randn(shape, generator=gen, dtype=dtype) * std
        out[name] = torch.nn.Parameter(t)
    return out


# ---------------------------------------------------------------- forward ---

def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_cos_sin(T, HD, theta, dtype):
    """cos, sin [T, HD], HF layout: cat((freqs, freqs), -1)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, HD, 2, dtype=torch.float64) / HD))
    t = torch.arange(T, dtype=torch.float64)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    x1 = x[..., :half]
    x2 = x[..., half:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    """x [B, heads, T, HD]; cos/sin [T, HD]."""
    return x * cos + rotate_half(x) * sin


def attention(x, params, prefix, cfg, cos, sin):
    """Causal grouped-query self-attention of x [B, T, C]."""
    B, T, C = x.shape
    NH = cfg["num_attention_heads"]
    NKV = cfg["num_key_value_heads"]
    HD = C // NH
    q = F.linear(x, params[prefix + "q_proj.weight"]).view(B, T, NH, HD).transpose(1, 2)
    k = F.linear(x, params[prefix + "k_proj.weight"]).view(B, T, NKV, HD).transpose(1, 2)
    v = F.linear(x, params[prefix + "v_proj.weight"]).view(B, T, NKV, HD).transpose(1, 2)
    q = apply_rope(q, cos, sin)
    k = apply_rope(k, cos, sin)
    rep = NH // NKV
    if rep > 1:  # HF repeat_kv: query head h uses kv head h // rep
        k = k[:, :, None].expand(B, NKV, rep, T, HD).reshape(B, NH, T, HD)
        v = v[:, :, None].expand(B, NKV, rep, T, HD).reshape(B, NH, T, HD)
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(HD)
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(causal, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    y = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, NH * HD)
    return F.linear(y, params[prefix + "o_proj.weight"])


def mlp(x, params, prefix):
    gate = F.linear(x, params[prefix + "gate_proj.weight"])
    up = F.linear(x, params[prefix + "up_proj.weight"])
    return F.linear(F.silu(gate) * up, params[prefix + "down_proj.weight"])


def _as_long(x):
    if isinstance(x, torch.Tensor):
        return x.long()
    return torch.as_tensor(np.asarray(x)).long()


def llama_forward(params, cfg, input_ids):
    """Logits [B, T, V] of LlamaForCausalLM. params: dict name -> tensor (HF
    names), input_ids: integer tensor [B, T]."""
    cfg = full_config(cfg)
    eps = cfg["rms_norm_eps"]
    ids = _as_long(input_ids)
    B, T = ids.shape
    wte = params["model.embed_tokens.weight"]
    x = F.embedding(ids, wte)
    HD = cfg["hidden_size"] // cfg["num_attention_heads"]
    cos, sin = rope_cos_sin(T, HD, cfg["rope_theta"], x.dtype)
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = rms_norm(x, params[p + "input_layernorm.weight"], eps)
        x = x + attention(h, params, p + "self_attn.", cfg, cos, sin)
        h = rms_norm(x, params[p + "post_attention_layernorm.weight"], eps)
        x = x + mlp(h, params, p + "mlp.")
    x = rms_norm(x, params["model.norm.weight"], eps)
    head = wte if cfg["tie_word_embeddings"] else params["lm_head.weight"]
    return F.linear(x, head)


def llama_loss(params, cfg, input_ids, labels):
    """Mean cross-entropy over targets != -100 (labels already shifted)."""
    logits = llama_forward(params, cfg, input_ids)
    lab = _as_long(labels)
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), lab.reshape(-1), ignore_index=IGNORE_INDEX)


def loss_and_grads(params_np, cfg, input_ids, labels, dtype=torch.float64):
    """(loss float, dict name -> numpy gradient) by autograd in dtype."""
    params = to_torch_params(params_np, dtype)
    loss = llama_loss(params, cfg, input_ids, labels)
    loss.backward()
    grads = {}
    for name, t in params.items():
        g = t.grad
        grads[name] = np.zeros(t.shape) if g is None else g.detach().numpy()
    return float(loss.item()), grads


# ------------------------------------------------------------ safetensors ---

_DTYPES = {  # safetensors name -> (numpy dtype as stored, bytes per element)
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),  # raw bits; converted on read
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "I16": (np.dtype("<i2"), 2),
    "I8": (np.dtype("i1"), 1),
    "U8": (np.dtype("u1"), 1),
}


def _dtype_name(a):
    for name, (dt, _) in _DTYPES.items():
        if name != "BF16" and a.dtype == dt:
            return name
    raise ValueError("unsupported dtype for safetensors: %s" % a.dtype)


def f32_to_bf16_bits(a):
    """float32 array -> uint16 bf16 bits, round to nearest even (NaN kept)."""
    bits = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(a)
    out[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return out


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def encode_safetensors(tensors, metadata=None, bf16=()):
    """bytes of a safetensors file. tensors: dict name -> numpy array or torch
    tensor (float32 -> F32, int32 -> I32, float16 -> F16, ...); names in
    `bf16` are stored as BF16 (from their float32 values)."""
    header = {}
    chunks = []
    offset = 0
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor):
            t = t.detach().cpu().numpy()
        a = np.asarray(t)
        if name in bf16:
            dtype = "BF16"
            raw = f32_to_bf16_bits(a.astype(np.float32)).tobytes()
        else:
            dtype = _dtype_name(a)
            raw = np.ascontiguousarray(a, dtype=_DTYPES[dtype][0]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    return encode_raw_safetensors(header, b"".join(chunks))


def encode_raw_safetensors(header, data):
    """bytes of a safetensors file from a header dict written as given (no
    checks: the bad-input tests use this to build broken files). The JSON is
    space-padded to a multiple of 8 bytes, as the reference writer does."""
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def write_safetensors(path, tensors, metadata=None, bf16=()):
    with open(path, "wb") as f:
        f.write(encode_safetensors(tensors, metadata, bf16))


def parse_safetensors(blob):
    """(header dict, data bytes) of a safetensors blob, without conversion."""
    if len(blob) < 8:
        raise ValueError("file shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError("header length %d runs past the end of the file" % n)
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    return header, blob[8 + n:]


def read_safetensors(path, with_metadata=False):
    """dict name -> numpy array (F32/F16/BF16 -> float32, integers as stored).
    Checks offsets, sizes and exact coverage of the data section."""
    with open(path, "rb") as f:
        blob = f.read()
    header, data = parse_safetensors(blob)
    metadata = header.pop("__metadata__", None)
    out = {}
    spans = []
    for name, e in header.items():
        dtype = e["dtype"]
        if dtype not in _DTYPES:
            raise ValueError("%s: tensor %s has unknown dtype %s" % (path, name, dtype))
        np_dtype, size = _DTYPES[dtype]
        shape = tuple(int(s) for s in e["shape"])
        begin, end = (int(x) for x in e["data_offsets"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not 0 <= begin <= end <= len(data) or end - begin != count * size:
            raise ValueError("%s: tensor %s has bad data_offsets %s" % (path, name, [begin, end]))
        a = np.frombuffer(data, dtype=np_dtype, count=count, offset=begin).reshape(shape)
        if dtype == "BF16":
            a = bf16_bits_to_f32(a)
        elif dtype == "F16":
            a = a.astype(np.float32)
        out[name] = a.copy()
        spans.append((begin, end, name))
    pos = 0
    for begin, end, name in sorted(spans):
        if begin != pos:
            raise ValueError("%s: data not covered exactly at tensor %s" % (path, name))
        pos = end
    if pos != len(data):
        raise ValueError("%s: %d bytes of data after the last tensor" % (path, len(data) - pos))
    if with_metadata:
        return out, metadata
    return out
