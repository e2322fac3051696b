"""Training on a GPU against the CPU, alone and in a pipeline beside CPU stages.

    /usr/bin/python3 tests/integration/gpu_pipeline_test.py --shardnode build/shardnode \
        --workdir DIR [--device cuda:0]

1. `shardnode train --device D` (one process) gives the CPU's loss at every
   step within 1e-3 relative (fp32 kernels that sum in another order; AdamW
   carries the differences on).
2. A pipeline of three processes on loopback (pipeline_test.py's cluster:
   2, 3 and 1 layers of a 6-layer model) with the middle stage on D and the
   others on the CPU gives the single CPU process's losses within the same
   tolerance, with tied embeddings (the tied gradient crosses a GPU stage's
   host copies) and without.
Skipped (77) with the reason when D is not usable here: `shardnode devices
--json` does not list it as ok.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nslib import Failure, check, corpus_and_tokenizer, free_ports, metrics, run  # noqa: E402
from pipeline_test import write_cluster, write_config, write_job  # noqa: E402

STEPS = 20   # --steps
RTOL = 1e-3


def losses_agree(name, got, want):
    check(len(got) == len(want) == STEPS, "%s: %d and %d metrics lines, want %d"
          % (name, len(got), len(want), STEPS))
    worst = 0.0
    for a, b in zip(got, want):
        rel = abs(a["loss"] - b["loss"]) / abs(b["loss"])
        worst = max(worst, rel)
        check(rel <= RTOL, "%s: step %d loss %.9g, CPU %.9g (rel %.1e > %g)"
              % (name, b["step"], a["loss"], b["loss"], rel, RTOL))
    return worst


def case(sn, wd, corpus, tok, device, name, tied):
    config = os.path.join(wd, name + "-config.json")
    write_config(config, tied)
    cpu_out, gpu_out, pipe_out = (os.path.join(wd, name + s) for s in ("-cpu", "-gpu", "-pipe"))
    jc = write_job(wd, name + "-cpu", corpus, tok, config, 2, cpu_out, steps=STEPS)
    jg = write_job(wd, name + "-gpu", corpus, tok, config, 2, gpu_out, steps=STEPS)
    jp = write_job(wd, name + "-pipe", corpus, tok, config, 2, pipe_out, steps=STEPS)
    mc, mg = os.path.join(wd, name + "-cpu.jsonl"), os.path.join(wd, name + "-gpu.jsonl")
    run([sn, "train", "--job", jc, "--metrics", mc, "--threads", "1"])
    run([sn, "train", "--job", jg, "--metrics", mg, "--device", device])
    want = metrics(mc)
    w1 = losses_agree("%s: one process on %s" % (name, device), metrics(mg), want)
    cluster = write_cluster(wd, name, free_ports(3))
    procs = []
    for i in range(3):
        cmd = [sn, "train", "--job", jp, "--cluster", cluster, "--node", "n%d" % i,
               "--metrics", os.path.join(wd, "%s-n%d.jsonl" % (name, i)), "--threads", "1"]
        if i == 1:
            cmd += ["--device", device]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    for i, (p, (o, e)) in enumerate(zip(procs, outs)):
        check(p.returncode == 0, "%s: node n%d exited %d:\n%s%s" % (name, i, p.returncode, o, e))
    w2 = 0.0
    for i in range(3):
        w2 = max(w2, losses_agree("%s: pipeline node n%d (n1 on %s)" % (name, i, device),
                                  metrics(os.path.join(wd, "%s-n%d.jsonl" % (name, i))), want))
    print("ok   %-10s %d steps: one process on %s worst loss rel diff %.1e; CPU|%s|CPU "
          "pipeline %.1e" % (name, STEPS, device, w1, device, w2))


def main():
    global STEPS
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--steps", type=int, default=STEPS,
                    help="steps of each run (an emulated device wants fewer)")
    args = ap.parse_args()
    STEPS = args.steps
    sn = os.path.abspath(args.shardnode)
    listed = json.loads(subprocess.run([sn, "devices", "--json"], check=True,
                                       stdout=subprocess.PIPE).stdout)
    if not any(d["device"] == args.device and d["status"] == "ok" for d in listed):
        vendor = args.device.split(":")[0]
        why = "; ".join(d.get("why", d["status"]) for d in listed
                        if d["device"].split(":")[0] == vendor)
        print("skip: %s is not usable here (%s)" % (args.device, why or "not listed"))
        sys.exit(77)
    wd = os.path.abspath(args.workdir)
    shutil.rmtree(wd, ignore_errors=True)
    os.makedirs(wd)
    try:
        corpus, tok = corpus_and_tokenizer(sn, wd)
        case(sn, wd, corpus, tok, args.device, "untied", False)
        case(sn, wd, corpus, tok, args.device, "tied", True)
    except Failure as e:
        print("FAIL " + str(e))
        sys.exit(1)
    print("gpu_pipeline_test: all checks passed")


if __name__ == "__main__":
    main()
