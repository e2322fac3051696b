"""`shardnode train` against PyTorch: the same model, the same batches, the
same initial weights, the same threads, in the same run.

    /usr/bin/python3 bench/train_vs_torch.py [--shardnode build/shardnode]
                                             [--rounds 5] [--steps 30]
                                             [--workdir /tmp/shardnode-bench-train]

Model: configs/kjv/config.json (hidden 256, 4 layers, 8 heads with 4 KV
heads, intermediate 688, vocab 2048), batch 16 x sequence 128, fp32, 2
threads, trained on the King James Bible (Debian's bible-kjv) with a 2048-token
tokenizer, the hyperparameters of configs/kjv/job.json and no validation or
checkpoints between steps. Each round runs `shardnode train` for K steps,
then PyTorch for K steps on the batches `shardnode batches` says the job
trains on, both from the same initial weights; R rounds interleave the two
sides so that a noisy neighbour affects both alike. The first step of each
side in each round is a warm-up and is not counted; figures are medians over
the other steps. Not part of the pass/fail suite: it prints figures, it never
fails on them.
"""

import os

import sys

# torch_env sets the baseline's environment (OMP_WAIT_POLICY,
# OPENBLAS_CORETYPE): it must come before torch is imported.

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_env import child_env  # noqa: E402  (sets torch's environment first)
import benchlib  # noqa: E402
from benchlib import bench_parser, die, kjv_corpus_and_tokenizer  # noqa: E402

import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import llama_ref as ref  # noqa: E402

CONFIG = os.path.join(REPO, "configs", "kjv", "config.json")
VOCAB = 2048
INIT_SEED = 1

# The job: configs/kjv/job.json's hyperparameters, with no validation and no
# checkpoints between steps. "steps" is the length of the LR schedule; the
# script stops each run after K steps with --steps K (K < steps, so the run
# ends with the one checkpoint train always writes when it stops, outside
# the timed steps, and without the end-of-job validation and export).
JOB = {
    "seq_len": 128,
    "batch": 16,
    "micro_batch": 16,
    "steps": 600,
    "lr": 0.003,
    "min_lr": 0.0003,
    "warmup_steps": 30,
    "weight_decay": 0.1,
    "beta1": 0.9,
    "beta2": 0.95,
    "eps": 1e-8,
    "grad_clip": 1.0,
    "seed": 1,
    "val_interval": 0,
    "val_batches": 8,
    "checkpoint_interval": 0,
    "log_interval": 1000000,
}



def run(cmd, timeout, cwd):
    """shardnode without torch's OMP_WAIT_POLICY (see torch_env.py)."""
    return benchlib.run(cmd, timeout, cwd, child_env())


def job_lr(job, step):
    """node/runtime/job.c job_lr: linear warm-up, then cosine to min_lr (0-based step)."""
    lr, min_lr, warm, steps = job["lr"], job["min_lr"], job["warmup_steps"], job["steps"]
    if step < warm:
        return lr * (step + 1) / warm
    span = steps - warm
    progress = (step - warm) / (span - 1) if span > 1 else 1.0
    progress = min(progress, 1.0)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def prepare(args, shardnode):
    """Corpus, tokenizer, initial weights, job and batches in the work dir.
    The corpus and tokenizer are kept between runs; the rest is rewritten."""
    wd = args.workdir
    corpus, tok = kjv_corpus_and_tokenizer(wd, shardnode, VOCAB, child_env())

    cfg = ref.load_config(CONFIG)
    init = {name: t.detach().numpy()
            for name, t in ref.init_torch_params(cfg, std=0.02, dtype=torch.float32,
                                                 seed=INIT_SEED).items()}
    init_path = os.path.join(wd, "init.safetensors")
    ref.write_safetensors(init_path, init)

    job = dict(JOB)
    job["steps"] = max(job["steps"], args.steps + 1)
    job.update({
        "config": CONFIG,
        "init_weights": init_path,
        "tokenizer": tok,
        "data": {"files": [corpus], "format": "text", "separator": "\n\n",
                 "val_fraction": 0.02},
        "out_dir": os.path.join(wd, "out"),
    })
    job_path = os.path.join(wd, "job.json")
    with open(job_path, "w") as f:
        json.dump(job, f, indent=2)
        f.write("\n")

    batches_path = os.path.join(wd, "batches.safetensors")
    run([shardnode, "batches", "--job", job_path, "--steps", str(args.steps),
         "--out", batches_path], 600, wd)
    b = ref.read_safetensors(batches_path)
    B, T = job["batch"], job["seq_len"]
    if b["input_ids"].shape != (args.steps * B, T):
        die("%s: input_ids has shape %s, expected %s"
            % (batches_path, b["input_ids"].shape, (args.steps * B, T)))
    ids = torch.from_numpy(b["input_ids"].astype("int64")).view(args.steps, B, T)
    labels = torch.from_numpy(b["labels"].astype("int64")).view(args.steps, B, T)
    return cfg, job, job_path, init, ids, labels


def shardnode_round(shardnode, job_path, args):
    """K steps of `shardnode train`; returns the metrics lines, in order."""
    metrics = os.path.join(args.workdir, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    run([shardnode, "train", "--job", job_path, "--steps", str(args.steps),
         "--metrics", metrics, "--threads", str(args.threads)], 3600, args.workdir)
    with open(metrics) as f:
        steps = [json.loads(l) for l in f if l.strip()]
    if [s.get("step") for s in steps] != list(range(1, args.steps + 1)):
        die("%s: expected steps 1..%d, got %s"
            % (metrics, args.steps, [s.get("step") for s in steps]))
    return steps


def torch_round(cfg, job, init, ids, labels):
    """K steps of the reference model in float32 from the initial weights,
    on the same batches, with the job's AdamW (weight decay on matrices
    only, as shardnode), LR schedule and clipping. Returns [(step_ms, loss)]."""
    params = ref.to_torch_params(init, dtype=torch.float32)
    plist = list(params.values())
    decay = [p for p in plist if p.dim() >= 2]
    no_decay = [p for p in plist if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": job["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=job["lr"], betas=(job["beta1"], job["beta2"]), eps=job["eps"])
    out = []
    for step in range(ids.shape[0]):
        t0 = time.perf_counter()
        lr = job_lr(job, step)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss = ref.llama_loss(params, cfg, ids[step], labels[step])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, job["grad_clip"])
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        out.append((ms, float(loss.item())))
    return out


def main():
    ap = bench_parser(__doc__, 5)
    ap.add_argument("--steps", type=int, default=30,
                    help="steps per side per round (K, >= 2; the first is a warm-up)")
    ap.add_argument("--workdir", default="/tmp/shardnode-bench-train",
                    help="corpus, tokenizer, job, batches and outputs")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.steps < 2:
        die("--steps must be at least 2 (the first step of each round is a warm-up)")
    if args.rounds < 1:
        die("--rounds must be at least 1")
    shardnode = os.path.abspath(args.shardnode)
    args.workdir = os.path.abspath(args.workdir)
    if not os.access(shardnode, os.X_OK):
        die("%s is not an executable file (build it first)" % shardnode)

    torch.set_num_threads(args.threads)
    cfg, job, job_path, init, ids, labels = prepare(args, shardnode)
    B, T = job["batch"], job["seq_len"]

    print("model configs/kjv/config.json: hidden %d, layers %d, heads %d (KV %d), "
          "intermediate %d, vocab %d"
          % (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
             cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["vocab_size"]))
    print("job %s: KJV, batch %d x seq %d, %d threads, %d rounds x %d steps per side "
          "(first of each not counted)" % (job_path, B, T, args.threads, args.rounds, args.steps))
    print("torch %s; OMP_WAIT_POLICY=PASSIVE for torch only; OPENBLAS_CORETYPE=%s for both"
          % (torch.__version__, os.environ.get("OPENBLAS_CORETYPE", "(unset)")), flush=True)

    sn_tps, th_tps = [], []
    sn_first = th_first = sn_last = th_last = None
    for r in range(args.rounds):
        steps = shardnode_round(shardnode, job_path, args)
        sn = [float(s["tokens_per_s"]) for s in steps[1:]]
        sn_first, sn_last = float(steps[0]["loss"]), float(steps[-1]["loss"])
        th_steps = torch_round(cfg, job, init, ids, labels)
        th = [B * T / ms * 1e3 for ms, _ in th_steps[1:]]
        th_first, th_last = th_steps[0][1], th_steps[-1][1]
        sn_tps += sn
        th_tps += th
        print("round %d: shardnode tokens/s median %.0f (%.0f..%.0f) | "
              "torch tokens/s median %.0f (%.0f..%.0f)"
              % (r + 1, statistics.median(sn), min(sn), max(sn),
                 statistics.median(th), min(th), max(th)), flush=True)

    sn_med = statistics.median(sn_tps)
    th_med = statistics.median(th_tps)
    print()
    for name, tps in (("shardnode", sn_med), ("torch", th_med)):
        print("%-10s %8.1f tokens/s  %6.1f ms/step  (median of %d steps)"
              % (name, tps, B * T / tps * 1e3, len(sn_tps)))
    print("ratio shardnode / torch: %.2f" % (sn_med / th_med))
    print("same initial weights and batches; loss of the last round's steps:")
    for step, sn_l, th_l in ((1, sn_first, th_first), (args.steps, sn_last, th_last)):
        print("  step %-4d shardnode %.6f  torch %.6f  (|diff| %.2e)"
              % (step, sn_l, th_l, abs(sn_l - th_l)))


if __name__ == "__main__":
    main()
