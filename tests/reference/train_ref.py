"""End-to-end test of `shardnode train` on a slice of the King James Bible:
bit-exact resume, crash safety of checkpoints, training against PyTorch, and
the model directory that `generate` reads.

    /usr/bin/python3 tests/reference/train_ref.py --shardnode build/shardnode \
        --workdir DIR [--seed S] [--kills K]

The corpus is Genesis and Exodus (`bible 'Gen1:1-Exo40:38'`, Debian's
bible-kjv, about 380 kB) and the tokenizer is trained on it by
`shardnode tokenizer train --vocab-size 512`. Models are small (hidden 64,
2 layers, 4 query / 2 key-value heads, intermediate 176) and every job has
batch 8 in micro-batches of 4, so gradient accumulation is always in use.
Every shardnode run uses --threads 2. Checks:

1. resume: a job of 2N steps run whole, and run as N steps, then --resume
   for the other N (another out_dir): every metrics line has the same step,
   loss (17 significant digits), lr, tokens and val_loss text; the final
   model.safetensors, config.json and tokenizer.json are byte-identical and
   the final checkpoints hold the same weights and AdamW moments.
2a. a torn checkpoint.safetensors.tmp (what a kill during a checkpoint write
   leaves: writes go to .tmp, then rename) beside the checkpoint of step N:
   --resume continues from step N with the losses of the uninterrupted run.
2b. real SIGKILLs of a running `train` with checkpoint_interval 1 and a model
   whose checkpoint writes take a large share of each step (hidden 128,
   vocab_size 2048: a 10.7 MB checkpoint after every step of 8 x 16 tokens),
   at random moments and at moments when a checkpoint .tmp is being written:
   --resume succeeds from the checkpoint left behind (its step read from the
   file's metadata), and every later loss and val_loss, and the final
   model.safetensors, are bit for bit those of an uninterrupted run; the lines
   the killed run had written are too.
3. PyTorch: the same random initial weights (the job's init_weights), the
   exact batches (`shardnode batches`), float32 llama_ref.py trained with
   torch.optim.AdamW (lr per step as job_lr in node/runtime/job.c, weight decay on
   2-D tensors only), clip_grad_norm_, the loss the mean over the whole
   batch's kept targets. Asserts: the first step's loss agrees to 1e-4
   relative, the validation loss falls on both sides, and shardnode's final
   val_loss is within 3% of torch's on the same validation windows.
4. generate --temperature 0 on the trained out_dir prints the prompt and a
   continuation and exits 0, the same text twice, and the same tokens as
   greedy decoding with llama_ref.py on the exported weights (a difference
   is accepted only at a near tie of the top two logits); model.safetensors
   has exactly the HF names and shapes (read with llama_ref.py) and equals
   the weights of the final checkpoint; config.json and tokenizer.json (BPE)
   are there.

Exits non-zero naming the check that failed.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref  # noqa: E402

PROCESS_TIMEOUT_S = 300
THREADS = "2"
PASSAGE = "Gen1:1-Exo40:38"
VOCAB = 512
FIRST_LOSS_RTOL = 1e-4
VAL_LOSS_RTOL = 0.03
NEAR_TIE = 1e-3          # logit gap under which greedy decoders may disagree


class Failure(Exception):
    pass


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check(cond, msg):
    if not cond:
        raise Failure(msg)


# ------------------------------------------------------------- plumbing ---

def run(cmd, timeout=PROCESS_TIMEOUT_S, ok=True, stdin=None):
    """Runs cmd; returns CompletedProcess (text). ok: a non-zero exit fails."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           input=None if stdin is None else stdin.encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Failure("timed out after %d s: %s" % (timeout, " ".join(cmd)))
    p.stdout = p.stdout.decode(errors="replace")
    p.stderr = p.stderr.decode(errors="replace")
    if ok and p.returncode != 0:
        raise Failure("exit status %d: %s\n  stderr: %s" % (
            p.returncode, " ".join(cmd), p.stderr.strip() or "(empty)"))
    return p


def small_config(**over):
    c = dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
             rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
             max_position_embeddings=128)
    c.update(over)
    return ref.make_config(**c)


class Env:
    def __init__(self, shardnode, workdir):
        self.shardnode = shardnode
        self.workdir = workdir
        self.corpus = os.path.join(workdir, "kjv-gen-exo.txt")
        self.tokenizer = os.path.join(workdir, "tokenizer.json")

    def path(self, *names):
        return os.path.join(self.workdir, *names)

    def metrics(self, name):
        """A metrics file in workdir/metrics, emptied at the start (--resume appends)."""
        return os.path.join(self.workdir, "metrics", name)

    def fresh_dir(self, name):
        d = self.path(name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d

    def write_job(self, name, config_path, out_dir, **over):
        job = {
            "config": config_path,
            "tokenizer": self.tokenizer,
            "data": {"files": [self.corpus], "format": "text", "separator": "\n\n",
                     "val_fraction": 0.05},
            "seq_len": 48, "batch": 8, "micro_batch": 4, "steps": 24,
            "lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 4, "weight_decay": 0.1,
            "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0, "seed": 5,
            "val_interval": 4, "val_batches": 4, "checkpoint_interval": 5,
            "log_interval": 1000, "out_dir": out_dir,
        }
        job.update(over)
        path = self.path(name)
        with open(path, "w") as f:
            json.dump(job, f, indent=2)
            f.write("\n")
        return path, job

    def train(self, job_path, *extra, ok=True):
        return run([self.shardnode, "train", "--job", job_path, "--threads", THREADS]
                   + list(extra), ok=ok)


METRIC_RE = re.compile(r'"(\w+)": ([^,}]+)')
COMPARED = ("step", "loss", "lr", "tokens", "val_loss")


def read_metrics(path, complete_only=False):
    """List of dicts key -> value TEXT (as printed) of a metrics file."""
    out = []
    with open(path) as f:
        for line in f:
            if complete_only and not line.endswith("}\n"):
                break
            d = dict(METRIC_RE.findall(line))
            check("step" in d and "loss" in d, "%s: not a metrics line: %r" % (path, line))
            out.append(d)
    return out


def same_metrics(got, want, what):
    """got and want: lists of metrics dicts, compared as printed."""
    check(len(got) == len(want), "%s: %d metrics lines, expected %d" % (what, len(got), len(want)))
    for g, w in zip(got, want):
        for k in COMPARED:
            check(g.get(k) == w.get(k), "%s: step %s: %s is %s, the uninterrupted run has %s" % (
                what, w["step"], k, g.get(k), w.get(k)))


def same_bytes(a, b, what):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        check(fa.read() == fb.read(), "%s: %s and %s differ" % (what, a, b))


def same_tensors(a, b, what):
    ta, tb = ref.read_safetensors(a), ref.read_safetensors(b)
    check(sorted(ta) == sorted(tb), "%s: tensor names of %s and %s differ" % (what, a, b))
    for name in ta:
        check(ta[name].shape == tb[name].shape and np.array_equal(ta[name], tb[name]),
              "%s: tensor %s differs between %s and %s" % (what, name, a, b))
    return len(ta)


def checkpoint_step(path):
    """The "step" metadata of a checkpoint, read from the header alone."""
    with open(path, "rb") as f:
        head = f.read(8)
        (n,) = struct.unpack("<Q", head)
        header = json.loads(f.read(n).decode())
    return int(header["__metadata__"]["step"])


# ------------------------------------------------------------- 1. resume ---

def check_resume(env, cfg_path):
    n = 12
    full_dir = env.fresh_dir("resume-whole")
    split_dir = env.fresh_dir("resume-split")
    job_full, job = env.write_job("resume-whole.json", cfg_path, full_dir, steps=2 * n)
    job_split, _ = env.write_job("resume-split.json", cfg_path, split_dir, steps=2 * n)
    t0 = time.time()
    env.train(job_full, "--metrics", env.metrics("resume-whole.jsonl"))
    whole = read_metrics(env.metrics("resume-whole.jsonl"))
    env.train(job_split, "--steps", str(n), "--metrics", env.metrics("resume-a.jsonl"))
    check(not os.path.exists(os.path.join(split_dir, "model.safetensors")),
          "resume: a run stopped by --steps wrote model.safetensors")
    check(checkpoint_step(os.path.join(split_dir, "checkpoint.safetensors")) == n,
          "resume: the checkpoint after --steps %d does not say step %d" % (n, n))
    env.train(job_split, "--resume", "--metrics", env.metrics("resume-b.jsonl"))
    first = read_metrics(env.metrics("resume-a.jsonl"))
    second = read_metrics(env.metrics("resume-b.jsonl"))
    check(len(first) == n and second and second[0]["step"] == str(n + 1),
          "resume: the run with --steps %d wrote %d metrics lines, the resumed run started at "
          "step %s" % (n, len(first), second[0]["step"] if second else "(none)"))
    same_metrics(first + second, whole, "resume")
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        same_bytes(os.path.join(split_dir, name), os.path.join(full_dir, name), "resume")
    ntensors = same_tensors(os.path.join(split_dir, "checkpoint.safetensors"),
                            os.path.join(full_dir, "checkpoint.safetensors"), "resume")
    vals = [m["val_loss"] for m in whole if "val_loss" in m]
    check(len(vals) == 2 * n // job["val_interval"],
          "resume: %d val_loss values, expected %d" % (len(vals), 2 * n // job["val_interval"]))
    print("ok   resume: %d steps whole = %d + --resume %d: %d losses, %d val_losses identical "
          "(last loss %s, val_loss %s); model.safetensors byte-identical, checkpoint's "
          "%d tensors equal (%.1f s)" % (2 * n, n, n, len(whole), len(vals), whole[-1]["loss"],
                                         vals[-1], ntensors, time.time() - t0))
    return job_split, split_dir, whole, full_dir


# ----------------------------------------- 2a. a torn checkpoint .tmp file ---

def check_torn_tmp(env, cfg_path, whole, full_dir):
    n = 12
    d = env.fresh_dir("torn-tmp")
    job_path, _ = env.write_job("torn-tmp.json", cfg_path, d, steps=2 * n)
    t0 = time.time()
    env.train(job_path, "--steps", str(n), "--metrics", env.metrics("torn-a.jsonl"))
    ckpt = os.path.join(d, "checkpoint.safetensors")
    before = open(ckpt, "rb").read()
    # What SIGKILL during the next checkpoint write leaves: the start of a
    # newer checkpoint in .tmp (header and part of the data), never renamed.
    newer = open(os.path.join(full_dir, "checkpoint.safetensors"), "rb").read()
    torn = newer[:len(newer) * 2 // 5]
    with open(ckpt + ".tmp", "wb") as f:
        f.write(torn)
    check(checkpoint_step(ckpt) == n, "torn .tmp: checkpoint does not say step %d" % n)
    env.train(job_path, "--resume", "--metrics", env.metrics("torn-b.jsonl"))
    second = read_metrics(env.metrics("torn-b.jsonl"))
    check(second and second[0]["step"] == str(n + 1),
          "torn .tmp: --resume beside a torn checkpoint.safetensors.tmp did not continue "
          "after step %d (first step %s)" % (n, second[0]["step"] if second else "(none)"))
    same_metrics(read_metrics(env.metrics("torn-a.jsonl")) + second, whole, "torn .tmp")
    same_bytes(os.path.join(d, "model.safetensors"), os.path.join(full_dir, "model.safetensors"),
               "torn .tmp")
    check(not os.path.exists(ckpt + ".tmp"),
          "torn .tmp: checkpoint.safetensors.tmp is still there after later checkpoints")
    print("ok   torn .tmp: checkpoint of step %d (%d bytes) beside a %d-byte torn "
          "checkpoint.safetensors.tmp: --resume continued after step %d, losses and "
          "model.safetensors equal the uninterrupted run's (%.1f s)"
          % (n, len(before), len(torn), n, time.time() - t0))


# ------------------------------------------------------------ 2b. SIGKILL ---

def wait_for(pred, proc, timeout):
    """Polls pred() until true; False if proc exits or timeout passes."""
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        if proc.poll() is not None:
            return pred()
        time.sleep(0.0005)
    return False


def check_sigkill(env, rng, kills):
    cfg = small_config(hidden_size=128, intermediate_size=344, vocab_size=2048)
    cfg_path = env.path("kill-config.json")
    ref.save_config(cfg, cfg_path)
    steps = 16
    over = dict(steps=steps, seq_len=16, checkpoint_interval=1, val_interval=4)
    ref_dir = env.fresh_dir("kill-whole")
    job_ref, _ = env.write_job("kill-whole.json", cfg_path, ref_dir, **over)
    t0 = time.time()
    env.train(job_ref, "--metrics", env.metrics("kill-whole.jsonl"))
    duration = time.time() - t0
    whole = read_metrics(env.metrics("kill-whole.jsonl"))
    ckpt_bytes = os.path.getsize(os.path.join(ref_dir, "checkpoint.safetensors"))
    # The share of a step spent writing the checkpoint, for the report.
    nockpt_dir = env.fresh_dir("kill-nockpt")
    job_nockpt, _ = env.write_job("kill-nockpt.json", cfg_path, nockpt_dir,
                                  **dict(over, checkpoint_interval=0, val_interval=0))
    env.train(job_nockpt)   # builds its data cache
    os.remove(os.path.join(nockpt_dir, "checkpoint.safetensors"))
    t1 = time.time()
    env.train(job_nockpt)
    bare = time.time() - t1
    print("     sigkill: uninterrupted run %d steps in %.2f s with a %.1f MB checkpoint every "
          "step, %.2f s without checkpoints" % (steps, duration, ckpt_bytes / 1e6, bare))

    torn_kills = 0
    for trial in range(kills):
        d = env.fresh_dir("kill-%d" % trial)
        job_path, _ = env.write_job("kill-%d.json" % trial, cfg_path, d, **over)
        ckpt = os.path.join(d, "checkpoint.safetensors")
        killed_log = env.metrics("kill-%d-killed.jsonl" % trial)
        mode = "mid-write" if trial % 2 == 0 else "random"
        with open(env.path("kill-%d.stdout" % trial), "wb") as out:
            started = time.time()
            proc = subprocess.Popen([env.shardnode, "train", "--job", job_path, "--threads",
                                     THREADS, "--metrics", killed_log],
                                    stdout=out, stderr=subprocess.PIPE)
            try:
                if not wait_for(lambda: os.path.exists(ckpt), proc, PROCESS_TIMEOUT_S):
                    proc.kill()
                    raise Failure("sigkill: trial %d: no checkpoint appeared" % trial)
                time.sleep(rng.uniform(0.0, 0.6 * duration))
                if mode == "mid-write":
                    # Kill as soon as a .tmp is seen, or a little later
                    # (within a quarter of one checkpoint write).
                    wait_for(lambda: os.path.exists(ckpt + ".tmp"), proc, duration)
                    if trial % 4 == 2:
                        time.sleep(rng.uniform(0.0, 0.25 * max(duration - bare, 0) / steps))
                when = time.time()
                finished = proc.poll() is not None
                if not finished:
                    proc.send_signal(signal.SIGKILL)
            finally:
                _, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
        check(proc.returncode in (0, -signal.SIGKILL),
              "sigkill: trial %d: exit status %s, stderr: %s"
              % (trial, proc.returncode, err.decode(errors="replace").strip()))
        finished = proc.returncode == 0   # it may have ended just before the kill
        tmp_left = os.path.getsize(ckpt + ".tmp") if os.path.exists(ckpt + ".tmp") else None
        torn_kills += tmp_left is not None
        at = checkpoint_step(ckpt)
        done_lines = read_metrics(killed_log, complete_only=True)
        same_metrics(done_lines, whole[:len(done_lines)], "sigkill trial %d (killed run)" % trial)
        resumed_log = env.metrics("kill-%d-resumed.jsonl" % trial)
        # The resumed run's metrics must start at step at + 1.
        env.train(job_path, "--resume", "--metrics", resumed_log)
        same_metrics(read_metrics(resumed_log), whole[at:], "sigkill trial %d (resumed)" % trial)
        same_bytes(os.path.join(d, "model.safetensors"),
                   os.path.join(ref_dir, "model.safetensors"), "sigkill trial %d" % trial)
        print("ok   sigkill trial %d (%s): %s %.2f s after start, checkpoint of step %d, "
              "%s; --resume: steps %d-%d bit-identical, model.safetensors identical"
              % (trial, mode, "finished before the kill," if finished else "killed",
                 when - started, at,
                 "a .tmp of %d of %d bytes left" % (tmp_left, ckpt_bytes)
                 if tmp_left is not None else "no .tmp left", at + 1, steps))
    print("ok   sigkill: %d kills, %d during a checkpoint write (a .tmp left behind)"
          % (kills, torn_kills))


# ------------------------------------------------------------ 3. PyTorch ---

def job_lr(job, step):
    """node/runtime/job.c job_lr: linear warm-up, then cosine to min_lr at the last step."""
    lr, min_lr, warm, steps = job["lr"], job["min_lr"], job["warmup_steps"], job["steps"]
    if step < warm:
        return lr * (step + 1) / warm
    span = steps - warm
    progress = (step - warm) / (span - 1) if span > 1 else 1.0
    progress = min(progress, 1.0)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + np.cos(np.pi * progress))


def torch_val_loss(params, cfg, vids, vlabels):
    with torch.no_grad():
        logits = ref.llama_forward(params, cfg, torch.from_numpy(vids))
        lab = torch.from_numpy(vlabels).long().reshape(-1)
        per = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab,
                                                ignore_index=ref.IGNORE_INDEX,
                                                reduction="none")
        return float(per.double().sum() / (lab != ref.IGNORE_INDEX).sum())


def check_torch(env, cfg, cfg_path, seed, name="torch", steps=80, val_interval=20):
    d = env.fresh_dir(name)
    init = ref.random_params(cfg, np.random.default_rng(seed), std=0.02, norm_spread=0.1)
    init_path = env.path(name + "-init.safetensors")
    ref.write_safetensors(init_path, init)
    job_path, job = env.write_job(name + ".json", cfg_path, d, steps=steps, warmup_steps=8,
                                  val_interval=val_interval, checkpoint_interval=0, seed=11,
                                  init_weights=init_path)
    B, T = job["batch"], job["seq_len"]

    t0 = time.time()
    batches_path = env.path(name + "-batches.safetensors")
    run([env.shardnode, "batches", "--job", job_path, "--out", batches_path])
    b = ref.read_safetensors(batches_path)
    ids, labels = b["input_ids"], b["labels"]
    vids, vlabels = b["val_input_ids"], b["val_labels"]
    check(ids.dtype == np.int32 and ids.shape == (steps * B, T) and labels.shape == ids.shape,
          "batches: input_ids %s %s, expected int32 %s" % (ids.dtype, ids.shape, (steps * B, T)))
    check(vids.shape == (job["val_batches"] * job["micro_batch"], T) and
          vlabels.shape == vids.shape,
          "batches: val_input_ids has shape %s, expected %s" % (
              vids.shape, (job["val_batches"] * job["micro_batch"], T)))
    check(np.array_equal(labels[:, :-1], ids[:, 1:]) and np.array_equal(vlabels[:, :-1],
                                                                          vids[:, 1:]),
          "batches: labels are not the next tokens of input_ids")
    check(ids.min() >= 0 and ids.max() < VOCAB, "batches: token ids outside [0, %d)" % VOCAB)

    t1 = time.time()
    env.train(job_path, "--metrics", env.metrics(name + "-shardnode.jsonl"))
    sn_time = time.time() - t1
    sn = read_metrics(env.metrics(name + "-shardnode.jsonl"))
    check(len(sn) == steps, "torch: shardnode wrote %d metrics lines, expected %d"
          % (len(sn), steps))
    for i, m in enumerate(sn):
        want = job_lr(job, i)
        check(int(m["step"]) == i + 1 and abs(float(m["lr"]) - want) <= 1e-5 * want,
              "torch: shardnode step %s has lr %s, job_lr gives %.6g" % (m["step"], m["lr"],
                                                                       want))

    t2 = time.time()
    torch.manual_seed(0)
    params = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in init.items()}
    decay = [p for p in params.values() if p.dim() == 2]
    no_decay = [p for p in params.values() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": job["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=job["lr"], betas=(job["beta1"], job["beta2"]), eps=job["eps"])
    th_loss, th_val = [], {}
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = job_lr(job, step)
        opt.zero_grad(set_to_none=True)
        rows = slice(step * B, (step + 1) * B)
        loss = ref.llama_loss(params, cfg, torch.from_numpy(ids[rows]),
                              torch.from_numpy(labels[rows]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), job["grad_clip"])
        opt.step()
        th_loss.append(float(loss.item()))
        done = step + 1
        if done % val_interval == 0 or done == steps:
            th_val[done] = torch_val_loss(params, cfg, vids, vlabels)
    th_time = time.time() - t2

    sn_loss = [float(m["loss"]) for m in sn]
    sn_val = {int(m["step"]): float(m["val_loss"]) for m in sn if "val_loss" in m}
    check(sorted(sn_val) == sorted(th_val),
          "torch: shardnode measured val_loss at steps %s, expected %s"
          % (sorted(sn_val), sorted(th_val)))
    print("     step   shardnode loss   torch loss     rel diff |  val: shardnode   torch")
    for s in sorted(set([1, 2, 5, 10, 20, 40, 60, steps]) | set(th_val)):
        if s > steps:
            continue
        line = "     %4d   %14.8f   %10.8f   %10.2e" % (
            s, sn_loss[s - 1], th_loss[s - 1],
            abs(sn_loss[s - 1] - th_loss[s - 1]) / th_loss[s - 1])
        if s in th_val:
            line += " |  %12.7f %10.7f" % (sn_val[s], th_val[s])
        print(line)
    rel0 = abs(sn_loss[0] - th_loss[0]) / abs(th_loss[0])
    check(rel0 <= FIRST_LOSS_RTOL, "torch: first step loss: shardnode %.9g, torch %.9g, rel "
          "%.2e > %.0e" % (sn_loss[0], th_loss[0], rel0, FIRST_LOSS_RTOL))
    first, last = min(th_val), steps
    check(sn_val[last] < sn_val[first], "torch: shardnode's val_loss did not fall: %.6f at step "
          "%d, %.6f at step %d" % (sn_val[first], first, sn_val[last], last))
    check(th_val[last] < th_val[first], "torch: torch's val loss did not fall: %.6f at step %d, "
          "%.6f at step %d" % (th_val[first], first, th_val[last], last))
    ratio = sn_val[last] / th_val[last]
    check(abs(ratio - 1.0) <= VAL_LOSS_RTOL,
          "torch: final val loss shardnode %.6f, torch %.6f: ratio %.4f, more than %.0f%% apart"
          % (sn_val[last], th_val[last], ratio, 100 * VAL_LOSS_RTOL))
    w = ref.read_safetensors(os.path.join(d, "model.safetensors"))
    wdiff = max(float(np.max(np.abs(w[k] - params[k].detach().numpy()))) / max(
        float(np.max(np.abs(params[k].detach().numpy()))), 1e-30) for k in params)
    print("ok   torch: %d steps of batch %dx%d (micro-batch %d): first loss rel diff %.1e; "
          "val_loss %.6f -> %.6f (shardnode), %.6f -> %.6f (torch); final ratio %.7f; "
          "weights max rel diff %.1e; shardnode %.1f s, torch %.1f s, batches %.1f s"
          % (steps, B, T, job["micro_batch"], rel0, sn_val[first], sn_val[last], th_val[first],
             th_val[last], ratio, wdiff, sn_time, th_time, t1 - t0))
    return d


# ----------------------------------------------- 4. the model directory ---

def greedy_torch(params, cfg, prompt_ids, ntokens, vtok, eos):
    """Greedy continuation: (ids, smallest top-2 logit gap at each step)."""
    seq, gen, gaps = list(prompt_ids), [], []
    with torch.no_grad():
        for _ in range(ntokens):
            logits = ref.llama_forward(params, cfg, torch.tensor([seq]))[0, -1, :vtok]
            top = torch.topk(logits, 2)
            gaps.append(float(top.values[0] - top.values[1]))
            nxt = int(torch.argmax(logits))
            if nxt == eos:
                break
            gen.append(nxt)
            seq.append(nxt)
    return gen, gaps


def check_model_dir(env, cfg, out_dir):
    t0 = time.time()
    model = os.path.join(out_dir, "model.safetensors")
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        check(os.path.isfile(os.path.join(out_dir, name)), "model dir: %s has no %s"
              % (out_dir, name))
    w = ref.read_safetensors(model)
    shapes = ref.param_shapes(cfg)
    check(sorted(w) == sorted(shapes), "model dir: %s has tensors %s, expected the HF names %s"
          % (model, sorted(set(w) ^ set(shapes)), sorted(shapes)))
    for name, shape in shapes.items():
        check(w[name].dtype == np.float32 and w[name].shape == tuple(shape),
              "model dir: %s: %s is %s %s, expected float32 %s" % (
                  model, name, w[name].dtype, w[name].shape, tuple(shape)))
        check(np.all(np.isfinite(w[name])), "model dir: %s: %s is not finite" % (model, name))
    ckpt = ref.read_safetensors(os.path.join(out_dir, "checkpoint.safetensors"))
    for name in shapes:
        check(np.array_equal(ckpt[name], w[name]), "model dir: %s differs from the final "
              "checkpoint's %s" % (model, name))
    saved = ref.load_config(os.path.join(out_dir, "config.json"))
    for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "vocab_size", "tie_word_embeddings"):
        check(saved.get(k) == cfg[k], "model dir: config.json has %s = %r, expected %r"
              % (k, saved.get(k), cfg[k]))
    check("LlamaForCausalLM" in saved.get("architectures", []),
          "model dir: config.json does not name LlamaForCausalLM")
    with open(os.path.join(out_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    check(tok.get("model", {}).get("type") == "BPE", "model dir: tokenizer.json is not BPE")
    ids = list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]
    vtok = max(ids) + 1
    eos = next((t["id"] for t in tok.get("added_tokens", [])
                if t["content"] == "<|endoftext|>"), -1)

    prompt, ntokens = "And God said", 24
    cmd = [env.shardnode, "generate", "--model", out_dir, "--prompt", prompt, "--tokens",
           str(ntokens), "--temperature", "0", "--threads", THREADS]
    p = run(cmd)
    text = p.stdout
    check(text.startswith(prompt) and text.endswith("\n") and text[len(prompt):].strip(),
          "generate: output is not the prompt followed by text: %r" % text)
    again = run(cmd).stdout
    check(again == text, "generate: --temperature 0 gave two different texts:\n%r\n%r"
          % (text, again))

    tok_path = os.path.join(out_dir, "tokenizer.json")
    enc = run([env.shardnode, "tokenizer", "encode", "--tokenizer", tok_path, "--special"],
              stdin=prompt).stdout
    prompt_ids = [int(x) for x in enc.split()]
    params = {k: torch.from_numpy(v) for k, v in w.items()}
    gen, gaps = greedy_torch(params, cfg, prompt_ids, ntokens, vtok, eos)

    def decode(toks):
        return run([env.shardnode, "tokenizer", "decode", "--tokenizer", tok_path],
                   stdin=" ".join(map(str, toks))).stdout

    expect = prompt + decode(gen) + "\n"
    note = "the same text as greedy decoding in torch"
    if text != expect:
        tie = next((k for k, g in enumerate(gaps) if g < NEAR_TIE), None)
        check(tie is not None and text.startswith(prompt + decode(gen[:tie])),
              "generate: --temperature 0 printed %r, greedy decoding in torch gives %r "
              "(smallest top-2 logit gap %.2e)" % (text, expect, min(gaps)))
        note = "agrees with torch's greedy decoding up to a near tie at token %d" % tie
    print("ok   model dir: model.safetensors has the %d HF tensors (= final checkpoint), "
          "config.json, tokenizer.json (BPE, %d tokens); generate: %r, %s (%.1f s)"
          % (len(shapes), vtok, text.rstrip("\n"), note, time.time() - t0))


# ------------------------------------------------------------------ main ---

def prepare(env):
    bible = shutil.which("bible")
    check(bible is not None, "the `bible` command is missing: install Debian's bible-kjv "
          "(scripts/deps.sh)")
    p = run([bible, PASSAGE])
    check(len(p.stdout) > 100000, "`bible %s` printed only %d bytes" % (PASSAGE, len(p.stdout)))
    with open(env.corpus, "w") as f:
        f.write(p.stdout)
    run([env.shardnode, "tokenizer", "train", "--input", env.corpus, "--vocab-size", str(VOCAB),
         "--out", env.tokenizer])
    return len(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardnode", required=True, help="path of the shardnode binary")
    ap.add_argument("--workdir", required=True, help="directory for the generated files")
    ap.add_argument("--seed", type=int, default=20240501,
                    help="seed of the initial weights and of the kill moments")
    ap.add_argument("--kills", type=int, default=5, help="SIGKILL trials")
    args = ap.parse_args()

    shardnode = os.path.abspath(args.shardnode)
    if not os.access(shardnode, os.X_OK):
        sys.exit("train_ref: %s is not an executable file" % shardnode)
    os.makedirs(args.workdir, exist_ok=True)
    env = Env(shardnode, os.path.abspath(args.workdir))
    torch.set_num_threads(int(THREADS))
    env.fresh_dir("metrics")
    t0 = time.time()
    try:
        nbytes = prepare(env)
        print("     corpus: `bible '%s'`, %d bytes; tokenizer: %d tokens; seed %d"
              % (PASSAGE, nbytes, VOCAB, args.seed))
        cfg = small_config()
        cfg_path = env.path("config.json")
        ref.save_config(cfg, cfg_path)
        _, _, whole, full_dir = check_resume(env, cfg_path)
        check_torn_tmp(env, cfg_path, whole, full_dir)
        check_sigkill(env, random.Random(args.seed), args.kills)
        out_dir = check_torch(env, cfg, cfg_path, args.seed)
        check_model_dir(env, cfg, out_dir)
        # the shipped demo model (configs/kjv), on a short run of the same corpus
        kjv_path = os.path.join(REPO, "configs", "kjv", "config.json")
        check_torch(env, ref.load_config(kjv_path), kjv_path, args.seed, name="torch-kjv",
                    steps=60, val_interval=20)
    except Failure as e:
        print("FAIL " + str(e))
        print("train_ref: FAILED (%.1f s)" % (time.time() - t0))
        sys.exit(1)
    print("train_ref: all checks passed (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
