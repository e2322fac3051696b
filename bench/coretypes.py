"""The matrix-product rate and the training-step rate of shardnode under every
OpenBLAS core type this CPU can run, so that the choice of core type
(kernels_blas_coretype_hint in kernels/cpu/util.c) is made from figures.

    flock /tmp/shardnode-bench.lock /usr/bin/python3 bench/coretypes.py \
        [--shardnode build/shardnode] [--steps 3] [--cores Haswell,SkylakeX]

For each core type (OPENBLAS_CORETYPE=<Name>; skipped when /proc/cpuinfo
lacks the instructions its kernels need):
  - `shardnode bench --sgemm --threads 1` and `--threads 2`: OpenBLAS's
    cblas_sgemm of 2048^3 (sgemm_gflops), and matmul_forward of 2048^3 as
    training runs it with OpenBLAS as its kernel (SHARDNODE_GEMM=openblas);
  - `shardnode bench --config CONFIG --batch 4 --seq 256 --steps K
    --threads 2` with SHARDNODE_GEMM=openblas: the median tokens/s of K
    training steps (forward, backward, AdamW) whose products run on that
    core type.
Then once, the same two figures with shardnode's own matrix-product kernel
(where the CPU has AVX-512; the default there, and independent of the core
type). Prints a Markdown table for bench/README.md. Not part of the pass/fail
suite; timings on a shared machine vary by up to 2x between runs.
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import die, run  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Core types Debian's OpenBLAS 0.3.21 accepts by these names (checked with
# openblas_get_corename()), and the /proc/cpuinfo flags their kernels need.
CORES = [
    ("Prescott", ["sse3"]),  # pni in /proc/cpuinfo
    ("Core2", ["ssse3"]),
    ("Nehalem", ["sse4_2"]),
    ("Sandybridge", ["avx"]),
    ("Haswell", ["avx2", "fma"]),
    ("Zen", ["avx2", "fma"]),
    ("SkylakeX", ["avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"]),
    ("Cooperlake", ["avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"]),
]


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    if "pni" in flags:
                        flags.add("sse3")
                    return flags
    except OSError:
        pass
    return set()


def json_lines(text):
    return [json.loads(l) for l in text.splitlines() if l.strip().startswith("{")]


def env_for(core, gemm):
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if core:
        env["OPENBLAS_CORETYPE"] = core
    else:
        env.pop("OPENBLAS_CORETYPE", None)
    if gemm:
        env["SHARDNODE_GEMM"] = gemm
    else:
        env.pop("SHARDNODE_GEMM", None)
    return env


def sgemm(shardnode, core, gemm, threads):
    out = json_lines(run([shardnode, "bench", "--sgemm", "--threads", str(threads)], 600, REPO,
                         env_for(core, gemm)))
    if not out:
        die("`shardnode bench --sgemm` printed nothing")
    return out[0]


def steps(shardnode, core, gemm, args):
    cmd = [shardnode, "bench", "--config", args.config, "--batch", str(args.batch), "--seq",
           str(args.seq), "--steps", str(args.steps), "--threads", "2"]
    out = [o for o in json_lines(run(cmd, 3600, REPO, env_for(core, gemm))) if "step" in o]
    if not out:
        die("no step lines from %s" % " ".join(cmd))
    return statistics.median(o["tokens_per_s"] for o in out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardnode", default=os.path.join(REPO, "build", "shardnode"))
    ap.add_argument("--config", default="configs/bench-768/config.json")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3, help="measured steps per core type")
    ap.add_argument("--cores", help="comma-separated core types (default: all it knows)")
    args = ap.parse_args()
    shardnode = os.path.abspath(args.shardnode)
    if not os.access(shardnode, os.X_OK):
        die("%s is not an executable file (build it first)" % shardnode)
    flags = cpu_flags()
    wanted = args.cores.split(",") if args.cores else [c for c, _ in CORES]
    need = dict(CORES)
    auto = sgemm(shardnode, None, "openblas", 1)["blas_core"]
    print("OpenBLAS's own choice on this CPU (OPENBLAS_CORETYPE unset): %s" % auto)
    print("model %s, batch %d x seq %d, 2 threads, median of %d steps"
          % (args.config, args.batch, args.seq, args.steps))
    print()
    print("| core type | sgemm 1 thr (GFLOP/s) | sgemm 2 thr | matmul 2 thr | step (tokens/s) |")
    print("|---|---:|---:|---:|---:|")
    rows = [(c, "openblas") for c in wanted]
    own = sgemm(shardnode, None, None, 1)
    if own.get("gemm") != "openblas":
        rows.append((None, None))
    for core, gemm in rows:
        if core and core not in need:
            die("unknown core type %s (known: %s)" % (core, ", ".join(need)))
        if core and not all(f in flags for f in need[core]):
            print("| %s | skipped: this CPU lacks %s | | | |"
                  % (core, ", ".join(f for f in need[core] if f not in flags)), flush=True)
            continue
        s1 = sgemm(shardnode, core, gemm, 1)
        s2 = sgemm(shardnode, core, gemm, 2)
        if core and s1["blas_core"].lower() != core.lower():
            die("OPENBLAS_CORETYPE=%s but OpenBLAS runs %s" % (core, s1["blas_core"]))
        tps = steps(shardnode, core, gemm, args)
        if core:
            print("| %s | %.0f | %.0f | %.0f | %.0f |"
                  % (core, s1["sgemm_gflops"], s2["sgemm_gflops"], s2["matmul_gflops"], tps),
                  flush=True)
        else:
            print("| shardnode's own kernel (%s) | | | %.0f (1 thr %.0f) | %.0f |"
                  % (s2["gemm"], s2["matmul_gflops"], s1["matmul_gflops"], tps), flush=True)


if __name__ == "__main__":
    main()
