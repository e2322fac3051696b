"""QLoRA (an NF4 base with LoRA adapters) against full fine-tuning of the same
model and split (memory per stage) and against PyTorch + PEFT on the same
CPU threads (training tokens/s), in the same run.

    /usr/bin/python3 bench/qlora.py [--shardnode build/shardnode] [--models kjv,768]
                                    [--rounds 3] [--steps 6] [--threads 2]
                                    [--skip-memory] [--skip-speed]
                                    [--workdir /tmp/shardnode-bench-qlora]

Models: the demo model (configs/kjv/config.json: hidden 256, 4 layers, the
model the Quick start trains) at batch 16 x seq 128, and configs/bench-768/
config.json (hidden 768, 12 layers) at batch 4 x seq 256; base weights
seeded (tests/reference/llama_ref.py), text from the King James Bible
(Debian's bible-kjv) with a 2048-token tokenizer. LoRA as the README's
fine-tune example: r 8, alpha 16, all seven projections; the job's AdamW,
clipping and LR schedule.

(a) Memory: `shardnode train` of the NF4 + LoRA job and of the full
fine-tuning job (the same job without "lora" and "base": every weight
trains, fp32 with AdamW moments), each as one process and as a 3-stage
`train --cluster` pipeline on loopback, the micro-batches of the demo job.
The figure is each process's peak anonymous memory (RssAnon of
/proc/PID/status, sampled every 5 ms): the pages the stage owns. The
weights file is mmap'd read-only, and the pages of it a stage reads count in
its RSS as page cache the kernel may drop; the peak RSS (VmHWM, which
includes them) is printed beside it.

(b) Speed: R rounds, alternating which side goes first, of K steps of
`shardnode train` (NF4 + LoRA, one micro-batch) and K steps of PyTorch +
PEFT (transformers' LlamaForCausalLM in float32 with the base dequantized
from NF4 by tests/reference/nf4_np.py, bitsandbytes' algorithm in numpy,
frozen; peft's get_peft_model with LoraConfig on the same targets, r and
alpha; the same initial adapters, the same batches; torch.optim.AdamW on the
adapters, clip_grad_norm_, the job's LR schedule), on the same threads. The
first step of each side in each round is a warm-up; figures are medians of
the others. Both sides train the same thing from the same start, so their
losses agree to float32 rounding: printed for steps 1 and K.

Runs under the repository's .venv (transformers, peft; re-executed into it
like the reference tests). Not part of the pass/fail suite: it prints
figures and never fails on them.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import refvenv  # noqa: E402

refvenv.enter("transformers, peft")

from torch_env import child_env  # noqa: E402  (sets torch's environment first)
import benchlib  # noqa: E402
from benchlib import bench_parser, die, free_ports, kjv_corpus_and_tokenizer  # noqa: E402

import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import llama_ref as ref  # noqa: E402
import lora_ref  # noqa: E402  (init_adapters, nf4_base, adapter_shapes, job_lr)

VOCAB = 2048
INIT_SEED = 1
MODULES = lora_ref.MODULES
LORA = {"r": 8, "alpha": 16, "target_modules": "all-linear"}

MODELS = {
    "kjv": {"config": "configs/kjv/config.json", "batch": 16, "seq": 128, "micro": 4,
            "split": [[0, 1], [1, 3], [3, 4]]},
    "768": {"config": "configs/bench-768/config.json", "batch": 4, "seq": 256, "micro": 1,
            "split": [[0, 4], [4, 8], [8, 12]]},
}

JOB = {"lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 2, "weight_decay": 0.1, "beta1": 0.9,
       "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0, "seed": 1, "val_interval": 0,
       "val_batches": 1, "checkpoint_interval": 0, "log_interval": 1000000}


SN_ENV = {}  # --passive: OMP_WAIT_POLICY for shardnode too (a diagnostic)


def sn_env():
    """shardnode's environment: without torch's OMP_WAIT_POLICY (see
    torch_env.py) unless --passive."""
    env = child_env()
    env.update(SN_ENV)
    return env


def run(cmd, timeout, cwd):
    return benchlib.run(cmd, timeout, cwd, sn_env())


def write_job(wd, name, m, init, corpus, tok, steps, micro, qlora):
    job = dict(JOB)
    job.update({"config": os.path.join(REPO, m["config"]), "init_weights": init,
                "tokenizer": tok, "seq_len": m["seq"], "batch": m["batch"],
                "micro_batch": micro, "steps": steps + 1,
                "data": {"files": [corpus], "format": "text", "separator": "\n\n",
                         "val_fraction": 0.02},
                "out_dir": os.path.join(wd, "out-" + name)})
    if qlora:
        job["base"] = {"quant": "nf4"}
        job["lora"] = dict(LORA)
    path = os.path.join(wd, name + ".json")
    with open(path, "w") as f:
        json.dump(job, f, indent=1)
    return path, job


def read_metrics(path, steps):
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    if [s.get("step") for s in lines] != list(range(1, steps + 1)):
        die("%s: expected steps 1..%d, got %s" % (path, steps, [s.get("step") for s in lines]))
    return lines


# ------------------------------------------------------------- (a) memory ---

def proc_status_kib(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def run_measured(cmds, cwd, timeout=3600):
    """Starts every command at once; returns [(peak RssAnon KiB, peak RSS KiB)]
    per command once all have exited (exits naming a failed one). Both are
    sampled from /proc/PID/status every 5 ms (VmHWM is the kernel's own
    high-water mark of the RSS). Not wait4's ru_maxrss: Linux carries the
    forking parent's RSS (this Python, with torch) into a child's maxrss
    across exec."""
    procs = [subprocess.Popen(c, cwd=cwd, env=sn_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for c in cmds]
    anon = [0] * len(procs)
    hwm = [0] * len(procs)
    done = threading.Event()

    def sample():
        while not done.is_set():
            for i, p in enumerate(procs):
                anon[i] = max(anon[i], proc_status_kib(p.pid, "RssAnon"))
                hwm[i] = max(hwm[i], proc_status_kib(p.pid, "VmHWM"))
            time.sleep(0.005)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            die("timed out after %d s: %s" % (timeout, " ".join(cmds[0])))
        outs.append(out.decode(errors="replace"))
    done.set()
    th.join()
    for c, p, o in zip(cmds, procs, outs):
        if p.returncode != 0:
            die("exit status %d: %s\n%s" % (p.returncode, " ".join(c), o))
    return list(zip(anon, hwm))


def memory_runs(sn, wd, name, m, init, corpus, tok, steps):
    """{(split, kind): [(anon, rss) per stage]} for split 1 and len(m["split"])."""
    res = {}
    for kind in ("full", "qlora"):
        jp, _ = write_job(wd, "mem-%s-%s" % (name, kind), m, init, corpus, tok, steps,
                          m["micro"], kind == "qlora")
        res[(1, kind)] = run_measured(
            [[sn, "train", "--job", jp, "--steps", str(steps), "--threads", "1"]], wd)
        ports = free_ports(len(m["split"]))
        nodes = [{"name": "n%d" % i, "host": "127.0.0.1", "port": ports[i], "layers": lay}
                 for i, lay in enumerate(m["split"])]
        cl = os.path.join(wd, "cluster-%s-%s.json" % (name, kind))
        with open(cl, "w") as f:
            json.dump({"run": "qlora-bench", "schedule": "1f1b", "timeout_ms": 120000,
                       "wire_dtype": "f32", "nodes": nodes}, f)
        res[(len(nodes), kind)] = run_measured(
            [[sn, "train", "--job", jp, "--cluster", cl, "--node", n["name"], "--steps",
              str(steps), "--threads", "1"] for n in nodes], wd)
    return res


def nf4_bytes(rows, cols):
    """kernels/cpu/nf4.c nf4_bytes: codes, 8-bit absmax, nested absmax, tables."""
    n, nb = rows * cols, -(-rows * cols // 64)
    return (16 + 256 + -(-nb // 256) + 1) * 4 + (n + 1) // 2 + nb


def model_state(cfg):
    """(full, qlora) bytes of the whole model's state, computed: full
    fine-tuning keeps weights, gradients and two AdamW moments in fp32 (16
    bytes a parameter); NF4 + LoRA the layer matrices in NF4, the rest of
    the base in fp32, and 16 bytes per adapter parameter."""
    full = qlora = 0
    for name, shape in ref.param_shapes(cfg).items():
        n = int(np.prod(shape))
        full += 16 * n
        if name.startswith("model.layers.") and len(shape) == 2:
            qlora += nf4_bytes(*shape) + 16 * LORA["r"] * (shape[0] + shape[1])
        else:
            qlora += 4 * n
    return full, qlora


def print_memory(name, m, res, load):
    mib = 1.0 / 1024
    full_state, q_state = model_state(ref.load_config(os.path.join(REPO, m["config"])))
    print("\n(a) memory, model %s (%s), batch %d x seq %d in micro-batches of %d; %s"
          % (name, m["config"], m["batch"], m["seq"], m["micro"], load))
    print("  %-22s %12s %12s %7s   %12s %12s %7s" % ("stage", "full anon", "NF4+LoRA", "ratio",
                                                  "full RSS", "NF4+LoRA", "ratio"))
    nst = len(m["split"])
    for split in (1, nst):
        full, q = res[(split, "full")], res[(split, "qlora")]
        for i, ((fa, fr), (qa, qr)) in enumerate(zip(full, q)):
            if split == 1:
                lay = "1/1: layers 0-%d" % (m["split"][-1][1] - 1)
            else:
                lay = "%d/%d: layers %d-%d" % (i + 1, nst, m["split"][i][0], m["split"][i][1] - 1)
            print("  %-22s %8.1f MiB %8.1f MiB %6.3fx   %8.1f MiB %8.1f MiB %6.3fx"
                  % (lay, fa * mib, qa * mib, qa / fa, fr * mib, qr * mib, qr / fr))
        if split == 1:
            fa, qa = full[0][0] * 1024, q[0][0] * 1024
            print("  %-22s %8.1f MiB %8.1f MiB %6.3fx   (computed: weights, gradients, moments)"
                  % ("  model state", full_state / 2**20, q_state / 2**20, q_state / full_state))
            print("  %-22s %8.1f MiB %8.1f MiB           (measured minus model state: "
                  "activations, buffers, code)" % ("  the rest", (fa - full_state) / 2**20,
                                                  (qa - q_state) / 2**20))
        if split > 1:
            fa, qa = max(a for a, _ in full), max(a for a, _ in q)
            print("  %-22s %8.1f MiB %8.1f MiB %6.3fx" % ("largest stage", fa * mib, qa * mib,
                                                        qa / fa))
    sys.stdout.flush()


# -------------------------------------------------------------- (b) speed ---

def build_peft(cfg, base, adapters, lora):
    from transformers import LlamaConfig, LlamaForCausalLM
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    hf = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",)})
    hf.use_cache = False
    model = LlamaForCausalLM(hf).float()
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in base.items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or [k for k in missing if "rotary" not in k]:
        die("the base does not fit LlamaForCausalLM: missing %s, unexpected %s"
            % (missing[:4], unexpected[:4]))
    pm = get_peft_model(model, LoraConfig(r=lora["r"], lora_alpha=lora["alpha"],
                                          target_modules=list(MODULES), lora_dropout=0.0,
                                          bias="none", task_type="CAUSAL_LM"))
    res = set_peft_model_state_dict(pm, {k: torch.from_numpy(v) for k, v in adapters.items()})
    if getattr(res, "unexpected_keys", None):
        die("PEFT does not know the adapters %s" % res.unexpected_keys[:4])
    return pm


def torch_round(pm, adapters, job, ids, labels):
    """K steps of PyTorch + PEFT from the initial adapters; [(step_ms, loss)]."""
    from peft import set_peft_model_state_dict
    set_peft_model_state_dict(pm, {k: torch.from_numpy(v) for k, v in adapters.items()})
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=job["lr"], betas=(job["beta1"], job["beta2"]),
                            eps=job["eps"], weight_decay=job["weight_decay"])
    pm.train()
    out = []
    for step in range(ids.shape[0]):
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lora_ref.job_lr(job, step)
        opt.zero_grad(set_to_none=True)
        logits = pm(input_ids=ids[step]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[step].reshape(-1),
                               ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, job["grad_clip"])
        opt.step()
        out.append(((time.perf_counter() - t0) * 1e3, float(loss.item())))
    return out


def speed(sn, wd, name, m, init_np, init, corpus, tok, args):
    cfg = ref.load_config(os.path.join(REPO, m["config"]))
    jp, job = write_job(wd, "speed-" + name, m, init, corpus, tok, args.steps, m["batch"], True)
    bp = os.path.join(wd, "batches-%s.safetensors" % name)
    run([sn, "batches", "--job", jp, "--steps", str(args.steps), "--out", bp], 600, wd)
    b = ref.read_safetensors(bp)
    B, T, K = m["batch"], m["seq"], args.steps
    ids = torch.from_numpy(b["input_ids"].astype("int64")).view(K, B, T)
    labels = torch.from_numpy(b["labels"].astype("int64")).view(K, B, T)
    t0 = time.time()
    base = lora_ref.nf4_base(init_np, cfg)
    shapes = lora_ref.adapter_shapes(cfg, LORA["r"], MODULES)
    adapters = lora_ref.init_adapters(shapes, job["seed"])
    pm = build_peft(cfg, base, adapters, LORA)
    print("\n(b) speed, model %s (%s), batch %d x seq %d (one micro-batch), %d threads, "
          "%d rounds x %d steps per side (first of each not counted); torch %s, "
          "attention %s; PEFT base ready in %.1f s"
          % (name, m["config"], B, T, args.threads, args.rounds, K, torch.__version__,
             getattr(pm.config, "_attn_implementation", "?"), time.time() - t0), flush=True)
    sn_tps, th_tps = [], []
    for r in range(args.rounds):
        for side in (("sn", "th") if r % 2 == 0 else ("th", "sn")):
            if side == "sn":
                mp = os.path.join(wd, "metrics-%s.jsonl" % name)
                run([sn, "train", "--job", jp, "--steps", str(K), "--metrics", mp,
                     "--threads", str(args.threads)], 3600, wd)
                steps = read_metrics(mp, K)
                sn_r = [float(s["tokens_per_s"]) for s in steps[1:]]
                sn_loss = (float(steps[0]["loss"]), float(steps[-1]["loss"]))
            else:
                ts = torch_round(pm, adapters, job, ids, labels)
                th_r = [B * T / ms * 1e3 for ms, _ in ts[1:]]
                th_loss = (ts[0][1], ts[-1][1])
        sn_tps += sn_r
        th_tps += th_r
        print("  round %d: shardnode %.0f tokens/s (%.0f..%.0f) | PyTorch+PEFT %.0f (%.0f..%.0f)"
              % (r + 1, statistics.median(sn_r), min(sn_r), max(sn_r), statistics.median(th_r),
                 min(th_r), max(th_r)), flush=True)
    sm, tm = statistics.median(sn_tps), statistics.median(th_tps)
    print("  shardnode NF4+LoRA %8.1f tokens/s %8.1f ms/step (median of %d steps)"
          % (sm, B * T / sm * 1e3, len(sn_tps)))
    print("  PyTorch+PEFT       %8.1f tokens/s %8.1f ms/step (median of %d steps)"
          % (tm, B * T / tm * 1e3, len(th_tps)))
    print("  ratio shardnode / PyTorch+PEFT: %.2f" % (sm / tm))
    for step, a, t in ((1, sn_loss[0], th_loss[0]), (K, sn_loss[1], th_loss[1])):
        print("  loss step %-3d shardnode %.6f  PyTorch+PEFT %.6f  (rel diff %.1e)"
              % (step, a, t, abs(a - t) / abs(t)))
    sys.stdout.flush()
    return sm / tm


def main():
    ap = bench_parser(__doc__, 3)
    ap.add_argument("--models", default="kjv,768", help="some of: %s" % ",".join(MODELS))
    ap.add_argument("--steps", type=int, default=6,
                    help="speed: steps per side per round (K, >= 2; the first is a warm-up)")
    ap.add_argument("--mem-steps", type=int, default=3, help="memory: steps of each run")
    ap.add_argument("--threads", type=int, default=2, help="speed: threads of both sides")
    ap.add_argument("--passive", action="store_true",
                    help="diagnostic: shardnode with OMP_WAIT_POLICY=PASSIVE too (its OpenMP "
                    "threads sleep at barriers instead of spinning, as torch's do)")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--workdir", default="/tmp/shardnode-bench-qlora")
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    if not names or any(n not in MODELS for n in names):
        die("--models: some of %s" % ",".join(MODELS))
    if args.steps < 2 or args.rounds < 1 or args.mem_steps < 1:
        die("--steps must be >= 2, --rounds and --mem-steps >= 1")
    if args.passive:
        SN_ENV["OMP_WAIT_POLICY"] = "PASSIVE"
    sn = os.path.abspath(args.shardnode)
    if not os.access(sn, os.X_OK):
        die("%s is not an executable file (build it first)" % sn)
    wd = os.path.abspath(args.workdir)
    os.makedirs(wd, exist_ok=True)
    torch.set_num_threads(args.threads)
    corpus, tok = kjv_corpus_and_tokenizer(wd, sn, VOCAB, child_env())
    print("shardnode %s; OMP_WAIT_POLICY=PASSIVE for %s; OPENBLAS_CORETYPE=%s for both;"
          " LoRA r %d alpha %d on %s" % (sn, "both (--passive)" if args.passive else "torch only",
                                         os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
                                         LORA["r"], LORA["alpha"], ",".join(MODULES)))
    ratios = {}
    for name in names:
        m = MODELS[name]
        cfg = ref.load_config(os.path.join(REPO, m["config"]))
        init_np = {n: t.detach().numpy() for n, t in
                   ref.init_torch_params(cfg, std=0.02, dtype=torch.float32,
                                         seed=INIT_SEED).items()}
        init = os.path.join(wd, "init-%s.safetensors" % name)
        ref.write_safetensors(init, init_np)
        if not args.skip_memory:
            load = "load average before: %.2f %.2f %.2f" % os.getloadavg()
            res = memory_runs(sn, wd, name, m, init, corpus, tok, args.mem_steps)
            print_memory(name, m, res, load)
        if not args.skip_speed:
            ratios[name] = speed(sn, wd, name, m, init_np, init, corpus, tok, args)
    if ratios:
        print("\nspeed ratios: " + ", ".join("%s %.2f" % kv for kv in ratios.items())
              + "  (load average now %.2f %.2f %.2f)" % os.getloadavg())


if __name__ == "__main__":
    main()
