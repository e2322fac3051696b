"""Llama 3.1/3.2 RoPE scaling (config.json's rope_scaling of rope_type "llama3")
against the real `transformers` (from .venv/, made by scripts/deps.sh).

    /usr/bin/python3 tests/reference/rope_ref.py --shardnode build/shardnode --workdir DIR

Re-runs itself with .venv/bin/python; without the venv it prints why and
exits 77 (skipped). Every random choice is seeded. The model is a tiny random
LlamaForCausalLM (head dim 16, max_position_embeddings 256) with
rope_scaling {"rope_type": "llama3", factor 8, low_freq_factor 1,
high_freq_factor 4, original_max_position_embeddings 64}, saved by
transformers as safetensors. Checks:

  1. frequencies: the config's plain frequencies fall in all three of
     transformers' bands (kept, divided by factor, smoothed), so every
     branch of the scaling is exercised;
  2. logits: `shardnode generate --logits` on 200 ids (past the original
     context of 64) equals transformers' LlamaForCausalLM (1e-4); the
     older spelling "type" gives the same logits;
  3. the check can fail: the same weights without rope_scaling give
     transformers logits that differ from the scaled ones by far more than
     the tolerance, and shardnode's logits of that plain directory follow
     transformers' plain ones (1e-4), not the scaled ones;
  4. refusals: rope_scaling of type "yarn" and a llama3 one without
     low_freq_factor are refused by `shardnode generate`, naming them; a
     job whose "config" is the plain config.json with the scaled model as
     its base is refused (the configs differ in rope_scaling); a GGUF of
     the model with llama.cpp's rope_freqs.weight tensor (its converter's
     per-frequency factors) is refused by `shardnode import --gguf` naming
     the tensor, not imported as plain RoPE;
  5. checkpoints: a run from scratch on the scaled config stopped after 2
     steps is refused by --resume with the plain config, naming the
     scaling, and the reverse;
  6. fine-tuning: a LoRA job on the scaled model trains a few steps;
     `shardnode export --merge` writes a config.json with the same
     rope_scaling, and PEFT's PeftModel on the scaled base with the
     exported adapter gives the logits of shardnode's merged directory
     (1e-4).

Exits non-zero naming the check that failed.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refvenv  # noqa: E402

refvenv.enter("transformers, peft, tokenizers, safetensors, gguf")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

LOGIT_TOL = 1e-4
TIMEOUT = 300
SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
CFG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, vocab_size=320, max_position_embeddings=256,
           rms_norm_eps=1e-5, rope_theta=10000.0, initializer_range=0.1)
failures = []
TOK = []   # the tokenizers object the model was saved with


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr, flush=True)
    return cond


def run(args, expect_ok=True):
    p = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT)
    if expect_ok and p.returncode != 0:
        raise SystemExit("command failed (%d): %s\n%s%s" % (p.returncode, " ".join(args),
                                                            p.stdout, p.stderr))
    return p


def maxdiff(a, b):
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def kjv(work):
    bible = shutil.which("bible")
    if not bible:
        raise SystemExit("the `bible` command is missing: install bible-kjv (scripts/deps.sh)")
    path = os.path.join(work, "kjv.txt")
    with open(path, "w") as f:
        f.write(run([bible, "Gen1:1-Gen6:22"]).stdout)
    return path


def train_tokenizer(corpus, vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    with open(corpus) as f:
        lines = f.read().split("\n")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 1, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


def make_model(work, tok):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(3)
    model = LlamaForCausalLM(LlamaConfig(**CFG, rope_scaling=dict(SCALING))).eval()
    d = os.path.join(work, "scaled")
    model.save_pretrained(d, safe_serialization=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    return d


def variant(src, work, name, rope_scaling):
    """A copy of src whose config.json has another rope_scaling."""
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["rope_scaling"] = rope_scaling
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return d


def hf_logits(model_dir, ids):
    from transformers import LlamaForCausalLM
    m = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0].numpy()


def sn_logits(sn, work, model_dir, ids, tag):
    out = os.path.join(work, "logits-%s.safetensors" % tag)
    run([sn, "generate", "--model", model_dir, "--logits", ",".join(map(str, ids)),
         "--out", out])
    got = load_file(out)
    check(list(got["input_ids"]) == list(ids), "%s: generate --logits wrote other ids" % tag)
    return got["logits"]


def test_bands():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import _compute_default_rope_parameters
    inv, _ = _compute_default_rope_parameters(LlamaConfig(**CFG), "cpu")
    wavelen = 2 * math.pi / inv.double().numpy()
    old = SCALING["original_max_position_embeddings"]
    kept = int((wavelen < old / SCALING["high_freq_factor"]).sum())
    divided = int((wavelen > old / SCALING["low_freq_factor"]).sum())
    smoothed = len(wavelen) - kept - divided
    if check(kept and divided and smoothed, "bands: the config leaves a band of frequencies "
             "empty (%d kept, %d divided, %d smoothed)" % (kept, divided, smoothed)):
        print("ok   frequencies: %d kept, %d divided by factor, %d smoothed" %
              (kept, divided, smoothed), flush=True)


def test_logits(sn, work, scaled, ids):
    want = hf_logits(scaled, ids)
    got = sn_logits(sn, work, scaled, ids, "scaled")
    d = maxdiff(got, want)
    check(d <= LOGIT_TOL, "logits: shardnode and transformers differ by %.3g on the "
          "llama3-scaled model" % d)
    old_spelling = dict(SCALING)
    old_spelling["type"] = old_spelling.pop("rope_type")
    typed = variant(scaled, work, "scaled-type", old_spelling)
    d_type = maxdiff(sn_logits(sn, work, typed, ids, "type"), want)
    check(d_type <= LOGIT_TOL, "logits: with \"type\": \"llama3\" shardnode differs from "
          "transformers by %.3g" % d_type)

    plain = variant(scaled, work, "plain", None)
    want_plain = hf_logits(plain, ids)
    got_plain = sn_logits(sn, work, plain, ids, "plain")
    d_scaling = maxdiff(want, want_plain)
    d_plain = maxdiff(got_plain, want_plain)
    d_cross = maxdiff(got_plain, want)
    check(d_scaling > 100 * LOGIT_TOL, "the scaling moves transformers' logits by only %.3g: "
          "the comparison could not fail" % d_scaling)
    check(d_plain <= LOGIT_TOL, "logits: without rope_scaling shardnode and transformers "
          "differ by %.3g" % d_plain)
    check(d_cross > 100 * LOGIT_TOL, "shardnode's plain logits are within %.3g of the scaled "
          "ones" % d_cross)
    if not failures:
        print("ok   logits: shardnode generate --logits = transformers' LlamaForCausalLM on "
              "%d ids with llama3 rope_scaling, max |diff| %.2e (\"type\" spelling %.2e; logits "
              "up to %.2f); without the scaling transformers' logits move by %.3f and "
              "shardnode's follow them (%.2e)" % (len(ids), d, d_type,
                                                   float(np.abs(want).max()), d_scaling,
                                                   d_plain), flush=True)
    return plain


def expect_refused(args, needles, what):
    p = run(args, expect_ok=False)
    msg = p.stdout + p.stderr
    ok = p.returncode != 0 and all(n in msg for n in needles)
    if check(ok, "%s: expected a refusal naming %s, got rc %d: %s" %
             (what, needles, p.returncode, msg.strip()[:400])):
        print("ok   refused, %s: %s" % (what, msg.strip().splitlines()[-1][:200]), flush=True)


def write_job(work, name, base, tok_path, corpus, config=None, steps=4):
    """A LoRA job on base; with base None, a job training config from scratch."""
    out = os.path.join(work, name)
    shutil.rmtree(out, ignore_errors=True)
    job = {"base": {"model": base}, "tokenizer": tok_path,
           "data": {"files": [corpus], "separator": "\n\n", "val_fraction": 0.05},
           "seq_len": 128, "batch": 2, "micro_batch": 1, "steps": 4, "lr": 2e-2,
           "min_lr": 2e-3, "warmup_steps": 1, "weight_decay": 0.0, "seed": 7,
           "log_interval": 1000, "out_dir": out,
           "lora": {"r": 4, "alpha": 8, "target_modules": ["q_proj", "k_proj", "v_proj",
                                                           "o_proj"]}}
    job["steps"] = steps
    if config:
        job["config"] = config
    if base is None:
        del job["base"], job["lora"]
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(job, f, indent=1)
    return path


def test_refusals(sn, work, scaled, plain, tok_path, corpus, ids):
    ids_s = ",".join(map(str, ids[:4]))
    out = os.path.join(work, "refused.safetensors")
    yarn = variant(scaled, work, "yarn", {"rope_type": "yarn", "factor": 4.0,
                                          "original_max_position_embeddings": 64})
    expect_refused([sn, "generate", "--model", yarn, "--logits", ids_s, "--out", out],
                   ["rope_scaling", "\"yarn\" is not supported"], "rope_type yarn")
    partial = dict(SCALING)
    del partial["low_freq_factor"]
    missing = variant(scaled, work, "missing", partial)
    expect_refused([sn, "generate", "--model", missing, "--logits", ids_s, "--out", out],
                   ["rope_scaling.low_freq_factor is missing"], "llama3 without low_freq_factor")
    import gguf_ref
    sd = load_file(os.path.join(scaled, "model.safetensors"))
    tensors = []
    for name, w in sd.items():
        w = w.astype(np.float32)
        if name.endswith("q_proj.weight"):
            w = gguf_ref.permute(w, CFG["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            w = gguf_ref.permute(w, CFG["num_key_value_heads"])
        tensors.append((gguf_ref.hf_to_gguf_name(name), np.ascontiguousarray(w), None))
    hd = CFG["hidden_size"] // CFG["num_attention_heads"]
    freqs = 1.0 / (CFG["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
    old = SCALING["original_max_position_embeddings"]
    lo, hi, fac = SCALING["low_freq_factor"], SCALING["high_freq_factor"], SCALING["factor"]
    factors = []
    for f in freqs:   # convert_hf_to_gguf.py's LlamaModel rope_freqs
        wl = 2 * math.pi / f
        sm = (old / wl - lo) / (hi - lo)
        factors.append(1.0 if wl < old / hi else fac if wl > old / lo
                       else 1 / ((1 - sm) / fac + sm))
    tensors.append(("rope_freqs.weight", np.array(factors, dtype=np.float32), None))
    gpath = os.path.join(work, "scaled.gguf")
    gguf_ref.write_gguf(gpath, CFG, tensors, TOK[0])
    expect_refused([sn, "import", "--gguf", gpath, "--out", os.path.join(work, "from-gguf")],
                   ["rope_freqs.weight", "not imported"], "GGUF with rope_freqs.weight")
    jp = write_job(work, "mixed", scaled, tok_path, corpus,
                   config=os.path.join(plain, "config.json"))
    expect_refused([sn, "train", "--job", jp, "--threads", "2"], ["rope_scaling"],
                   "a plain config with the scaled model as base")


def test_checkpoint(sn, work, scaled, plain, tok_path, corpus):
    """A run from scratch on the scaled config, stopped after 2 steps, does
    not resume with the plain config (nor the reverse)."""
    for first, then, what in ((scaled, plain, "scaled run resumed as plain"),
                              (plain, scaled, "plain run resumed as scaled")):
        name = "ckpt-" + os.path.basename(first)
        jp = write_job(work, name, None, tok_path, corpus,
                       config=os.path.join(first, "config.json"), steps=4)
        run([sn, "train", "--job", jp, "--threads", "2", "--steps", "2"])
        check(os.path.exists(os.path.join(work, name, "checkpoint.safetensors")),
              "%s: no checkpoint after --steps 2" % what)
        with open(jp) as f:
            job = json.load(f)
        job["config"] = os.path.join(then, "config.json")
        with open(jp, "w") as f:
            json.dump(job, f, indent=1)
        expect_refused([sn, "train", "--job", jp, "--threads", "2", "--resume"],
                       ["different model config", "rope_scaling=llama3"], what)


def test_finetune(sn, work, scaled, tok_path, corpus, ids):
    from peft import PeftModel
    from transformers import LlamaForCausalLM
    jp = write_job(work, "lora", scaled, tok_path, corpus)
    run([sn, "train", "--job", jp, "--threads", "2"])
    adapter, merged = os.path.join(work, "adapter"), os.path.join(work, "merged")
    run([sn, "export", "--job", jp, "--out", adapter])
    run([sn, "export", "--job", jp, "--merge", "--out", merged])
    with open(os.path.join(merged, "config.json")) as f:
        rs = json.load(f).get("rope_scaling")
    check(rs == SCALING, "export --merge: config.json's rope_scaling is %r, not %r" %
          (rs, SCALING))
    base = LlamaForCausalLM.from_pretrained(scaled, torch_dtype=torch.float32).eval()
    pm = PeftModel.from_pretrained(base, adapter).eval()
    with torch.no_grad():
        want = pm(torch.tensor([ids])).logits[0].numpy()
    got = sn_logits(sn, work, merged, ids, "merged")
    d = maxdiff(got, want)
    moved = maxdiff(want, hf_logits(scaled, ids))
    check(d <= LOGIT_TOL, "fine-tune: PEFT on the scaled base and shardnode's merged export "
          "differ by %.3g" % d)
    check(moved > 100 * LOGIT_TOL, "fine-tune: the adapters move the logits by only %.3g"
          % moved)
    if d <= LOGIT_TOL and moved > 100 * LOGIT_TOL:
        print("ok   fine-tune: a LoRA job on the scaled model, exported: merged config.json "
              "keeps rope_scaling, PEFT's logits = shardnode's merged model's, max |diff| "
              "%.2e (the adapters move them by %.3f)" % (d, moved), flush=True)


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
    corpus = kjv(a.workdir)
    tok = train_tokenizer(corpus, CFG["vocab_size"])
    TOK.append(tok)
    scaled = make_model(a.workdir, tok)
    tok_path = os.path.join(scaled, "tokenizer.json")
    ids = [int(x) for x in np.random.default_rng(5).integers(0, CFG["vocab_size"], 200)]
    test_bands()
    plain = test_logits(sn, a.workdir, scaled, ids)
    test_refusals(sn, a.workdir, scaled, plain, tok_path, corpus, ids)
    test_checkpoint(sn, a.workdir, scaled, plain, tok_path, corpus)
    test_finetune(sn, a.workdir, scaled, tok_path, corpus, ids)
    if failures:
        print("rope_ref: %d checks failed (%.1f s)" % (len(failures), time.time() - t0))
        sys.exit(1)
    print("rope_ref: all checks passed (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
