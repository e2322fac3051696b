"""shardnode's LoRA output against the real `peft`, `transformers` and
`tokenizers` packages (from .venv/, made by scripts/deps.sh).

    /usr/bin/python3 tests/reference/peft_ref.py --shardnode build/shardnode --workdir DIR

Re-runs itself with .venv/bin/python; without the venv it prints why and
exits 77 (skipped). Every random choice is seeded. The base models are tiny
random LlamaForCausalLM saved by transformers (safetensors), with a
byte-level BPE tokenizer.json trained by `tokenizers` on KJV text. Checks:

  1. tokenizer: `shardnode tokenizer encode` on that tokenizer.json gives
     tokenizers' ids on a mixed-script text;
  2. logits of imported models: `shardnode generate --logits` on the
     transformers directory (untied and tied), on a GGUF written from it
     (F32, and Q8_0 matrices) and imported by `shardnode import --gguf`,
     against transformers' LlamaForCausalLM on the same ids (1e-4);
  3. fp32 base: a LoRA job (all seven projections) trained a few steps;
     `shardnode export` writes a PEFT directory whose tensor names and
     shapes are those get_peft_model_state_dict gives, whose
     adapter_config.json LoraConfig reads back; PeftModel.from_pretrained
     on the base loads every adapter as written; its logits equal those of
     `export --merge`'s directory loaded by transformers (1e-4) and of
     `generate --adapter` (1e-4); the merged weights equal PEFT's own
     merge_and_unload; the adapters move the logits (not a vacuous check);
  4. NF4 base (rslora, four projections, tied head): the same job with lr 0
     exported with --merge is the dequantized base (adapters B = 0): its
     matrices equal bitsandbytes' algorithm in numpy (nf4_np.py) bit for
     bit. PEFT on that dequantized base with the trained adapter equals the
     merged export (1e-4); a 2-process pipeline of the job exported with
     --cluster gives the single process's adapter file, tensor for tensor.

Exits non-zero naming the check that failed.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refvenv  # noqa: E402

refvenv.enter("peft, transformers, tokenizers, safetensors")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import gguf_ref  # noqa: E402
import nf4_np  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LOGIT_TOL = 1e-4
TIMEOUT = 300
MIXED = ("In the beginning God created the heaven and the earth. 12345 3.14159  two  "
         "spaces\n\tTabs; Ünïcödé ΑΒΓ αβγ Привет мир 你好世界 こんにちは 🎉🚀 it's we'll "
         "2024-06-01 x=42*7 ٣٤ ⅷ<|endoftext|>And God said\n\n")
failures = []


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


# ---- the base models ---------------------------------------------------------

def kjv(work):
    bible = shutil.which("bible")
    if not bible:
        raise SystemExit("the `bible` command is missing: install bible-kjv (scripts/deps.sh)")
    path = os.path.join(work, "kjv.txt")
    with open(path, "w") as f:
        f.write(run([bible, "Gen1:1-Gen12:20"]).stdout)
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


def make_base(work, name, tok, tied, seed):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = dict(hidden_size=64, intermediate_size=192, num_hidden_layers=3,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
               max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0,
               initializer_range=0.08)
    model = LlamaForCausalLM(LlamaConfig(**cfg, tie_word_embeddings=tied)).eval()
    d = os.path.join(work, name)
    model.save_pretrained(d, safe_serialization=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    return d, cfg


def hf_logits(model_dir, ids, dtype=torch.float32):
    from transformers import LlamaForCausalLM
    m = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=dtype).eval()
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0].numpy()


def sn_logits(sn, work, model_dir, ids, adapter=None, tag="x"):
    out = os.path.join(work, "logits-%s.safetensors" % tag)
    cmd = [sn, "generate", "--model", model_dir, "--logits", ",".join(map(str, ids)),
           "--out", out]
    if adapter:
        cmd += ["--adapter", adapter]
    run(cmd)
    got = load_file(out)
    check(list(got["input_ids"]) == list(ids), "%s: generate --logits wrote other ids" % tag)
    return got["logits"]


# ---- 1. tokenizer ---------------------------------------------------------------

def test_tokenizer(sn, tok, tok_path):
    want = tok.encode(MIXED).ids
    p = subprocess.run([sn, "tokenizer", "encode", "--special", "--tokenizer", tok_path],
                       input=MIXED.encode(), capture_output=True, timeout=60)
    got = [int(x) for x in p.stdout.split()]
    if check(p.returncode == 0 and got == want, "tokenizer: shardnode's ids differ from "
             "tokenizers' (%d vs %d ids) %s" % (len(got), len(want), p.stderr.decode()[:300])):
        print("ok   tokenizer: %d ids of a mixed-script text equal to tokenizers' (%s, saved "
              "by tokenizers)" % (len(want), os.path.basename(tok_path)), flush=True)


# ---- 2. logits of imported models ---------------------------------------------

def gguf_of(sn, work, base, cfg, tok, quant):
    sd = load_file(os.path.join(base, "model.safetensors"))
    tensors = []
    for name, w in sd.items():
        w = w.astype(np.float32)
        if name.endswith("q_proj.weight"):
            w = gguf_ref.permute(w, cfg["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            w = gguf_ref.permute(w, cfg["num_key_value_heads"])
        w = np.ascontiguousarray(w)
        if quant and w.ndim == 2 and name.startswith("model.layers."):
            tensors.append((gguf_ref.hf_to_gguf_name(name),
                            gguf_ref.quants.quantize(w, gguf_ref.Q.Q8_0), gguf_ref.Q.Q8_0))
        else:
            tensors.append((gguf_ref.hf_to_gguf_name(name), w, None))
    path = os.path.join(work, "base-%s.gguf" % ("q8_0" if quant else "f32"))
    gguf_ref.write_gguf(path, cfg, tensors, tok)
    out = os.path.join(work, "gguf-%s" % ("q8_0" if quant else "f32"))
    run([sn, "import", "--gguf", path, "--out", out])
    return out


def test_logits(sn, work, bases, tok, ids):
    base, cfg = bases[0]
    cases = [("transformers dir (untied)", base, base),
             ("transformers dir (tied)", bases[1][0], bases[1][0]),
             ("GGUF F32 import", gguf_of(sn, work, base, cfg, tok, False), base)]
    q8 = gguf_of(sn, work, base, cfg, tok, True)
    cases.append(("GGUF Q8_0 import", q8, q8))
    for i, (what, sn_dir, hf_dir) in enumerate(cases):
        want = hf_logits(hf_dir, ids)
        got = sn_logits(sn, work, sn_dir, ids, tag="import%d" % i)
        d = maxdiff(got, want)
        if check(d <= LOGIT_TOL, "logits, %s: shardnode and transformers differ by %.3g"
                 % (what, d)):
            print("ok   logits, %s: shardnode generate --logits = transformers' "
                  "LlamaForCausalLM on %d ids, max |diff| %.2e (logits up to %.2f)"
                  % (what, len(ids), d, float(np.abs(want).max())), flush=True)


# ---- 3. and 4. LoRA jobs, exported ------------------------------------------------

def write_job(work, name, base, tok_path, corpus, lora, quant=None, **over):
    out = os.path.join(work, name)
    shutil.rmtree(out, ignore_errors=True)
    job = {"base": {"model": base}, "tokenizer": tok_path,
           "data": {"files": [corpus], "separator": "\n\n", "val_fraction": 0.05},
           "seq_len": 32, "batch": 4, "micro_batch": 2, "steps": 6, "lr": 2e-2,
           "min_lr": 2e-3, "warmup_steps": 1, "weight_decay": 0.0, "seed": 11,
           "log_interval": 1000, "out_dir": out, "lora": lora}
    if quant:
        job["base"]["quant"] = quant
    job.update(over)
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(job, f, indent=1)
    return path, out


def peft_model(base_dir, adapter_dir):
    from peft import PeftModel
    from transformers import LlamaForCausalLM
    base = LlamaForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32).eval()
    return PeftModel.from_pretrained(base, adapter_dir).eval()


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def check_adapter_dir(name, adapter, base_dir, lora):
    """Names, shapes and config as PEFT itself saves them; every adapter loaded."""
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import LlamaForCausalLM
    cfg = LoraConfig.from_pretrained(adapter)
    check(cfg.peft_type == "LORA" and cfg.task_type == "CAUSAL_LM" and cfg.r == lora["r"] and
          cfg.lora_alpha == lora["alpha"] and
          sorted(cfg.target_modules) == sorted(lora["target_modules"]) and
          cfg.use_rslora == lora.get("use_rslora", False) and cfg.bias == "none" and
          not cfg.fan_in_fan_out and cfg.inference_mode and
          os.path.realpath(cfg.base_model_name_or_path) == os.path.realpath(base_dir),
          "%s: adapter_config.json read by LoraConfig: %s" % (name, cfg))
    ref_cfg = LoraConfig(r=lora["r"], lora_alpha=lora["alpha"],
                         target_modules=lora["target_modules"],
                         use_rslora=lora.get("use_rslora", False), task_type="CAUSAL_LM")
    base = LlamaForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32)
    want = {k: tuple(v.shape) for k, v in
            get_peft_model_state_dict(get_peft_model(base, ref_cfg)).items()}
    ours = load_file(os.path.join(adapter, "adapter_model.safetensors"))
    have = {k: tuple(v.shape) for k, v in ours.items()}
    check(have == want, "%s: adapter_model.safetensors' names/shapes are not PEFT's: %s"
          % (name, sorted(set(have.items()) ^ set(want.items()))[:4]))
    return ours, len(want)


def check_loaded(name, pm, ours):
    """PeftModel holds exactly the file's adapters."""
    sd = pm.state_dict()
    worst = 0.0
    for k, v in ours.items():
        key = k.replace(".lora_A.weight", ".lora_A.default.weight").replace(
            ".lora_B.weight", ".lora_B.default.weight")
        if not check(key in sd, "%s: PeftModel has no %s" % (name, key)):
            continue
        worst = max(worst, maxdiff(sd[key].numpy(), v))
    check(worst == 0.0, "%s: PeftModel's adapters differ from the file by %g" % (name, worst))
    bmax = max(float(np.abs(v).max()) for k, v in ours.items() if ".lora_B." in k)
    return bmax


def test_fp32(sn, work, base, tok_path, corpus, ids):
    t0 = time.time()
    lora = {"r": 4, "alpha": 8, "target_modules": MODULES}
    jp, out = write_job(work, "lora-f32", base, tok_path, corpus, lora)
    run([sn, "train", "--job", jp, "--threads", "2"])
    adapter, merged = os.path.join(work, "f32-adapter"), os.path.join(work, "f32-merged")
    run([sn, "export", "--job", jp, "--out", adapter])
    run([sn, "export", "--job", jp, "--merge", "--out", merged])
    ours, n = check_adapter_dir("fp32", adapter, base, lora)
    pm = peft_model(base, adapter)
    bmax = check_loaded("fp32", pm, ours)
    lp = logits_of(pm, ids)
    lb = hf_logits(base, ids)
    lm = hf_logits(merged, ids)
    lg = sn_logits(sn, work, base, ids, adapter=adapter, tag="f32-adapter")
    lgm = sn_logits(sn, work, merged, ids, tag="f32-merged")
    d_merge, d_gen, d_genm, moved = maxdiff(lp, lm), maxdiff(lp, lg), maxdiff(lp, lgm), \
        maxdiff(lp, lb)
    # PEFT's own merge against ours, weight by weight
    mu = pm.merge_and_unload().state_dict()
    mw = load_file(os.path.join(merged, "model.safetensors"))
    dw = max(maxdiff(mu[k].numpy(), v) for k, v in mw.items())
    check(set(mw) == set(mu) - {"lm_head.weight"} | ({"lm_head.weight"} & set(mw)),
          "fp32: merged names %s" % sorted(set(mw) ^ set(mu))[:4])
    check(d_merge <= LOGIT_TOL, "fp32: PEFT and the merged export differ by %.3g" % d_merge)
    check(d_gen <= LOGIT_TOL, "fp32: PEFT and generate --adapter differ by %.3g" % d_gen)
    check(d_genm <= LOGIT_TOL, "fp32: PEFT and generate on the merged export differ by %.3g"
          % d_genm)
    check(dw <= 1e-6, "fp32: merged weights differ from PEFT's merge_and_unload by %.3g" % dw)
    check(moved > 1e-3 and bmax > 0, "fp32: the adapters do not move the logits (%.3g, max "
          "|B| %.3g): a vacuous check" % (moved, bmax))
    print("ok   fp32 base, r 4, 7 modules: %d adapter tensors named and shaped as PEFT's, "
          "loaded by PeftModel.from_pretrained as written; PEFT logits against transformers "
          "on export --merge %.2e, generate --adapter %.2e, generate on the merged export "
          "%.2e; merged weights vs merge_and_unload %.2e; the adapters move the logits by "
          "%.3f (%.1f s)" % (n, d_merge, d_gen, d_genm, dw, moved, time.time() - t0),
          flush=True)


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def test_nf4(sn, work, base, tok_path, corpus, ids):
    t0 = time.time()
    lora = {"r": 8, "alpha": 16, "use_rslora": True,
            "target_modules": ["q_proj", "v_proj", "o_proj", "down_proj"]}
    # the base as shardnode dequantizes it: the job with lr 0 keeps B = 0
    jz, _ = write_job(work, "nf4-zero", base, tok_path, corpus, lora, "nf4", steps=1, lr=0.0,
                      min_lr=0.0, warmup_steps=0)
    run([sn, "train", "--job", jz, "--threads", "2"])
    deq = os.path.join(work, "nf4-dequantized")
    run([sn, "export", "--job", jz, "--merge", "--out", deq])
    src = load_file(os.path.join(base, "model.safetensors"))
    got = load_file(os.path.join(deq, "model.safetensors"))
    code8 = nf4_np.dynamic_map()
    exact = 0
    for k, w in src.items():
        if any(k.endswith("%s.weight" % m) for m in MODULES):
            q = nf4_np.quantize_nf4(w, code8)
            w = nf4_np.dequantize_nf4(q, w.size, code8).reshape(w.shape)
        exact += check(k in got and np.array_equal(got[k], w),
                       "nf4: the dequantized base's %s is not bitsandbytes' dequantization"
                       % k)
    # the trained adapters, single process and a 2-process pipeline
    jp, out = write_job(work, "lora-nf4", base, tok_path, corpus, lora, "nf4")
    run([sn, "train", "--job", jp, "--threads", "2"])
    adapter, merged = os.path.join(work, "nf4-adapter"), os.path.join(work, "nf4-merged")
    run([sn, "export", "--job", jp, "--out", adapter])
    run([sn, "export", "--job", jp, "--merge", "--out", merged])
    ours, n = check_adapter_dir("nf4", adapter, base, lora)
    pm = peft_model(deq, adapter)
    bmax = check_loaded("nf4", pm, ours)
    lp, lm, ld = logits_of(pm, ids), hf_logits(merged, ids), hf_logits(deq, ids)
    lg = sn_logits(sn, work, deq, ids, adapter=adapter, tag="nf4-adapter")
    d_merge, d_gen, moved = maxdiff(lp, lm), maxdiff(lp, lg), maxdiff(lp, ld)
    check(d_merge <= LOGIT_TOL, "nf4: PEFT and the merged export differ by %.3g" % d_merge)
    check(d_gen <= LOGIT_TOL, "nf4: PEFT and generate --adapter differ by %.3g" % d_gen)
    check(moved > 1e-3 and bmax > 0, "nf4: the adapters do not move the logits (%.3g)" % moved)

    jq, outq = write_job(work, "lora-nf4-pipe", base, tok_path, corpus, lora, "nf4")
    ports = free_ports(2)
    cl = {"run": "peft-pipe", "schedule": "1f1b", "timeout_ms": 20000, "wire_dtype": "f32",
          "nodes": [{"name": "p%d" % i, "host": "127.0.0.1", "port": ports[i],
                     "layers": [[0, 2], [2, 3]][i]} for i in range(2)]}
    clp = os.path.join(work, "peft-cluster.json")
    with open(clp, "w") as f:
        json.dump(cl, f)
    procs = [subprocess.Popen([sn, "train", "--job", jq, "--cluster", clp, "--node", "p%d" % i,
                               "--threads", "1"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    for i, (p, (o, e)) in enumerate(zip(procs, outs)):
        check(p.returncode == 0, "pipeline: p%d exited %d: %s%s" % (i, p.returncode, o, e))
    pipe_dir = os.path.join(work, "nf4-pipe-adapter")
    run([sn, "export", "--job", jq, "--cluster", clp, "--out", pipe_dir])
    pipe = load_file(os.path.join(pipe_dir, "adapter_model.safetensors"))
    same = set(pipe) == set(ours) and all(np.array_equal(pipe[k], ours[k]) for k in ours)
    check(same, "nf4: the pipeline's exported adapters differ from the single process's")
    with open(os.path.join(pipe_dir, "adapter_config.json")) as f1, \
            open(os.path.join(adapter, "adapter_config.json")) as f2:
        check(json.load(f1) == json.load(f2), "nf4: the pipeline's adapter_config.json differs")
    print("ok   NF4 base, rslora r 8, 4 modules, tied head: the lr-0 job's merged export is "
          "the base through bitsandbytes' NF4 (%d tensors bit for bit); PEFT on it with the "
          "trained adapter (%d tensors) against transformers on export --merge %.2e, "
          "generate --adapter %.2e; the adapters move the logits by %.3f; a 2-process "
          "pipeline's export --cluster = the single process's adapters (%.1f s)"
          % (exact, n, d_merge, d_gen, moved, time.time() - t0), flush=True)


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
    tok = train_tokenizer(corpus, 512)
    untied = make_base(a.workdir, "base-untied", tok, False, 1)
    tied = make_base(a.workdir, "base-tied", tok, True, 2)
    tok_path = os.path.join(untied[0], "tokenizer.json")
    ids = [int(x) for x in np.random.default_rng(5).integers(0, 512, 24)]
    test_tokenizer(sn, tok, tok_path)
    test_logits(sn, a.workdir, [untied, tied], tok, ids)
    test_fp32(sn, a.workdir, untied[0], tok_path, corpus, ids)
    test_nf4(sn, a.workdir, tied[0], tok_path, corpus, ids)
    if failures:
        print("peft_ref: %d checks failed (%.1f s)" % (len(failures), time.time() - t0))
        sys.exit(1)
    print("peft_ref: all checks passed (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
