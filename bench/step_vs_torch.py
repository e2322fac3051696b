"""One training step (forward, backward, AdamW) of shardnode against PyTorch
on the same LLaMA model, same shapes, same thread count, in the same run.

    /usr/bin/python3 bench/step_vs_torch.py [--shardnode build/shardnode]
                                            [--rounds 3] [--steps 3]

Model: configs/bench-768/config.json (hidden 768, 12 layers, 12 heads with 4
KV heads, intermediate 2048, vocab 4096), batch 4, sequence 256, 2 threads.
Rounds interleave the two sides (shardnode K steps, then torch K steps,
R times) so that a noisy neighbour affects both alike; figures are medians
over all measured steps. Not part of the pass/fail suite: it prints figures,
it never fails on them.
"""

import os

import sys

# torch_env sets the baseline's environment (OMP_WAIT_POLICY,
# OPENBLAS_CORETYPE): it must come before torch is imported.

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_env import child_env  # noqa: E402  (sets torch's environment first)
from benchlib import bench_parser  # noqa: E402

import contextlib  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))
import llama_ref as ref  # noqa: E402

CONFIG = "configs/bench-768/config.json"
SGEMM_N = 2048



def run_json_lines(cmd, timeout):
    """Runs cmd in the repo root; returns its stdout's JSON objects."""
    try:
        p = subprocess.run(cmd, cwd=REPO, env=child_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        sys.exit("step_vs_torch: timed out after %d s: %s" % (timeout, " ".join(cmd)))
    except OSError as e:
        sys.exit("step_vs_torch: cannot run %s: %s" % (cmd[0], e))
    if p.returncode != 0:
        sys.exit("step_vs_torch: exit status %d: %s\n%s"
                 % (p.returncode, " ".join(cmd), p.stderr.decode(errors="replace")))
    out = []
    for line in p.stdout.decode().splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def shardnode_sgemm(shardnode, threads):
    """(OpenBLAS sgemm GFLOP/s, shardnode matmul GFLOP/s, matmul's kernel); an
    older shardnode without matmul_gflops gives the sgemm figure for both."""
    objs = run_json_lines([shardnode, "bench", "--sgemm", "--threads", str(threads)], 300)
    vals = [o for o in objs if "sgemm_gflops" in o]
    if not vals:
        sys.exit("step_vs_torch: `shardnode bench --sgemm` printed no sgemm_gflops")
    o = vals[0]
    return (float(o["sgemm_gflops"]), float(o.get("matmul_gflops", o["sgemm_gflops"])),
            o.get("gemm", "openblas"))


def shardnode_steps(shardnode, args):
    cmd = [shardnode, "bench", "--config", args.config, "--batch", str(args.batch),
           "--seq", str(args.seq), "--steps", str(args.steps), "--threads", str(args.threads)]
    steps = [o for o in run_json_lines(cmd, 3600) if "step" in o]
    if len(steps) != args.steps:
        sys.exit("step_vs_torch: expected %d step lines from %s, got %d"
                 % (args.steps, " ".join(cmd), len(steps)))
    return steps


def torch_sgemm_gflops(n=SGEMM_N, reps=10):
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    torch.matmul(a, b)  # warm-up
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.matmul(a, b)
    return 2.0 * n ** 3 * reps / (time.perf_counter() - t0) * 1e-9


def make_torch_trainer(cfg, B, T, seed=1, device=None, bf16=False):
    """Returns step() -> (step_ms, loss) for the reference model with fp32
    weights and torch.optim.AdamW (weight decay on matrices only, as
    shardnode), clipping at 1.0; on the CPU, or on a CUDA device (timed to
    the GPU's end) with bf16 autocast when bf16 (bench/gpu_step.py)."""
    torch.manual_seed(seed)
    params = ref.init_torch_params(cfg, std=0.02, dtype=torch.float32, seed=seed)
    if device:
        torch.set_default_device(device)  # llama_ref's rope tables and masks
        params = {k: torch.nn.Parameter(v.detach().to(device)) for k, v in params.items()}
    plist = list(params.values())
    decay = [p for p in plist if p.dim() >= 2]
    no_decay = [p for p in plist if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    seq = torch.randint(0, cfg["vocab_size"], (B, T + 1), device="cpu")
    ids = seq[:, :T].contiguous()
    labels = seq[:, 1:].contiguous()
    if device:
        ids, labels = ids.to(device), labels.to(device)

    def sync():
        if device:
            torch.cuda.synchronize()

    def step():
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device and bf16
                    else contextlib.nullcontext())
        with autocast:
            loss = ref.llama_loss(params, cfg, ids, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, 1.0)
        opt.step()
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        return ms, float(loss.item())

    return step


def main():
    ap = bench_parser(__doc__, 3)
    ap.add_argument("--steps", type=int, default=3, help="measured steps per side per round (K)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--config", default=CONFIG, help="model config, relative to the repo root")
    args = ap.parse_args()
    shardnode = os.path.abspath(args.shardnode)
    if not os.access(shardnode, os.X_OK):
        sys.exit("step_vs_torch: %s is not an executable file (build it first)" % shardnode)

    torch.set_num_threads(args.threads)
    cfg = ref.load_config(os.path.join(REPO, args.config))
    B, T = args.batch, args.seq
    C, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    n_matmul = ref.matmul_param_count(cfg)
    flops_per_token = 6 * n_matmul + 6 * L * T * C

    print("model %s: hidden %d, layers %d, heads %d (KV %d), intermediate %d, vocab %d"
          % (args.config, C, L, cfg["num_attention_heads"], cfg["num_key_value_heads"],
             cfg["intermediate_size"], cfg["vocab_size"]))
    print("batch %d x seq %d, %d threads, %d rounds x %d steps per side; torch %s, "
          "OMP_WAIT_POLICY=PASSIVE for torch only; OPENBLAS_CORETYPE=%s for both"
          % (B, T, args.threads, args.rounds, args.steps, torch.__version__,
             os.environ.get("OPENBLAS_CORETYPE", "(unset)")))

    torch_step = make_torch_trainer(cfg, B, T)
    torch_step()  # warm-up (shardnode does its own)

    sn_tps, th_tps, sn_loss, th_loss, peaks, torch_peaks = [], [], [], [], [], []
    mm_peaks, gemm = [], "openblas"
    for r in range(args.rounds):
        sg, mm, gemm = shardnode_sgemm(shardnode, args.threads)
        peaks.append(sg)
        mm_peaks.append(mm)
        torch_peaks.append(torch_sgemm_gflops())
        steps = shardnode_steps(shardnode, args)
        sn = [float(s["tokens_per_s"]) for s in steps]
        sn_loss.append(float(steps[-1]["loss"]))
        th = []
        for _ in range(args.steps):
            ms, loss = torch_step()
            th.append(B * T / ms * 1e3)
        th_loss.append(loss)
        sn_tps += sn
        th_tps += th
        print("round %d: sgemm %.0f, matmul %.0f GFLOP/s | shardnode tokens/s %s | "
              "torch tokens/s %s"
              % (r + 1, peaks[-1], mm_peaks[-1], " ".join("%.0f" % x for x in sn),
                 " ".join("%.0f" % x for x in th)), flush=True)

    sn_med = statistics.median(sn_tps)
    th_med = statistics.median(th_tps)
    peak = statistics.median(peaks)
    mm_peak = statistics.median(mm_peaks)
    torch_peak = statistics.median(torch_peaks)
    print()
    print("FLOPs per token = 6 * N_matmul + 6 * L * T * C")
    print("                = 6 * %d + 6 * %d * %d * %d = %.4g"
          % (n_matmul, L, T, C, flops_per_token))
    print("  (N_matmul: q,k,v,o,gate,up,down of every layer and lm_head; the second term is")
    print("   causal attention, forward and backward)")
    print("%d^3 product, %d threads (median): OpenBLAS sgemm %.0f GFLOP/s (core type %s), "
          "shardnode matmul %.0f GFLOP/s (kernel %s), torch.matmul %.0f GFLOP/s"
          % (SGEMM_N, args.threads, peak, os.environ.get("OPENBLAS_CORETYPE", "auto"), mm_peak,
             gemm, torch_peak))
    for name, tps, loss, pk in (("shardnode", sn_med, sn_loss[-1], mm_peak),
                                ("torch", th_med, th_loss[-1], torch_peak)):
        gflops = tps * flops_per_token * 1e-9
        print("%-10s %8.1f tokens/s  %6.1f GFLOP/s = %4.1f%% of its own 2048^3 rate  "
              "(last loss %.4f)" % (name, tps, gflops, 100.0 * gflops / pk, loss))
    print("ratio shardnode / torch: %.2f" % (sn_med / th_med))
    # What any step could reach here: every FLOP of it at the fastest 2048^3
    # product rate this run measured (a bound no real step meets: the step
    # also normalises, applies attention's softmax and updates AdamW).
    best = max(peak, mm_peak, torch_peak)
    print("ceiling: a step with every FLOP at the fastest 2048^3 rate measured here "
          "(%.0f GFLOP/s) would be %.2fx torch's step" % (best, best * 1e9 / (th_med * flops_per_token)))


if __name__ == "__main__":
    main()
