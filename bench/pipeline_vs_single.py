"""A 2-stage 1F1B pipeline of two `shardnode train --cluster` processes on
loopback against one `shardnode train` process, in the same run.

    /usr/bin/python3 bench/pipeline_vs_single.py [--shardnode build/shardnode]
                                                 [--rounds 3] [--steps 40]
                                                 [--workdir /tmp/shardnode-bench-pipeline]

Model configs/kjv/config.json (hidden 256, 4 layers, vocab 2048), batch 16 x
sequence 128 cut into 8 micro-batches of 2, fp32, the hyperparameters of
configs/kjv/job.json with no validation and no checkpoints between steps,
trained on the King James Bible (Debian's bible-kjv) with a 2048-token
tokenizer. The two sides:

- single: `shardnode train --job job-single.json --threads 2`: one process,
  2 threads, the 8 micro-batches one after the other;
- pipeline: `shardnode train --job job-pipe.json --cluster cluster.json
  --node a|b --threads 1`: node a holds the embedding and layers [0, 2),
  node b layers [2, 4), the final norm, the head and the loss, under 1F1B,
  activations and gradients in f32 over 127.0.0.1.

Each round runs both sides for K steps (the order alternates between rounds
so that drift hurts both alike); the first W steps of each run are a
warm-up. Figures are medians of the per-step tokens/s of the metrics files
(node a's for the pipeline: its step runs from reading the batch to the last
stage's commit). Both sides train the same tokens from the same seeded
initial weights, and the pipeline adds in the same order as one process: the
script checks that every step's loss is bit-identical on both nodes and the
single process. Not part of the pass/fail suite: it prints figures, it never
fails on them (it exits non-zero only when a run fails).
"""

import json
import os
import signal
import statistics
import subprocess
import time

from benchlib import bench_parser, die, free_ports, kjv_corpus_and_tokenizer, run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "configs", "kjv", "config.json")
VOCAB = 2048
STAGES = [("a", [0, 2]), ("b", [2, 4])]

# configs/kjv/job.json's hyperparameters with 8 micro-batches of 2 and no
# validation or checkpoints between steps. "steps" is the length of the LR
# schedule (the demo's 600); each run stops after K steps with --steps K, so
# it ends without the end-of-job validation and export (the single process
# writes the one checkpoint train always writes when it stops, outside the
# timed steps).
JOB = {
    "seq_len": 128,
    "batch": 16,
    "micro_batch": 2,
    "steps": 600,
    "lr": 0.003,
    "min_lr": 0.0003,
    "warmup_steps": 30,
    "weight_decay": 0.1,
    "grad_clip": 1.0,
    "seed": 1,
    "val_interval": 0,
    "val_batches": 8,
    "checkpoint_interval": 0,
    "log_interval": 1000000,
}


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def prepare(args, shardnode):
    """Corpus and tokenizer (kept between runs), the two jobs."""
    wd = args.workdir
    corpus, tok = kjv_corpus_and_tokenizer(wd, shardnode, VOCAB)
    jobs = {}
    for side in ("single", "pipe"):
        job = dict(JOB)
        job["steps"] = max(job["steps"], args.steps)
        job.update({
            "config": CONFIG,
            "tokenizer": tok,
            "data": {"files": [corpus], "format": "text", "separator": "\n\n",
                     "val_fraction": 0.02},
            "out_dir": os.path.join(wd, "out-" + side),
        })
        jobs[side] = os.path.join(wd, "job-%s.json" % side)
        write_json(jobs[side], job)
    return jobs


def read_metrics(path, steps):
    try:
        with open(path) as f:
            lines = [json.loads(l) for l in f if l.strip()]
    except (OSError, ValueError) as e:
        die("%s: %s" % (path, e))
    if [s.get("step") for s in lines] != list(range(1, steps + 1)):
        die("%s: expected steps 1..%d, got %s" % (path, steps, [s.get("step") for s in lines]))
    return lines


def single_round(shardnode, job, args, tag, threads):
    metrics = os.path.join(args.workdir, "single-%s.jsonl" % tag)
    run([shardnode, "train", "--job", job, "--steps", str(args.steps), "--metrics", metrics,
         "--threads", str(threads)], 3600, args.workdir)
    return read_metrics(metrics, args.steps)


def pipeline_round(shardnode, job, args, r):
    """Both nodes of the 2-stage pipeline at once; returns {node: metrics}."""
    wd = args.workdir
    ports = free_ports(len(STAGES))
    cluster = os.path.join(wd, "cluster-r%d.json" % r)
    write_json(cluster, {
        "run": "bench-pipeline-r%d" % r,
        "schedule": "1f1b",
        "wire_dtype": "f32",
        "timeout_ms": 60000,
        "nodes": [{"name": name, "host": "127.0.0.1", "port": port, "layers": layers}
                  for (name, layers), port in zip(STAGES, ports)],
    })
    procs, paths = {}, {}
    per_node = max(1, args.threads // len(STAGES))
    for name, _ in STAGES:
        paths[name] = os.path.join(wd, "pipe-r%d-%s.jsonl" % (r, name))
        cmd = [shardnode, "train", "--job", job, "--cluster", cluster, "--node", name,
               "--steps", str(args.steps), "--metrics", paths[name], "--threads", str(per_node)]
        try:
            procs[name] = subprocess.Popen(cmd, cwd=wd, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE)
        except OSError as e:
            die("cannot run %s: %s" % (shardnode, e))
    outs, failed = {}, []
    deadline = time.time() + 3600
    for name, p in procs.items():
        try:
            o, e = p.communicate(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs.values():
                if q.poll() is None:
                    q.send_signal(signal.SIGKILL)
            o, e = p.communicate()
            failed.append(name)
        outs[name] = (o.decode(errors="replace"), e.decode(errors="replace"))
        if p.returncode != 0:
            failed.append(name)
    if failed:
        die("pipeline round %d: node(s) %s failed:\n%s" % (
            r + 1, ", ".join(sorted(set(failed))),
            "\n".join("--- node %s (exit %s)\n%s%s" % (n, procs[n].returncode, o, e)
                      for n, (o, e) in outs.items())))
    return {name: read_metrics(paths[name], args.steps) for name, _ in STAGES}


def stage_flops(cfg, T):
    """Model FLOPs per token of each stage (bench/README.md's formula, cut
    at the stages' layer ranges): 6 x matmul parameters + 6 x T x C per
    layer for attention; the head on the last stage."""
    C, I = cfg["hidden_size"], cfg["intermediate_size"]
    hd = C // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    layer = 6 * (C * C + 2 * C * kv + C * C + 3 * C * I) + 6 * T * C
    head = 6 * C * cfg["vocab_size"]
    out = []
    for i, (_, (lo, hi)) in enumerate(STAGES):
        out.append(layer * (hi - lo) + (head if i == len(STAGES) - 1 else 0))
    return out


def compare_losses(single, pipe):
    """Every step's loss of both nodes against a single-process run: returns
    (identical, worst relative difference, the first differing step or None)."""
    worst, first_bad = 0.0, None
    for name, steps in pipe.items():
        for a, b in zip(steps, single):
            la, lb = float(a["loss"]), float(b["loss"])
            if la != lb:
                worst = max(worst, abs(la - lb) / abs(lb))
                if first_bad is None:
                    first_bad = "step %d: node %s %.17g, single %.17g" % (b["step"], name, la, lb)
    return first_bad is None, worst, first_bad


def main():
    ap = bench_parser(__doc__, 3)
    ap.add_argument("--steps", type=int, default=40, help="steps per side per round (K)")
    ap.add_argument("--warmup", type=int, default=3,
                    help="first steps of each run not counted (W, < K)")
    ap.add_argument("--workdir", default="/tmp/shardnode-bench-pipeline",
                    help="corpus, tokenizer, jobs, cluster files, metrics and outputs")
    ap.add_argument("--threads", type=int, default=2,
                    help="threads of the single process; each of the 2 nodes gets half")
    args = ap.parse_args()
    if args.rounds < 1:
        die("--rounds must be at least 1")
    if args.warmup < 0 or args.steps <= args.warmup:
        die("--steps must be more than --warmup (%d)" % args.warmup)
    if args.threads < 2:
        die("--threads must be at least 2 (each pipeline node gets half)")
    shardnode = os.path.abspath(args.shardnode)
    args.workdir = os.path.abspath(args.workdir)
    if not os.access(shardnode, os.X_OK):
        die("%s is not an executable file (build it first)" % shardnode)

    jobs = prepare(args, shardnode)
    with open(CONFIG) as f:
        cfg = json.load(f)
    B, T, mb = JOB["batch"], JOB["seq_len"], JOB["micro_batch"]
    p, m = len(STAGES), B // mb
    bubble = (p - 1) / (m + p - 1)
    fl = stage_flops(cfg, T)
    balance = sum(fl) / p / max(fl)

    print("model configs/kjv/config.json: hidden %d, layers %d, heads %d (KV %d), "
          "intermediate %d, vocab %d"
          % (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
             cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["vocab_size"]))
    print("batch %d x seq %d = %d micro-batches of %d; %d rounds x %d steps per side, "
          "first %d of each run not counted" % (B, T, m, mb, args.rounds, args.steps,
                                                args.warmup))
    print("single: 1 process, --threads %d | pipeline: %d processes (1F1B, f32 on 127.0.0.1), "
          "--threads %d each: %s" % (args.threads, p, max(1, args.threads // p),
                                     ", ".join("%s layers [%d, %d)" % (n, l[0], l[1])
                                               for n, l in STAGES)))
    print("work dir %s; %d CPUs online" % (args.workdir, os.cpu_count() or 0), flush=True)

    # Bit-exactness holds at equal thread counts (docs/ARCHITECTURE.md): the
    # reference for the pipeline's losses is one untimed single-process run
    # with the nodes' thread count. The timed single process (more threads)
    # agrees with it to float rounding only.
    per_node = max(1, args.threads // p)
    t0 = time.time()
    ref = single_round(shardnode, jobs["single"], args, "ref", per_node)
    print("reference: single process, --threads %d, %d steps (untimed, for the losses): "
          "%.1f s" % (per_node, args.steps, time.time() - t0), flush=True)

    single_tps, pipe_tps, pipe_b_tps = [], [], []
    all_identical, worst_single, runs_single = True, 0.0, []
    W = args.warmup
    for r in range(args.rounds):
        order = ("single", "pipe") if r % 2 == 0 else ("pipe", "single")
        res = {}
        for side in order:
            t0 = time.time()
            if side == "single":
                res[side] = single_round(shardnode, jobs["single"], args, "r%d" % r, args.threads)
            else:
                res[side] = pipeline_round(shardnode, jobs["pipe"], args, r)
            res[side + "_wall"] = time.time() - t0
        s = [float(x["tokens_per_s"]) for x in res["single"][W:]]
        pa = [float(x["tokens_per_s"]) for x in res["pipe"]["a"][W:]]
        pb = [float(x["tokens_per_s"]) for x in res["pipe"]["b"][W:]]
        single_tps += s
        pipe_tps += pa
        pipe_b_tps += pb
        same, _, first_bad = compare_losses(ref, res["pipe"])
        _, worst, _ = compare_losses(res["single"], res["pipe"])
        all_identical &= same
        worst_single = max(worst_single, worst)
        runs_single.append([float(x["loss"]) for x in res["single"]])
        print("round %d (%s first): single %.0f tokens/s (%.0f..%.0f) | pipeline %.0f tokens/s "
              "(%.0f..%.0f; node b %.0f) | ratio %.3f | wall %.1f s / %.1f s"
              % (r + 1, order[0], statistics.median(s), min(s), max(s), statistics.median(pa),
                 min(pa), max(pa), statistics.median(pb),
                 statistics.median(pa) / statistics.median(s), res["single_wall"],
                 res["pipe_wall"]))
        print("  losses: pipeline vs single --threads %d: %s; vs the timed single --threads %d: "
              "worst rel diff %.1e" % (per_node, "bit-identical" if same else "DIFFER at " + first_bad,
                                      args.threads, worst), flush=True)

    sm, pm = statistics.median(single_tps), statistics.median(pipe_tps)
    print()
    print("single    %8.1f tokens/s  %7.1f ms/step  (median of %d steps)"
          % (sm, B * T / sm * 1e3, len(single_tps)))
    print("pipeline  %8.1f tokens/s  %7.1f ms/step  (median of %d steps, node a; node b %.1f)"
          % (pm, B * T / pm * 1e3, len(pipe_tps), statistics.median(pipe_b_tps)))
    print("ratio pipeline / single: %.3f" % (pm / sm))
    print("1F1B bubble predicted for p=%d stages, m=%d micro-batches: (p-1)/(m+p-1) = %d/%d = %.3f"
          % (p, m, p - 1, m + p - 1, bubble))
    print("  ideal ratio if the 2 stages were balanced and the single process scaled perfectly "
          "to %d threads: 1 - bubble = %.3f" % (args.threads, 1 - bubble))
    print("  these stages' model FLOPs per token: %s (%s); the slowest stage bounds the "
          "pipeline: x %.3f -> %.3f"
          % (" / ".join("%s %.2fM" % (n, f / 1e6) for (n, _), f in zip(STAGES, fl)),
             " / ".join("%.0f%%" % (100.0 * f / sum(fl)) for f in fl), balance,
             (1 - bubble) * balance))
    stable = all(x == runs_single[0] for x in runs_single)
    print("losses match: %s -- pipeline (both nodes, every step of every round) %s the single "
          "process at --threads %d; against the timed single process at --threads %d they "
          "agree to %.1e (rel), float rounding of another thread count%s"
          % ("yes" if all_identical else "NO", "bit-identical to" if all_identical
             else "NOT bit-identical to (see the rounds above)", per_node, args.threads,
             worst_single,
             "" if stable else "; NOTE: the single process's losses differ between rounds"))
    print(json.dumps({"bench": "pipeline_vs_single", "stages": p, "micro_batches": m,
                      "rounds": args.rounds, "steps": args.steps, "warmup": W,
                      "single_tokens_per_s": round(sm, 1), "pipeline_tokens_per_s": round(pm, 1),
                      "ratio": round(pm / sm, 4), "bubble_predicted": round(bubble, 4),
                      "ideal_ratio_balanced": round(1 - bubble, 4),
                      "ideal_ratio_these_stages": round((1 - bubble) * balance, 4),
                      "losses_identical": all_identical,
                      "loss_rel_diff_vs_timed_single": worst_single}))


if __name__ == "__main__":
    main()
