"""shardnode's GGUF import against the real `gguf`, `transformers` and
`tokenizers` packages (from .venv/, made by scripts/deps.sh).

    /usr/bin/python3 tests/reference/gguf_ref.py --shardnode build/shardnode --workdir DIR

Re-runs itself with .venv/bin/python; without the venv it prints why and
exits 77 (skipped). Every random choice is seeded. It checks:
  - dequantization: a LLaMA GGUF written by gguf's GGUFWriter whose tensors
    use every supported type (F32, F16, BF16, Q8_0, Q4_0, Q4_1 quantized by
    gguf.quants from random weights; Q4_K and Q6_K random blocks with finite
    scales), imported by `shardnode import --gguf`, equals
    gguf.quants.dequantize bit for bit, q_proj/k_proj after undoing
    convert_hf_to_gguf.py's permute;
  - round trip: a random LlamaForCausalLM saved by transformers, written to
    GGUF as convert_hf_to_gguf.py lays it out (F32, permuted q/k, llama.*
    metadata; tied and untied), imported back: every tensor equal to the
    original, config.json read by transformers, logits equal;
  - `import --hf DIR --check` accepts transformers' directories, one file
    and sharded (model.safetensors.index.json), and refuses a broken one;
  - tokenizers: byte-level BPE trained by `tokenizers` with the GPT-2,
    Llama 3 and SmolLM (Digits + ByteLevel) pre-tokenizers, put in GGUF
    metadata, imported: `shardnode tokenizer encode` gives the ids the
    original `tokenizers` object gives on mixed-script text;
  - a SentencePiece ("llama") tokenizer is refused naming the key.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refvenv  # noqa: E402

refvenv.enter("gguf, transformers, tokenizers")

import numpy as np  # noqa: E402
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf import quants  # noqa: E402

failures = []
TEXT = ("Hello world! 12345 numbers, 3.14159 and  double  spaces\n\tTabs; "
        "Ünïcödé ΑΒΓ αβγ Привет мир 你好世界 こんにちは 🎉🚀 it's we'll they've "
        "2024-06-01 x=42*7   end a  12  b\n 7 \t9 ٣٤ ⅷ\n\n")


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


def run(args, expect_ok=True):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if expect_ok and p.returncode != 0:
        raise SystemExit("command failed (%d): %s\n%s%s" % (p.returncode, " ".join(args),
                                                            p.stdout, p.stderr))
    return p


def permute(w, n_head):
    """convert_hf_to_gguf.py's reordering of q/k rows for llama.cpp's RoPE."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute(w, n_head):
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def read_safetensors(path):
    from safetensors.numpy import load_file
    return load_file(path)


# ---- tokenizers ------------------------------------------------------------

def train_tokenizer(kind, vocab_size, seed):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, Regex
    tok = Tokenizer(models.BPE())
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    elif kind == "llama-bpe":
        pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:  # smollm
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    rng = np.random.default_rng(seed)
    words = TEXT.split() + ["the", "and", "of", "to", "in", "that", "1999", "2025"]
    corpus = [" ".join(rng.choice(words, 40)) + TEXT for _ in range(200)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 1, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


def tokenizer_metadata(tok):
    model = json.loads(tok.to_str())["model"]
    vocab = model["vocab"]
    added = {a["id"]: a["content"] for a in json.loads(tok.to_str())["added_tokens"]}
    n = max(list(vocab.values()) + list(added)) + 1
    tokens = [None] * n
    types = [1] * n
    for s, i in vocab.items():
        tokens[i] = s
    for i, s in added.items():
        tokens[i] = s
        types[i] = 3
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, types, merges


def add_tokenizer(w, tok, pre):
    tokens, types, merges = tokenizer_metadata(tok)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(len(tokens) - 1)
    w.add_eos_token_id(len(tokens) - 1)
    return len(tokens)


def add_llama_meta(w, cfg):
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_rope_dimension_count(cfg["hidden_size"] // cfg["num_attention_heads"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_vocab_size(cfg["vocab_size"])


def write_gguf(path, cfg, tensors, tok, pre="gpt2"):
    """tensors: list of (gguf name, array, raw_dtype or None)."""
    w = gguf.GGUFWriter(path, arch="llama")
    add_llama_meta(w, cfg)
    add_tokenizer(w, tok, pre)
    for name, arr, raw in tensors:
        if raw is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def hf_to_gguf_name(name):
    table = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
             "output_norm.weight", "lm_head.weight": "output.weight"}
    if name in table:
        return table[name]
    parts = name.split(".")
    layer, rest = parts[2], ".".join(parts[3:])
    sub = {"input_layernorm.weight": "attn_norm", "self_attn.q_proj.weight": "attn_q",
           "self_attn.k_proj.weight": "attn_k", "self_attn.v_proj.weight": "attn_v",
           "self_attn.o_proj.weight": "attn_output",
           "post_attention_layernorm.weight": "ffn_norm", "mlp.gate_proj.weight": "ffn_gate",
           "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down"}[rest]
    return "blk.%s.%s.weight" % (layer, sub)


# ---- 1. every type against gguf.quants.dequantize ------------------------------

def random_kquant(rng, qtype, rows, cols):
    block, nbytes = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    raw = rng.integers(0, 256, size=(nb, nbytes), dtype=np.uint8)
    d = rng.uniform(-0.05, 0.05, size=(nb, 2)).astype(np.float16).view(np.uint8)
    if qtype == Q.Q4_K:
        raw[:, 0:4] = d  # d, dmin
    else:  # Q6_K: d last
        raw[:, nbytes - 2:] = d[:, 0:2]
    return raw.reshape(rows, cols // block * nbytes)


def encode(rng, qtype, w):
    if qtype == Q.F32:
        return w, None
    if qtype == Q.F16:
        return w.astype(np.float16), None
    if qtype in (Q.Q4_K, Q.Q6_K):
        return random_kquant(rng, qtype, *w.shape), qtype
    return quants.quantize(w, qtype), qtype


def test_types(sn, work, tok):
    cfg = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=300,
               max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0)
    C, F, V, HD = 256, 512, 300, 64
    shapes = {"attn_q": (C, C), "attn_k": (128, C), "attn_v": (128, C), "attn_output": (C, C),
              "ffn_gate": (F, C), "ffn_up": (F, C), "ffn_down": (C, F)}
    plan = [
        {"attn_q": Q.Q8_0, "attn_k": Q.Q4_0, "attn_v": Q.Q4_1, "attn_output": Q.Q4_K,
         "ffn_gate": Q.Q6_K, "ffn_up": Q.BF16, "ffn_down": Q.F16},
        {"attn_q": Q.Q4_K, "attn_k": Q.Q6_K, "attn_v": Q.Q8_0, "attn_output": Q.Q4_0,
         "ffn_gate": Q.Q4_1, "ffn_up": Q.F16, "ffn_down": Q.BF16},
    ]
    rng = np.random.default_rng(17)
    tensors, expect, types = [], {}, {}

    def add(name, qtype, w, heads=None):
        data, raw = encode(rng, qtype, w)
        if qtype == Q.BF16:
            data, raw = quants.quantize(w, Q.BF16), Q.BF16
        tensors.append((name, data, raw))
        ref = quants.dequantize(data, qtype).astype(np.float32).reshape(w.shape)
        expect[name] = unpermute(ref, heads) if heads else ref
        types[name] = qtype

    add("token_embd.weight", Q.Q4_K, rng.standard_normal((V, C)).astype(np.float32))
    for layer, p in enumerate(plan):
        add("blk.%d.attn_norm.weight" % layer, Q.F32, rng.standard_normal(C).astype(np.float32))
        add("blk.%d.ffn_norm.weight" % layer, Q.F32, rng.standard_normal(C).astype(np.float32))
        for name, qtype in p.items():
            w = (rng.standard_normal(shapes[name]) * 0.1).astype(np.float32)
            heads = 4 if name == "attn_q" else 2 if name == "attn_k" else None
            add("blk.%d.%s.weight" % (layer, name), qtype, w, heads)
    add("output_norm.weight", Q.F32, rng.standard_normal(C).astype(np.float32))
    add("output.weight", Q.Q6_K, rng.standard_normal((V, C)).astype(np.float32))
    path = os.path.join(work, "types.gguf")
    write_gguf(path, cfg, tensors, tok)
    out = os.path.join(work, "types-hf")
    p = run([sn, "import", "--gguf", path, "--out", out])
    print(p.stdout.strip())
    got = read_safetensors(os.path.join(out, "model.safetensors"))
    n, maxdiff, per_type = 0, 0.0, {}
    for name, ref in expect.items():
        g = got.get(_hf_name(name))
        check(g is not None and g.shape == ref.shape, "%s: missing or shape %s" %
              (name, None if g is None else g.shape))
        if g is None or g.shape != ref.shape:
            continue
        same = np.array_equal(g.view(np.uint32), ref.view(np.uint32))
        check(same, "%s (%s): not bit-identical to gguf.quants.dequantize, max diff %g" %
              (name, types[name].name, float(np.max(np.abs(g - ref)))))
        maxdiff = max(maxdiff, float(np.max(np.abs(g - ref))))
        n += 1
        per_type[types[name].name] = per_type.get(types[name].name, 0) + g.size
    print("dequantization: %d tensors, %s values per type, bit-identical to "
          "gguf.quants.dequantize (max |diff| %g)" % (n, per_type, maxdiff))


def _hf_name(gguf_name):
    table = {"token_embd.weight": "model.embed_tokens.weight",
             "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
    if gguf_name in table:
        return table[gguf_name]
    _, layer, sub, _ = gguf_name.split(".")
    return "model.layers.%s.%s.weight" % (layer, {
        "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
        "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}[sub])


# ---- 2. a transformers LLaMA through GGUF and back ---------------------------------

def test_round_trip(sn, work, tok, tied):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(5 + tied)
    cfg = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=3,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=300,
               max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=50000.0)
    model = LlamaForCausalLM(LlamaConfig(**cfg, tie_word_embeddings=tied)).eval()
    src = os.path.join(work, "hf-src-%d" % tied)
    model.save_pretrained(src, safe_serialization=True)
    sd = read_safetensors(os.path.join(src, "model.safetensors"))
    tensors = []
    for name, w in sd.items():
        w = w.astype(np.float32)
        if name.endswith("q_proj.weight"):
            w = permute(w, cfg["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            w = permute(w, cfg["num_key_value_heads"])
        if tied and name == "lm_head.weight":
            continue
        tensors.append((hf_to_gguf_name(name), np.ascontiguousarray(w), None))
    path = os.path.join(work, "rt-%d.gguf" % tied)
    write_gguf(path, cfg, tensors, tok)
    out = os.path.join(work, "hf-out-%d" % tied)
    run([sn, "import", "--gguf", path, "--out", out])
    got = read_safetensors(os.path.join(out, "model.safetensors"))
    want = {k: v for k, v in sd.items() if not (tied and k == "lm_head.weight")}
    check(set(got) == set(want), "round trip (tied=%s): names differ: %s" %
          (tied, sorted(set(got) ^ set(want))))
    for name in want:
        if name in got:
            check(np.array_equal(got[name], want[name].astype(np.float32)),
                  "round trip: %s differs" % name)
    back = LlamaForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[1, 5, 77, 299, 3, 42, 100, 7]])
    with torch.no_grad():
        a, b = model(ids).logits, back(ids).logits
    check(torch.equal(a, b), "round trip (tied=%s): logits differ by %g" %
          (tied, float((a - b).abs().max())))
    print("round trip (tied=%s): %d tensors equal to transformers' originals, logits equal"
          % (tied, len(want)))
    p = run([sn, "import", "--hf", out, "--check"])
    check("LLaMA" in p.stdout, "import --hf --check on the imported directory: " + p.stdout)
    return model, src


def test_hf_check(sn, work, model):
    sharded = os.path.join(work, "hf-sharded")
    model.save_pretrained(sharded, safe_serialization=True, max_shard_size="100KB")
    check(os.path.exists(os.path.join(sharded, "model.safetensors.index.json")),
          "transformers did not shard the model")
    p = run([sn, "import", "--hf", sharded, "--check"])
    print(p.stdout.strip())
    check("safetensors files" in p.stdout, "sharded check: " + p.stdout)
    with open(os.path.join(sharded, "model.safetensors.index.json")) as f:
        index = json.load(f)
    del index["weight_map"]["model.layers.1.mlp.up_proj.weight"]
    with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    p = run([sn, "import", "--hf", sharded, "--check"], expect_ok=False)
    check(p.returncode == 1 and "model.layers.1.mlp.up_proj.weight" in p.stderr,
          "a tensor missing from the index: %d %s" % (p.returncode, p.stderr))


# ---- 3. tokenizers ---------------------------------------------------------------

def test_tokenizers(sn, work):
    C = 256
    cfg = dict(hidden_size=C, intermediate_size=256, num_hidden_layers=1,
               num_attention_heads=4, num_key_value_heads=4, vocab_size=400,
               max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0)
    rng = np.random.default_rng(3)
    for i, kind in enumerate(["gpt2", "llama-bpe", "smollm"]):
        tok = train_tokenizer(kind, 400, seed=i)
        tensors = [("token_embd.weight", rng.standard_normal((400, C)).astype(np.float32), None),
                   ("output_norm.weight", np.ones(C, np.float32), None)]
        for name, shape in [("attn_norm", (C,)), ("ffn_norm", (C,)), ("attn_q", (C, C)),
                            ("attn_k", (C, C)), ("attn_v", (C, C)), ("attn_output", (C, C)),
                            ("ffn_gate", (256, C)), ("ffn_up", (256, C)), ("ffn_down", (C, 256))]:
            tensors.append(("blk.0.%s.weight" % name, rng.standard_normal(shape).astype(np.float32),
                            None))
        path = os.path.join(work, "tok-%s.gguf" % kind)
        write_gguf(path, cfg, tensors, tok, pre=kind)
        out = os.path.join(work, "tok-%s" % kind)
        run([sn, "import", "--gguf", path, "--out", out])
        text = TEXT * 3 + "<|endoftext|>" + "".join(chr(c) for c in rng.integers(32, 0x3000, 300))
        want = tok.encode(text).ids
        p = subprocess.run([sn, "tokenizer", "encode", "--special", "--tokenizer",
                            os.path.join(out, "tokenizer.json")], input=text.encode(),
                           capture_output=True, timeout=60)
        got = [int(x) for x in p.stdout.split()]
        check(p.returncode == 0 and got == want,
              "tokenizer %s: shardnode's ids differ from tokenizers' (%d vs %d ids) %s" %
              (kind, len(got), len(want), p.stderr.decode()[:300]))
        from tokenizers import Tokenizer
        hf = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
        check(hf.encode(text).ids == want, "tokenizer %s: the written tokenizer.json gives "
              "other ids in tokenizers" % kind)
        print("tokenizer %s: %d ids equal to tokenizers'" % (kind, len(want)))
    # SentencePiece is refused naming the key.
    spm = os.path.join(work, "spm.gguf")
    w = gguf.GGUFWriter(spm, arch="llama")
    add_llama_meta(w, cfg)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"])
    w.add_tensor("token_embd.weight", np.zeros((400, C), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    p = run([sn, "import", "--gguf", spm, "--out", os.path.join(work, "spm")], expect_ok=False)
    check(p.returncode == 1 and "tokenizer.ggml.model" in p.stderr and "llama" in p.stderr,
          "SentencePiece refusal: %d %s" % (p.returncode, p.stderr))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    sn = os.path.abspath(a.shardnode)
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    tok = train_tokenizer("gpt2", 300, seed=1)
    test_types(sn, a.workdir, tok)
    model, _ = test_round_trip(sn, a.workdir, tok, tied=False)
    test_round_trip(sn, a.workdir, tok, tied=True)
    test_hf_check(sn, a.workdir, model)
    test_tokenizers(sn, a.workdir)
    if failures:
        print("gguf_ref: %d checks failed" % len(failures))
        sys.exit(1)
    print("gguf_ref: all checks passed")


if __name__ == "__main__":
    main()
