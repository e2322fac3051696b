"""One training step (forward, backward, AdamW) of shardnode on a GPU against
PyTorch on the same GPU, same model and shapes, in the same run.

    python3 bench/gpu_step.py [--shardnode build/shardnode] [--device cuda:0]
                              [--rounds 2] [--steps 5] [--configs bench-768,llama-1b]

Models: configs/bench-768 (hidden 768, 12 layers; batch 4 x 256) and
configs/llama-1b (TinyLlama's shape, 1.1B parameters: hidden 2048, 22
layers, 32 heads with 4 KV heads, intermediate 5632, vocab 32000; batch 4 x
512). PyTorch runs eager, twice: in fp32 and with bf16 autocast (fp32 master
weights and AdamW, as the issue's baseline). shardnode computes in the
precision its GPU backend has (fp32 in this version). Rounds interleave the
sides; figures are medians over the measured steps (the first step of each
side and round is a warm-up). MFU = model FLOPs per second (6 x matrix
parameters x tokens + 12 x layers x hidden x T x tokens for attention) over
the device's dense peak for the precision (--peak-tflops-bf16/-fp32, or a
table for H100/H200/A100). Prints figures; never fails on them. Without a
usable device it says why and exits 0.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "reference"))

# Dense peaks in TFLOP/s by product name (vendor spec sheets: SXM parts).
PEAKS = [("H200", 989.0, 67.0), ("H100", 989.0, 67.0), ("A100", 312.0, 19.5)]


def shardnode_devices(shardnode):
    p = subprocess.run([shardnode, "devices", "--json"], stdout=subprocess.PIPE, check=True)
    return json.loads(p.stdout)


def shardnode_steps(shardnode, config, device, B, T, K):
    cmd = [shardnode, "bench", "--config", config, "--batch", str(B), "--seq", str(T),
           "--steps", str(K), "--device", device]
    p = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=3600)
    if p.returncode != 0:
        sys.exit("gpu_step: %s failed: %s" % (" ".join(cmd), p.stderr.decode(errors="replace")))
    return [json.loads(line) for line in p.stdout.decode().splitlines() if line.startswith("{")]


def flops_per_token(cfg, T):
    import llama_ref as ref
    L, C = cfg["num_hidden_layers"], cfg["hidden_size"]
    return 6.0 * ref.matmul_param_count(cfg) + 12.0 * L * C * T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardnode", default=os.path.join(REPO, "build", "shardnode"))
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--configs", default="bench-768,llama-1b")
    ap.add_argument("--peak-tflops-bf16", type=float)
    ap.add_argument("--peak-tflops-fp32", type=float)
    args = ap.parse_args()

    listed = shardnode_devices(args.shardnode)
    mine = [d for d in listed if d["device"] == args.device and d["status"] == "ok"]
    if not mine:
        vendor = args.device.split(":")[0]
        why = "; ".join(d.get("why", d["status"]) for d in listed
                        if d["device"].split(":")[0] == vendor)
        print("gpu_step: %s is not usable here (%s): nothing measured" % (args.device, why))
        return
    dev = mine[0]
    sys.path.insert(0, os.path.join(REPO, "bench"))
    import torch
    from step_vs_torch import make_torch_trainer  # the CPU bench's baseline, on the GPU
    tdev = "cuda:%s" % args.device.split(":")[1]
    if not torch.cuda.is_available():
        print("gpu_step: PyTorch sees no GPU here: no baseline, nothing measured")
        return
    peak16, peak32 = args.peak_tflops_bf16, args.peak_tflops_fp32
    for name, p16, p32 in PEAKS:
        if name in dev["name"]:
            peak16, peak32 = peak16 or p16, peak32 or p32
    print("gpu_step: %s %s (%s, driver %s), torch %s on %s; peaks bf16 %s, fp32 %s TFLOP/s"
          % (args.device, dev["name"], dev["arch"], dev["driver"], torch.__version__,
             torch.cuda.get_device_name(tdev), peak16, peak32))
    shapes = {"bench-768": (4, 256), "llama-1b": (4, 512)}
    for name in args.configs.split(","):
        path = os.path.join(REPO, "configs", name, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        B, T = shapes.get(name, (4, 256))
        fpt = flops_per_token(cfg, T)
        sides = {"shardnode fp32": [], "torch fp32": [], "torch bf16 autocast": []}
        for _ in range(args.rounds):
            rows = shardnode_steps(args.shardnode, path, args.device, B, T, args.steps)
            sides["shardnode fp32"] += [r["step_ms"] for r in rows]
            for label, bf16 in (("torch fp32", False), ("torch bf16 autocast", True)):
                step = make_torch_trainer(cfg, B, T, device=tdev, bf16=bf16)
                step()  # warm-up
                sides[label] += [step()[0] for _ in range(args.steps)]
                del step
                torch.cuda.empty_cache()
        print("\n%s: batch %d x %d, %.2f GFLOP per token" % (name, B, T, fpt * 1e-9))
        base = statistics.median(sides["torch bf16 autocast"])
        for label, ms in sides.items():
            med = statistics.median(ms)
            tps = B * T / med * 1e3
            peak = peak16 if "bf16" in label else peak32
            mfu = "%.1f%% of %s peak" % (100 * tps * fpt / (peak * 1e12),
                                         "bf16" if "bf16" in label else "fp32") if peak else "-"
            print("  %-22s step %8.1f ms  %9.0f tokens/s  MFU %s  x%.2f of torch bf16"
                  % (label, med, tps, mfu, base / med))


if __name__ == "__main__":
    main()
