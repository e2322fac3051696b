"""LoRA on a frozen base (fp32 or NF4), model/stage_lora.c, against PyTorch.

    /usr/bin/python3 tests/reference/lora_ref.py --shardnode build/shardnode --workdir DIR

Needs only /usr/bin/python3 (torch, numpy) and Debian's bible-kjv; the NF4
base is dequantized by tests/reference/nf4_np.py (bitsandbytes' algorithm in
numpy, checked bit for bit against shardnode by reference.nf4). Checks:

1. gradients: `shardnode gradcheck --lora R,ALPHA,MODULES [--nf4]
   --input-grads` on random models whole and cut into 2 and 3 stages, with
   random adapters (A and B non-zero): the loss (1e-5 relative), every
   adapter's dA and dB and the gradient of every stage's input
   (max |g - g_ref| / max |g_ref| <= 1e-4) against autograd in float64 on
   y = x W0^T + scaling (x A^T) B^T with W0 the base (dequantized for NF4);
   the gradient file holds exactly the adapters (PEFT names) and the input
   gradients: nothing of the frozen base.
2. the initialisation: A as torch.nn.init.kaiming_uniform_(a=sqrt(5))
   bounds it (PEFT's reset_lora_parameters), drawn from (seed, PEFT name)
   as stage_lora.c does (replicated here), B zero; the bound equals torch's.
3. training: `shardnode train` with "lora" (fp32 base; NF4 base with
   rslora) for a few steps on KJV text against a float32 torch loop of the
   same math (AdamW on the adapters only, clip_grad_norm_ over them, the
   job's lr schedule): every step's loss within 1e-4 relative; the
   checkpoint holds only the adapters and their two moments; the run is
   bit-identical with 1 and 2 threads and when stopped and resumed.
4. pipeline: the NF4 job on three `train --cluster` processes on loopback
   (tied embeddings, so the frozen head's copy is in play): every step's
   loss and every adapter bit-identical to the single process.

Exits non-zero naming the check that failed.
"""

import argparse
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref  # noqa: E402
import nf4_np  # noqa: E402

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
TRAIN_RTOL = 1e-4
TIMEOUT = 300
M64 = (1 << 64) - 1


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def run(cmd, ok=True, timeout=TIMEOUT):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    if ok and p.returncode != 0:
        raise Failure("exit %d: %s\n%s" % (p.returncode, " ".join(cmd), p.stderr.strip()))
    return p


# ------------------------------------------------------------ the model ---

def peft_name(layer, module, which):
    part = "self_attn" if module in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
    return "base_model.model.model.layers.%d.%s.%s.lora_%s.weight" % (layer, part, module, which)


def base_name(layer, module):
    part = "self_attn" if module in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
    return "model.layers.%d.%s.%s.weight" % (layer, part, module)


def scaling(alpha, r, rslora):
    """PEFT's scaling, as the fp32 number shardnode multiplies by."""
    return float(np.float32(alpha / math.sqrt(r) if rslora else alpha / r))


def adapter_shapes(cfg, r, modules):
    """name -> shape of every adapter, in shardnode's table order."""
    shapes = ref.param_shapes(cfg)
    out = {}
    for layer in range(cfg["num_hidden_layers"]):
        for m in MODULES:
            if m in modules:
                o, i = shapes[base_name(layer, m)]
                out[peft_name(layer, m, "A")] = (r, i)
                out[peft_name(layer, m, "B")] = (o, r)
    return out


def nf4_base(params, cfg):
    """The base with every layer matrix through NF4 and back (numpy)."""
    code8 = nf4_np.dynamic_map()
    out = dict(params)
    for layer in range(cfg["num_hidden_layers"]):
        for m in MODULES:
            name = base_name(layer, m)
            w = params[name]
            q = nf4_np.quantize_nf4(w, code8)
            out[name] = nf4_np.dequantize_nf4(q, w.size, code8).reshape(w.shape)
    return out


def lora_forward(params, adapters, cfg, ids, s, boundaries=()):
    """Logits of the LLaMA with adapters on its projections, and the hidden
    state entering each layer in `boundaries` (retained for its gradient)."""
    cfg = ref.full_config(cfg)
    eps = cfg["rms_norm_eps"]
    B, T = ids.shape
    C, NH, NKV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    HD = C // NH
    wte = params["model.embed_tokens.weight"]
    x = F.embedding(ids, wte)
    cos, sin = ref.rope_cos_sin(T, HD, cfg["rope_theta"], x.dtype)
    hidden = {}

    def lin(h, layer, m):
        y = F.linear(h, params[base_name(layer, m)])
        a = adapters.get(peft_name(layer, m, "A"))
        if a is not None:
            y = y + F.linear(F.linear(h, a), adapters[peft_name(layer, m, "B")]) * s
        return y

    L = cfg["num_hidden_layers"]
    for i in range(L + 1):
        if i in boundaries:
            x.retain_grad()
            hidden[i] = x
        if i == L:
            break
        p = "model.layers.%d." % i
        h = ref.rms_norm(x, params[p + "input_layernorm.weight"], eps)
        q = lin(h, i, "q_proj").view(B, T, NH, HD).transpose(1, 2)
        k = lin(h, i, "k_proj").view(B, T, NKV, HD).transpose(1, 2)
        v = lin(h, i, "v_proj").view(B, T, NKV, HD).transpose(1, 2)
        q, k = ref.apply_rope(q, cos, sin), ref.apply_rope(k, cos, sin)
        rep = NH // NKV
        if rep > 1:
            k = k[:, :, None].expand(B, NKV, rep, T, HD).reshape(B, NH, T, HD)
            v = v[:, :, None].expand(B, NKV, rep, T, HD).reshape(B, NH, T, HD)
        sc = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(HD)
        sc = sc.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = torch.matmul(torch.softmax(sc, dim=-1), v).transpose(1, 2).reshape(B, T, NH * HD)
        x = x + lin(y, i, "o_proj")
        h = ref.rms_norm(x, params[p + "post_attention_layernorm.weight"], eps)
        x = x + lin(F.silu(lin(h, i, "gate_proj")) * lin(h, i, "up_proj"), i, "down_proj")
    x = ref.rms_norm(x, params["model.norm.weight"], eps)
    head = wte if cfg["tie_word_embeddings"] else params["lm_head.weight"]
    return F.linear(x, head), hidden


def lora_loss(params, adapters, cfg, ids, labels, s, boundaries=()):
    logits, hidden = lora_forward(params, adapters, cfg, ids, s, boundaries)
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)
    return loss, hidden


# ------------------------------------------------------- 1. gradients ---

GRAD_CASES = [
    dict(name="gqa6x2-untied-all", cfg=dict(hidden_size=48, intermediate_size=136,
         num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2, vocab_size=97,
         rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
         max_position_embeddings=64), r=4, alpha=8.0, rslora=False, modules=MODULES,
         B=2, T=17, splits=[None, "1"]),
    dict(name="gqa4x1-tied-4layers-rslora", cfg=dict(hidden_size=64, intermediate_size=176,
         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1, vocab_size=131,
         rms_norm_eps=3e-6, rope_theta=10000.0, tie_word_embeddings=True,
         max_position_embeddings=64), r=3, alpha=5.0, rslora=True,
         modules=["q_proj", "v_proj", "o_proj", "down_proj"], B=3, T=9,
         splits=[None, "2", "1,3"]),
]


def split_begins(split):
    return [] if split is None else [int(x) for x in split.split(",") if int(x) > 0]


def check_gradients(sn, wd, seed):
    worst = 0.0
    runs = 0
    for k, case in enumerate(GRAD_CASES):
        rng = np.random.default_rng([seed, k])
        cfg = ref.make_config(**case["cfg"])
        params = ref.random_params(cfg, rng, std=0.2)
        shapes = adapter_shapes(cfg, case["r"], case["modules"])
        adapters = {n: rng.normal(0.0, 0.1, size=sh).astype(np.float32)
                    for n, sh in shapes.items()}
        ids, labels = ref.random_batch(cfg, rng, case["B"], case["T"])
        d = os.path.join(wd, case["name"])
        os.makedirs(d, exist_ok=True)
        cfg_path = os.path.join(d, "config.json")
        ref.save_config(cfg, cfg_path)
        w_path, b_path = os.path.join(d, "W.safetensors"), os.path.join(d, "B.safetensors")
        ref.write_safetensors(w_path, dict(params, **adapters))
        ref.write_safetensors(b_path, {"input_ids": ids, "labels": labels})
        s = scaling(case["alpha"], case["r"], case["rslora"])
        lora_arg = "%d,%g,%s%s" % (case["r"], case["alpha"], ":".join(case["modules"]),
                                   ",rslora" if case["rslora"] else "")
        for nf4 in (False, True):
            base = nf4_base(params, cfg) if nf4 else params
            tp = ref.to_torch_params(base, requires_grad=False)
            ta = ref.to_torch_params(adapters)
            bounds = sorted(set(b for sp in case["splits"] for b in split_begins(sp)))
            loss, hidden = lora_loss(tp, ta, cfg, torch.from_numpy(ids).long(),
                                     torch.from_numpy(labels).long(), s, bounds)
            loss.backward()
            for split in case["splits"]:
                label = "%s%s [%s]" % (case["name"], " nf4" if nf4 else "",
                                       "one stage" if split is None else "--split " + split)
                g_path = os.path.join(d, "G-%s-%s.safetensors" % ("nf4" if nf4 else "f32",
                                                                    split or "whole"))
                cmd = [sn, "gradcheck", "--config", cfg_path, "--weights", w_path, "--batch",
                       b_path, "--out", g_path, "--lora", lora_arg, "--input-grads"]
                if nf4:
                    cmd.append("--nf4")
                if split:
                    cmd += ["--split", split]
                run(cmd)
                got = ref.read_safetensors(g_path)
                want = {n: ta[n].grad.numpy() for n in shapes}
                for b in split_begins(split):
                    want["input_grad.layer.%d" % b] = \
                        hidden[b].grad.numpy().reshape(-1, cfg["hidden_size"])
                check(sorted(set(got) - {"loss"}) == sorted(want),
                      "%s: gradient names %s, expected %s" % (
                          label, sorted(set(got) ^ set(want) - {"loss"}), sorted(want)))
                lrel = abs(float(got["loss"][0]) - loss.item()) / abs(loss.item())
                check(lrel <= LOSS_RTOL, "%s: loss %.9g, torch %.9g (rel %.2e)"
                      % (label, got["loss"][0], loss.item(), lrel))
                wname, wrel = "", 0.0
                for n, g_ref in want.items():
                    check(got[n].shape == g_ref.shape, "%s: %s has shape %s, expected %s"
                          % (label, n, got[n].shape, g_ref.shape))
                    m = float(np.abs(g_ref).max())
                    check(m > 0, "%s: reference gradient of %s is zero" % (label, n))
                    rel = float(np.abs(got[n].astype(np.float64) - g_ref).max()) / m
                    check(rel <= GRAD_RTOL, "%s: gradient %s: relative error %.2e > %g"
                          % (label, n, rel, GRAD_RTOL))
                    if rel > wrel:
                        wname, wrel = n, rel
                worst = max(worst, wrel)
                runs += 1
                print("ok   %-46s loss rel %.1e, %d tensors, worst %s rel %.1e"
                      % (label, lrel, len(want), wname.replace("base_model.model.", ""), wrel),
                      flush=True)
    return runs, worst


# ----------------------------------------------------- 2. initialisation ---

def splitmix64(state):
    state = (state + 0x9e3779b97f4a7c15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    return state, z ^ (z >> 31)


def fnv1a(text):
    h = 0xcbf29ce484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001b3) & M64
    return h


def kaiming_bound(fan_in):
    a = math.sqrt(5.0)
    return math.sqrt(3.0) * (math.sqrt(2.0 / (1.0 + a * a)) / math.sqrt(fan_in))


def init_adapters(shapes, seed):
    """stage_init_adapters, replicated: A uniform in +-bound from (seed, name), B zero."""
    out = {}
    for name, (d0, d1) in shapes.items():
        if ".lora_A." not in name:
            out[name] = np.zeros((d0, d1), dtype=np.float32)
            continue
        bound = kaiming_bound(d1)
        state = seed ^ fnv1a(name)
        vals = np.empty(d0 * d1, dtype=np.float32)
        for j in range(d0 * d1):
            state, z = splitmix64(state)
            u = (z >> 11) * 2.0 ** -53
            vals[j] = np.float32(-bound + 2.0 * bound * u)
        out[name] = vals.reshape(d0, d1)
    return out


def check_init_bound():
    for fan_in in (48, 64, 176, 4096):
        t = torch.empty(8, fan_in)
        gain = torch.nn.init.calculate_gain("leaky_relu", math.sqrt(5))
        want = math.sqrt(3.0) * gain / math.sqrt(fan_in)
        check(abs(kaiming_bound(fan_in) - want) <= 1e-15 * want,
              "init: bound %.17g for fan_in %d, torch's kaiming_uniform_ %.17g"
              % (kaiming_bound(fan_in), fan_in, want))
        torch.nn.init.kaiming_uniform_(t, a=math.sqrt(5))
        check(float(t.abs().max()) <= want, "init: torch exceeds its own bound")


# ---------------------------------------------------------- 3. training ---

def job_lr(job, step):
    lr, mn, wu, steps = job["lr"], job["min_lr"], job["warmup_steps"], job["steps"]
    if step < wu:
        return lr * (step + 1) / wu
    span = steps - wu
    prog = (step - wu) / (span - 1) if span > 1 else 1.0
    return mn + 0.5 * (lr - mn) * (1.0 + math.cos(math.pi * min(prog, 1.0)))


LOSS_RE = re.compile(r'"loss": ([^,}]+)')


def metric_losses(path):
    with open(path) as f:
        return [LOSS_RE.search(line).group(1) for line in f]


def torch_train(job, cfg, base, shapes, ids, labels):
    """float32 LoRA training as the job describes; returns the losses and adapters."""
    lo = job["lora"]
    s = scaling(lo["alpha"], lo["r"], lo.get("use_rslora", False))
    tp = ref.to_torch_params(base, torch.float32, requires_grad=False)
    ta = ref.to_torch_params(init_adapters(shapes, job["seed"]), torch.float32)
    opt = torch.optim.AdamW(list(ta.values()), lr=job["lr"], betas=(job["beta1"], job["beta2"]),
                            eps=job["eps"], weight_decay=job["weight_decay"])
    B, losses = job["batch"], []
    for step in range(job["steps"]):
        for g in opt.param_groups:
            g["lr"] = job_lr(job, step)
        opt.zero_grad(set_to_none=True)
        rows = slice(step * B, (step + 1) * B)
        loss, _ = lora_loss(tp, ta, cfg, torch.from_numpy(ids[rows]).long(),
                            torch.from_numpy(labels[rows]).long(), s)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(ta.values()), job["grad_clip"])
        opt.step()
        losses.append(loss.item())
    return losses, {n: t.detach().numpy() for n, t in ta.items()}


def write_job(wd, name, cfg_path, init, corpus, tok, lora, base=None, **over):
    out = os.path.join(wd, name)
    shutil.rmtree(out, ignore_errors=True)
    job = {"config": cfg_path, "init_weights": init, "tokenizer": tok,
           "data": {"files": [corpus], "separator": "\n\n", "val_fraction": 0.05},
           "seq_len": 32, "batch": 4, "micro_batch": 2, "steps": 8, "lr": 1e-2,
           "min_lr": 1e-3, "warmup_steps": 2, "weight_decay": 0.1, "beta1": 0.9,
           "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0, "seed": 7, "log_interval": 1000,
           "checkpoint_interval": 0, "out_dir": out, "lora": lora}
    if base:
        job["base"] = base
    job.update(over)
    path = os.path.join(wd, name + ".json")
    with open(path, "w") as f:
        json.dump(job, f, indent=1)
    return path, job, out


def check_training(sn, wd, seed):
    bible = shutil.which("bible")
    check(bible, "the `bible` command is missing: install bible-kjv (scripts/deps.sh)")
    corpus, tok = os.path.join(wd, "kjv.txt"), os.path.join(wd, "tokenizer.json")
    with open(corpus, "w") as f:
        f.write(run([bible, "Gen1:1-Gen20:18"]).stdout)
    run([sn, "tokenizer", "train", "--input", corpus, "--vocab-size", "512", "--out", tok])
    cfg = ref.make_config(hidden_size=64, intermediate_size=176, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                          rms_norm_eps=1e-5, tie_word_embeddings=True,
                          max_position_embeddings=64)
    cfg_path = os.path.join(wd, "train-config.json")
    ref.save_config(cfg, cfg_path)
    params = ref.random_params(cfg, np.random.default_rng([seed, 99]), std=0.05)
    init = os.path.join(wd, "base.safetensors")
    ref.write_safetensors(init, params)
    variants = [
        ("lora-f32", {"r": 4, "alpha": 8, "target_modules": MODULES}, None),
        ("lora-nf4", {"r": 8, "alpha": 16, "use_rslora": True, "dropout": 0.0,
                      "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "down_proj"]},
         {"quant": "nf4"}),
    ]
    results = {}
    for name, lora, base in variants:
        t0 = time.time()
        jp, job, out = write_job(wd, name, cfg_path, init, corpus, tok, lora, base)
        m1 = os.path.join(wd, name + ".t2.jsonl")
        run([sn, "train", "--job", jp, "--metrics", m1, "--threads", "2"])
        bpath = os.path.join(wd, name + "-batches.safetensors")
        run([sn, "batches", "--job", jp, "--out", bpath])
        b = ref.read_safetensors(bpath)
        shapes = adapter_shapes(cfg, lora["r"], lora["target_modules"])
        base_w = nf4_base(params, cfg) if base else params
        th, th_ad = torch_train(job, cfg, base_w, shapes, b["input_ids"], b["labels"])
        sn_losses = [float(x) for x in metric_losses(m1)]
        check(len(sn_losses) == job["steps"], "%s: %d metrics lines" % (name, len(sn_losses)))
        rels = [abs(a - t) / abs(t) for a, t in zip(sn_losses, th)]
        for step, (a, t, r) in enumerate(zip(sn_losses, th, rels)):
            check(r <= TRAIN_RTOL, "%s: step %d loss %.9g, torch %.9g (rel %.2e)"
                  % (name, step + 1, a, t, r))
        ad = ref.read_safetensors(os.path.join(out, "adapter_model.safetensors"))
        check(sorted(ad) == sorted(shapes), "%s: adapter_model.safetensors holds %s"
              % (name, sorted(set(ad) ^ set(shapes))))
        arel = max(float(np.abs(ad[n] - th_ad[n]).max()) / float(np.abs(th_ad[n]).max())
                   for n in shapes)
        ck = ref.read_safetensors(os.path.join(out, "checkpoint.safetensors"))
        want = set(shapes) | {"optim.exp_avg." + n for n in shapes} | \
            {"optim.exp_avg_sq." + n for n in shapes}
        check(set(ck) == want, "%s: the checkpoint holds %s beside the adapters and moments"
              % (name, sorted(set(ck) - want)[:4]))
        # 1 thread, and stopped at step 4 then resumed: bit for bit
        jp1, _, out1 = write_job(wd, name + "-t1", cfg_path, init, corpus, tok, lora, base)
        m2 = os.path.join(wd, name + ".t1.jsonl")
        run([sn, "train", "--job", jp1, "--metrics", m2, "--threads", "1"])
        check(metric_losses(m2) == metric_losses(m1), "%s: losses differ with 1 and 2 threads"
              % name)
        jpr, _, outr = write_job(wd, name + "-resume", cfg_path, init, corpus, tok, lora, base)
        m3, m4 = os.path.join(wd, name + ".a.jsonl"), os.path.join(wd, name + ".b.jsonl")
        run([sn, "train", "--job", jpr, "--metrics", m3, "--threads", "2", "--steps", "4"])
        run([sn, "train", "--job", jpr, "--metrics", m4, "--threads", "2", "--resume"])
        check(metric_losses(m3) + metric_losses(m4) == metric_losses(m1),
              "%s: a run stopped at step 4 and resumed has other losses" % name)
        for o in (out1, outr):
            with open(os.path.join(o, "adapter_model.safetensors"), "rb") as f1, \
                    open(os.path.join(out, "adapter_model.safetensors"), "rb") as f2:
                check(f1.read() == f2.read(), "%s: %s/adapter_model.safetensors differs" % (name, o))
        print("ok   train %-8s %d steps: loss %.5f -> %.5f, worst rel diff to torch %.1e; "
              "adapters rel diff %.1e; checkpoint = %d adapters + moments; 1 = 2 threads, "
              "4 + --resume 4 = 8 steps, bit for bit (%.1f s)"
              % (name, job["steps"], sn_losses[0], sn_losses[-1], max(rels), arel, len(shapes),
                 time.time() - t0), flush=True)
        results[name] = (jp, m1, out, job)
    return results, corpus, tok, cfg_path, init


# ---------------------------------------------------------- 4. pipeline ---

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


def check_pipeline(sn, wd, single, corpus, tok, cfg_path, init):
    jp1, m1, out1, job = single
    jp, _, out = write_job(wd, "lora-nf4-pipe", cfg_path, init, corpus, tok, job["lora"],
                           job.get("base"))
    ports = free_ports(3)
    layers = [[0, 1], [1, 2], [2, 3]]
    cl = {"run": "lora-pipe", "schedule": "1f1b", "timeout_ms": 20000, "wire_dtype": "f32",
          "nodes": [{"name": "n%d" % i, "host": "127.0.0.1", "port": ports[i],
                     "layers": layers[i]} for i in range(3)]}
    clp = os.path.join(wd, "lora-cluster.json")
    with open(clp, "w") as f:
        json.dump(cl, f)
    t0 = time.time()
    procs = []
    for i in range(3):
        m = os.path.join(wd, "lora-pipe-n%d.jsonl" % i)
        procs.append(subprocess.Popen([sn, "train", "--job", jp, "--cluster", clp, "--node",
                                       "n%d" % i, "--metrics", m, "--threads", "1"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    for i, (p, (o, e)) in enumerate(zip(procs, outs)):
        check(p.returncode == 0, "pipeline: node n%d exited %d: %s%s" % (i, p.returncode, o, e))
    want = metric_losses(m1)
    for i in range(3):
        got = metric_losses(os.path.join(wd, "lora-pipe-n%d.jsonl" % i))
        check(got == want, "pipeline: node n%d's losses %s, the single process %s"
              % (i, got[:3], want[:3]))
    single_ad = ref.read_safetensors(os.path.join(out1, "adapter_model.safetensors"))
    seen = set()
    for i in range(3):
        st = ref.read_safetensors(os.path.join(out, "stage-n%d.safetensors" % i))
        for n, a in st.items():
            check(n in single_ad and np.array_equal(a, single_ad[n]),
                  "pipeline: stage n%d's %s differs from the single process" % (i, n))
            seen.add(n)
    check(seen == set(single_ad), "pipeline: the stages hold %d adapters, the single process %d"
          % (len(seen), len(single_ad)))
    print("ok   pipeline: 3 processes (layers 0|1|2, NF4 base, tied head): %d losses and %d "
          "adapters bit-identical to the single process (%.1f s)"
          % (len(want), len(seen), time.time() - t0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--seed", type=int, default=4242)
    args = ap.parse_args()
    sn = os.path.abspath(args.shardnode)
    # Every run starts from an empty workdir: a second run in the same tree
    # appended the resumed run's metrics to the first run's and compared 12
    # losses with 8.
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    torch.set_num_threads(2)
    t0 = time.time()
    try:
        runs, worst = check_gradients(sn, args.workdir, args.seed)
        print("ok   gradients: %d runs, worst relative error %.1e" % (runs, worst))
        check_init_bound()
        print("ok   init: A's bound is torch's kaiming_uniform_(a=sqrt(5)) bound")
        results, corpus, tok, cfg_path, init = check_training(sn, args.workdir, args.seed)
        check_pipeline(sn, args.workdir, results["lora-nf4"], corpus, tok, cfg_path, init)
    except Failure as e:
        print("FAIL " + str(e))
        print("lora_ref: FAILED (%.1f s)" % (time.time() - t0))
        sys.exit(1)
    print("lora_ref: all checks passed (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
