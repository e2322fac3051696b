"""Mistral-style configs (MistralForCausalLM without a binding sliding window)
against the real `transformers` (from .venv/, made by scripts/deps.sh).

    /usr/bin/python3 tests/reference/mistral_ref.py --shardnode build/shardnode --workdir DIR

Re-runs itself with .venv/bin/python; without the venv it prints why and
exits 77 (skipped). Every random choice is seeded. The model is a tiny random
MistralForCausalLM (GQA, max_position_embeddings 256, sliding_window None)
saved by transformers as safetensors. Checks:

  1. import and logits: `shardnode import --hf DIR --check` accepts it, and
     `shardnode generate --logits` on 200 ids equals transformers'
     MistralForCausalLM (1e-4); so does a copy whose sliding_window is 256
     (= max_position_embeddings: the window never binds);
  2. refusal, and that it matters: with sliding_window 16 transformers'
     logits move by far more than the tolerance, and shardnode refuses that
     directory (generate and import --check) naming sliding_window and both
     figures, instead of computing it as plain causal attention;
  3. fine-tuning: a LoRA job on the Mistral base trains a few steps;
     `shardnode export --merge` writes a config.json that transformers'
     AutoModelForCausalLM loads as a MistralForCausalLM, whose logits equal
     shardnode's merged model's and PEFT's PeftModel on the base with the
     exported adapter (1e-4).

Exits non-zero naming the check that failed.
"""

import argparse
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refvenv  # noqa: E402

refvenv.enter("transformers, peft, tokenizers, safetensors")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import rope_ref as rr  # noqa: E402  (run, check, kjv, tokenizer, jobs: same helpers)

LOGIT_TOL = rr.LOGIT_TOL
CFG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, vocab_size=320, max_position_embeddings=256,
           rms_norm_eps=1e-5, rope_theta=10000.0, initializer_range=0.1, sliding_window=None)


def make_model(work, tok):
    from transformers import MistralConfig, MistralForCausalLM
    torch.manual_seed(11)
    model = MistralForCausalLM(MistralConfig(**CFG)).eval()
    d = os.path.join(work, "mistral")
    model.save_pretrained(d, safe_serialization=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    return d


def variant(src, work, name, window):
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["sliding_window"] = window
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return d


def hf_model(model_dir):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                attn_implementation="eager").eval()


def hf_logits(model_dir, ids):
    m = hf_model(model_dir)
    if not rr.check(type(m).__name__ == "MistralForCausalLM", "%s loads in transformers as "
                    "%s, not MistralForCausalLM" % (model_dir, type(m).__name__)):
        return None
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0].numpy()


def test_logits(sn, work, model, ids):
    with open(os.path.join(model, "config.json")) as f:
        saved = json.load(f)
    rr.check(saved.get("architectures") == ["MistralForCausalLM"] and
             saved.get("sliding_window", "absent") is None,
             "transformers saved architectures %r, sliding_window %r" %
             (saved.get("architectures"), saved.get("sliding_window", "absent")))
    p = rr.run([sn, "import", "--hf", model, "--check"])
    print("ok   import --hf --check: %s" % p.stdout.strip().splitlines()[-1][:160], flush=True)
    want = hf_logits(model, ids)
    d = rr.maxdiff(rr.sn_logits(sn, work, model, ids, "mistral"), want)
    rr.check(d <= LOGIT_TOL, "logits: shardnode and transformers differ by %.3g on the "
             "Mistral model" % d)
    full = variant(model, work, "window-256", CFG["max_position_embeddings"])
    d_full = rr.maxdiff(rr.sn_logits(sn, work, full, ids, "window-256"), hf_logits(full, ids))
    rr.check(d_full <= LOGIT_TOL, "logits: with sliding_window = max_position_embeddings "
             "shardnode and transformers differ by %.3g" % d_full)
    if not rr.failures:
        print("ok   logits: shardnode generate --logits = transformers' MistralForCausalLM on "
              "%d ids, max |diff| %.2e (sliding_window 256: %.2e; logits up to %.2f)" %
              (len(ids), d, d_full, float(np.abs(want).max())), flush=True)
    return want


def test_window_refused(sn, work, model, ids, want):
    small = variant(model, work, "window-16", 16)
    moved = rr.maxdiff(hf_logits(small, ids), want)
    rr.check(moved > 100 * LOGIT_TOL, "a window of 16 moves transformers' logits by only "
             "%.3g over %d ids: the refusal guards nothing" % (moved, len(ids)))
    needles = ["sliding_window 16 < max_position_embeddings 256",
               "sliding-window attention is not supported"]
    out = os.path.join(work, "refused.safetensors")
    rr.expect_refused([sn, "generate", "--model", small, "--logits",
                       ",".join(map(str, ids[:4])), "--out", out], needles,
                      "generate, sliding_window 16")
    rr.expect_refused([sn, "import", "--hf", small, "--check"], needles,
                      "import --check, sliding_window 16")
    print("ok   a window of 16 moves transformers' logits by %.3f" % moved, flush=True)


def test_finetune(sn, work, model, tok_path, corpus, ids):
    from peft import PeftModel
    jp = rr.write_job(work, "lora", model, tok_path, corpus)
    rr.run([sn, "train", "--job", jp, "--threads", "2"])
    adapter, merged = os.path.join(work, "adapter"), os.path.join(work, "merged")
    rr.run([sn, "export", "--job", jp, "--out", adapter])
    rr.run([sn, "export", "--job", jp, "--merge", "--out", merged])
    with open(os.path.join(merged, "config.json")) as f:
        cfg = json.load(f)
    rr.check(cfg.get("architectures") == ["MistralForCausalLM"] and
             cfg.get("model_type") == "mistral",
             "export --merge: config.json says %r / %r, not the Mistral it was" %
             (cfg.get("architectures"), cfg.get("model_type")))
    base = hf_model(model)
    pm = PeftModel.from_pretrained(base, adapter).eval()
    with torch.no_grad():
        want = pm(torch.tensor([ids])).logits[0].numpy()
    got = rr.sn_logits(sn, work, merged, ids, "merged")
    hf_merged = hf_logits(merged, ids)
    d = rr.maxdiff(got, want)
    d_hf = rr.maxdiff(hf_merged, want) if hf_merged is not None else float("inf")
    moved = rr.maxdiff(want, hf_logits(model, ids))
    rr.check(d <= LOGIT_TOL, "fine-tune: PEFT on the Mistral base and shardnode's merged "
             "export differ by %.3g" % d)
    rr.check(d_hf <= LOGIT_TOL, "fine-tune: transformers on the merged export and PEFT "
             "differ by %.3g" % d_hf)
    rr.check(moved > 100 * LOGIT_TOL, "fine-tune: the adapters move the logits by only %.3g"
             % moved)
    if d <= LOGIT_TOL and d_hf <= LOGIT_TOL and moved > 100 * LOGIT_TOL:
        print("ok   fine-tune: a LoRA job on the Mistral, exported --merge as a "
              "MistralForCausalLM that transformers loads; PEFT's logits = shardnode's merged "
              "(%.2e) = transformers' merged (%.2e); the adapters move them by %.3f" %
              (d, d_hf, moved), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    sn = os.path.abspath(a.shardnode)
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    torch.set_num_threads(2)
    t0 = time.time()
    corpus = rr.kjv(a.workdir)
    tok = rr.train_tokenizer(corpus, CFG["vocab_size"])
    model = make_model(a.workdir, tok)
    tok_path = os.path.join(model, "tokenizer.json")
    ids = [int(x) for x in np.random.default_rng(5).integers(0, CFG["vocab_size"], 200)]
    want = test_logits(sn, a.workdir, model, ids)
    test_window_refused(sn, a.workdir, model, ids, want)
    test_finetune(sn, a.workdir, model, tok_path, corpus, ids)
    if rr.failures:
        print("mistral_ref: %d checks failed (%.1f s)" % (len(rr.failures), time.time() - t0))
        sys.exit(1)
    print("mistral_ref: all checks passed (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
