"""Pipeline stages that share one machine's cores: what the step costs.

    /usr/bin/python3 bench/shared_cores.py --shardnode build/shardnode [--steps 30]

A pool on one machine (the demo, integration.pool, a workstation whose
members are several processes) runs stages whose threads add up to more than
the cores. This script runs, on loopback, the KJV demo's model (hidden 256,
4 layers, sequence 128, batch 16 in micro-batches of 4):

- one process with 2 threads, and with 1 thread (the profiles' view);
- pipelines of 2 and 3 stages (threads 2+2, and 2+2+1 as integration.pool
  has them), each under OpenMP's default wait policy (idle threads spin) and
  under OMP_WAIT_POLICY=PASSIVE (idle threads sleep);

and prints the median step time of each beside a floor computed from the
single-process figures: the whole model's 1-thread work spread over the
cores, or the 2-thread step split evenly over the stages, whichever is
larger. The ratio to that floor shows what sharing costs; above all, the
default (spinning) policy against PASSIVE shows why a node's children wait
passively (docs/ARCHITECTURE.md, "Stages that share a machine"; the pool's
own prediction is scheduler/simulate.c's sim_run_shared, reported by
integration.pool). Timings, never pass/fail.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_ports  # noqa: E402

STEPS = 30


def median_step_ms(path, skip=5):
    with open(path) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    return statistics.median(r["step_ms"] for r in rows[skip:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--steps", type=int, default=STEPS)
    args = ap.parse_args()
    sn = os.path.abspath(args.shardnode)
    wd = tempfile.mkdtemp(prefix="shared-cores.")
    corpus = os.path.join(wd, "corpus.txt")
    with open(corpus, "w") as f:
        f.write(subprocess.run(["bible", "Gen1:1-Exo40:38"], stdout=subprocess.PIPE, text=True,
                               check=True).stdout)
    tok = os.path.join(wd, "tokenizer.json")
    subprocess.run([sn, "tokenizer", "train", "--input", corpus, "--vocab-size", "2048", "--out",
                    tok], check=True, stdout=subprocess.DEVNULL)
    here = os.path.dirname(os.path.abspath(__file__))
    config = os.path.join(here, "..", "configs", "kjv", "config.json")
    job = {"config": os.path.abspath(config), "tokenizer": tok,
           "data": {"files": [corpus], "separator": "\n\n", "val_fraction": 0.02},
           "seq_len": 128, "batch": 16, "micro_batch": 4, "steps": args.steps, "lr": 3e-3,
           "seed": 1, "log_interval": 1000, "out_dir": os.path.join(wd, "out")}
    jp = os.path.join(wd, "job.json")
    with open(jp, "w") as f:
        json.dump(job, f)

    def single(threads, env):
        m = os.path.join(wd, "single.jsonl")
        subprocess.run([sn, "train", "--job", jp, "--metrics", m, "--threads", str(threads)],
                       check=True, stdout=subprocess.DEVNULL, env=env)
        return median_step_ms(m)

    def pipeline(threads, env):
        n = len(threads)
        cuts = {2: [[0, 2], [2, 4]], 3: [[0, 1], [1, 2], [2, 4]]}[n]
        ports = free_ports(n)
        cl = {"run": "shared", "timeout_ms": 60000,
              "nodes": [{"name": "n%d" % i, "host": "127.0.0.1", "port": ports[i],
                         "layers": cuts[i]} for i in range(n)]}
        cp = os.path.join(wd, "cluster.json")
        with open(cp, "w") as f:
            json.dump(cl, f)
        procs = []
        for i in range(n):
            m = os.path.join(wd, "n%d.jsonl" % i)
            procs.append(subprocess.Popen([sn, "train", "--job", jp, "--cluster", cp, "--node",
                                           "n%d" % i, "--metrics", m, "--threads",
                                           str(threads[i])], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, env=env))
        for p in procs:
            if p.wait() != 0:
                sys.exit("pipeline run failed")
        return median_step_ms(os.path.join(wd, "n%d.jsonl" % (n - 1)))

    base = dict(os.environ)
    base.pop("OMP_WAIT_POLICY", None)
    passive = dict(base, OMP_WAIT_POLICY="PASSIVE")
    cores = os.cpu_count()
    print("%d cores; OPENBLAS_CORETYPE=%s; %d steps, median of steps 6..%d"
          % (cores, os.environ.get("OPENBLAS_CORETYPE", "(unset)"), args.steps, args.steps))
    for name, env in (("default", base), ("PASSIVE", passive)):
        t2, t1 = single(2, env), single(1, env)
        print("%-8s one process: 2 threads %.1f ms, 1 thread %.1f ms per step" % (name, t2, t1))
        for threads in ([2, 2], [2, 2, 1]):
            got = pipeline(threads, env)
            # the whole model's work in core-ms (threads x time), shared over the cores,
            # against the busiest stage alone (a pipeline's floor)
            work = t1
            pred = max(work / cores, t2 / len(threads))
            print("%-8s pipeline threads %-7s %.1f ms per step; floor %.1f (ratio %.2f)"
                  % (name, "+".join(map(str, threads)), got, pred, got / pred))


if __name__ == "__main__":
    main()
