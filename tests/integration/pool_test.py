"""A pool that organises itself: four nodes in network namespaces joined over
wireguard-go, a job submitted from the one that holds no stage, a plan elected
without a leader, and training over the overlay equal to one process.

    /usr/bin/python3 tests/integration/pool_test.py --shardnode build/shardnode

1. Namespaces a, b, c, d on a bridge; `init` on a, chained invites b, c, d.
   c runs with --threads 1 (slower than a and b, which get 2 threads);
   d runs with --no-compute: a laptop that only submits and watches.
2. The single-process run of the job (the reference) trains first.
3. d submits the job (`train --state D --job J --wait`); every member
   reports the same committed plan hash; d holds no stage; whether the
   profiles show c slower and c holds fewer layers is printed (timings: not
   asserted); the loss at every step on every stage and the model d gathers
   over the mesh are the single-process run's, bit for bit (the kernels give
   the same bits whatever the thread cap); the measured step time is set
   against the plan's prediction (printed: reported, not asserted).
4. A second job naming a data file that only some members have (another
   hash on b) is reported in status naming the node and the file; a job
   whose model cannot fit in the pool's memory is reported with how much is
   missing; `train --stop` stops it everywhere; nothing hangs.

Needs root (namespaces, wireguard-go); exits 77 (skip) otherwise.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nslib import (Pool, check, check_gathered, log, metrics, pool_job_files,  # noqa: E402
                   requirements, run, run_test, write_json)

STEPS = 30
LOSS_RTOL = 0.0  # the same bits: docs/ARCHITECTURE.md, "Determinism"
TAG = "snp%d-" % os.getpid()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    sn = os.path.abspath(args.shardnode)
    t_start = time.time()
    rc = requirements("pool_test", sn)
    if rc:
        return rc
    t = Pool(sn, args.keep, TAG)
    return run_test("pool_test", lambda: body(t), t.report, t.cleanup, t_start)


def run_job(t, job, name, out, ref_metrics):
    """Submits a job from d and waits; checks one plan hash everywhere and every
    stage's loss against ref_metrics; returns (id, stages, predicted ms,
    measured median step ms, seconds)."""
    jp = job(name, out)
    t0 = time.time()
    p = t.sn_in("d", ["train", "--state", t.state("d"), "--job", jp, "--wait"], timeout=900,
                ok=False)
    elapsed = time.time() - t0
    log(p.stdout.strip())
    check(p.returncode == 0, "train --wait on d exited %d:\n%s%s" % (p.returncode, p.stdout,
                                                                     p.stderr))
    st = {n: t.status(n) for n in "abcd"}
    hashes = {n: (st[n]["job"]["committed"] or {}).get("h") for n in "abcd"}
    check(len(set(hashes.values())) == 1 and None not in hashes.values(),
          "members report different plans: %s" % hashes)
    c = st["a"]["job"]["committed"]
    jid = st["a"]["job"]["id"]
    stages = c["stages"]
    log("plan %s: %s; predicted step %.1f ms" % (hashes["a"], ", ".join(
        "%s layers %d-%d" % (s[0], s[1], s[2] - 1) for s in stages), c["step_ns"] / 1e6))
    worst = t.check_losses(stages, jid, ref_metrics, STEPS, LOSS_RTOL)
    log("ok   %s: every stage's loss equals one process at every step (worst rel %.1e)"
        % (name, worst))
    ms = [m["step_ms"] for m in metrics(os.path.join(t.state(stages[0][0]), "jobs", jid,
                                                     "metrics.jsonl"))][3:]
    return jid, stages, c.get("step_ns_shared", c["step_ns"]) / 1e6, sorted(ms)[len(ms) // 2], elapsed


def shown_on_a(t, jid, *needles):
    """a's `status` text once a carries job jid and the text holds every one of
    needles; None before."""
    s = t.status("a")
    if not s or (s.get("job") or {}).get("id") != jid:
        return None
    p = t.sn_in("a", ["status", "--state", t.state("a")], ok=False)
    return p.stdout if all(n in p.stdout for n in needles) else None


def body(t):
    wd, corpus, tok, config, job = pool_job_files(t, STEPS)
    # the reference: one process
    single_out = os.path.join(wd, "single")
    j1 = job("single", single_out)
    m1 = os.path.join(wd, "single.jsonl")
    t0 = time.time()
    run([t.sn, "train", "--job", j1, "--metrics", m1, "--threads", "1"])
    log("single process: %d steps in %.1f s" % (STEPS, time.time() - t0))

    ip = {"a": "10.203.0.11", "b": "10.203.0.12", "c": "10.203.0.13", "d": "10.203.0.14"}
    t.net.build(ip, {})
    opts = {"a": ["--threads", "2"], "b": ["--threads", "2"], "c": ["--threads", "1"],
            "d": ["--no-compute"]}
    t.grow(ip, "10.78.0.0/16", opts, 30)

    def all_alive():
        return t.all_alive("abcd", 4)
    t.wait("all four alive everywhere", all_alive, 60)
    log("mesh: 4 members alive")

    # Unequal nodes (c capped to 1 thread), the job from d
    ida, stages, pred, measured, elapsed = run_job(t, job, "pool-a", os.path.join(wd, "pool-a"),
                                                    m1)
    layers = {s[0]: s[2] - s[1] for s in stages}
    check("d" not in layers, "d (--no-compute) holds a stage: %s" % layers)
    # The profiler sees the cap: c's layer is slower than a's and b's. The plan
    # gives c fewer layers than the fastest and no more than any (profiles
    # are measured, so a and b may differ a little and tie with c).
    st = t.status("a")["job"]["members"]
    speed = {n: sum(st[n]["prof"]["f"][1:2] + st[n]["prof"]["k"][1:2]) for n in "abc"}
    log("layer forward + backward: a %.2f ms, b %.2f ms, c %.2f ms (c capped to 1 thread)"
        % (speed["a"] / 1e6, speed["b"] / 1e6, speed["c"] / 1e6))
    # Reported, not asserted: profiles are timings, and on a loaded 2-core
    # machine a 2-thread profile is not reliably faster than a 1-thread one
    # (the planner's use of profiles is asserted on fixed figures in
    # unit.test_plan).
    others = [layers.get("a", 0), layers.get("b", 0)]
    log("%s c (1 thread) profiled slower than a and b (2 threads), and it holds %s layers "
        "than they do" % ("as expected," if speed["c"] > max(speed["a"], speed["b"]) else
                          "NOTE: not",
                          "fewer" if layers.get("c", 0) < max(others) and
                          layers.get("c", 0) <= min(others) else "not fewer"))
    log("ok   %d steps in %.1f s, d holds no stage, c (1 thread) holds %d layer(s), "
        "a %s, b %s" % (STEPS, elapsed, layers.get("c", 0), layers.get("a", 0), layers.get("b", 0)))
    log("step time: measured median %.1f ms, plan predicted %.1f ms with the stages sharing "
        "this machine's cores (ratio %.2f, %s 25%%)" % (measured, pred, measured / pred,
                                                      "within" if abs(measured / pred - 1) <= 0.25
                                                      else "NOT within"))
    # The model d gathered over the mesh against the single process (the
    # kernels give the same bits whatever a node's thread cap)
    pipe_out = os.path.join(wd, "pool-a")
    wdiff = check_gathered(pipe_out, single_out, 0.0)
    for f in ("config.json", "tokenizer.json"):
        check(os.path.exists(os.path.join(pipe_out, f)), "gathered model lacks %s" % f)
    log("ok   the model d gathered equals one process to %.1e (max rel)" % wdiff)
    # Issue 12: the job's out_dir is its submitter's (d) only; every other
    # member would gather under its own state directory
    for n in "abc":
        got = t.status(n)["job"]["out_dir"]
        check(got == os.path.join(t.state(n), "jobs", ida, "model"),
              "%s would gather d's job into %s, not under its state directory" % (n, got))
    check(t.status("d")["job"]["out_dir"] == pipe_out, "d's out_dir: %s"
          % t.status("d")["job"]["out_dir"])
    # each stage had a HELLO key (0600) for every other stage, and for no one else
    names = sorted(s[0] for s in stages)
    epoch = t.status("a")["job"]["committed"]["e"]
    for n in names:
        kp = os.path.join(t.state(n), "jobs", ida, "hello-e%d.json" % epoch)
        check(os.path.exists(kp), "stage %s has no %s" % (n, kp))
        check(os.stat(kp).st_mode & 0o777 == 0o600, "%s is mode %o" % (kp, os.stat(kp).st_mode))
        with open(kp) as f:
            keys = json.load(f)
        check(sorted(keys) == [m for m in names if m != n], "%s names %s" % (kp, sorted(keys)))
    log("ok   only d would write its out_dir; stages held HELLO keys for each other (0600)")

    # A paced FETCH (a buddy's copies are: docs/PROTOCOL.md, "Recovery"): d
    # copies a stage's file at --rate R; the bytes are the stage's, and the
    # copy took at least size / R (the client sleeps until the pace allows
    # each next piece, the last one included). A --rate that is not a whole
    # number of at least 64 KiB a second is refused, naming the flag.
    n = names[0]
    rel = "jobs/%s/out/stage-%s.safetensors" % (ida, n)
    src = os.path.join(t.state(n), rel)
    size = os.path.getsize(src)
    rate = max(65536, int(size / 1.5))
    st_d = t.status("d")
    addr = {m["name"]: m["address"] for m in st_d["members"]}
    port = {m["name"]: m["gossip_port"] for m in st_d["members"]}
    dest = os.path.join(wd, "paced.safetensors")
    env = dict(os.environ, SHARDNODE_STATE=t.state("d"))
    base = ["ip", "netns", "exec", t.net.full("d"), t.sn, "fetch", "--out", dest, "--mesh",
            st_d["mesh_id"], "--from", "d", "--bind", addr["d"]]
    target = ["--path", rel, "%s=%s:%d" % (n, addr[n], port[n])]
    t0 = time.time()
    p = subprocess.run(base + ["--rate", str(rate)] + target, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    took = time.time() - t0
    check(p.returncode == 0, "paced fetch exited %d: %s" % (p.returncode, p.stderr))
    with open(src, "rb") as f1, open(dest, "rb") as f2:
        check(f1.read() == f2.read(), "the paced copy of %s differs from the stage's" % rel)
    check(took >= size / rate, "%d bytes at --rate %d took %.2f s, under %.2f s"
          % (size, rate, took, size / rate))
    for bad in ("1000", "12x", "-5"):
        p = subprocess.run(base + ["--rate", bad] + target, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env, timeout=30)
        check(p.returncode == 2 and "--rate %s" % bad in p.stderr,
              "fetch --rate %s: exit %d, %r" % (bad, p.returncode, p.stderr))
    log("ok   a paced fetch of %s (%d bytes at %d bytes/s) took %.2f s (>= %.2f); bad --rate "
        "refused" % (rel, size, rate, took, size / rate))

    # a job naming a file b has with another hash, then one too big for the pool
    other = os.path.join(wd, "corpus-b.txt")
    shutil.copy(corpus, other)
    nodejs = os.path.join(t.state("b"), "node.json")
    with open(nodejs) as f:
        nj = json.load(f)
    nj["paths"] = {"corpus.txt": other}
    write_json(nodejs, nj)
    with open(other, "a") as f:
        f.write("one more line only b has\n")
    # node.json is read when a job arrives; b is restarted to read it
    t.procs["b"].send_signal(signal.SIGTERM)
    t.procs["b"].wait(timeout=20)
    t.start("b", ["up", "--state", t.state("b")] + opts["b"])
    t.wait("b back", lambda: all_alive(), 60)
    jl = job("lacking", os.path.join(wd, "lacking-out"), seed=5)
    out = t.sn_in("d", ["train", "--state", t.state("d"), "--job", jl]).stdout
    jid = out.split("train: job ")[1].split()[0]

    out = t.wait("the lacking file in status", lambda: shown_on_a(
        t, jid, "problem: b lacks the job's data", "corpus.txt"), 60)
    log("ok   lacking file reported: " + [ln for ln in out.splitlines() if "lacks" in ln][0])
    t.sn_in("d", ["train", "--state", t.state("d"), "--stop"])

    def stopped():
        for n in "abcd":
            j = (t.status(n) or {}).get("job") or {}
            if j.get("id") != jid or not j.get("stop"):
                return False
        return True
    t.wait("the stop everywhere", stopped, 30)
    log("ok   --stop reached every member")
    big = write_json(os.path.join(wd, "big-config.json"), dict(
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=16384,
        intermediate_size=53248, num_hidden_layers=120, num_attention_heads=128,
        num_key_value_heads=8, vocab_size=512, max_position_embeddings=64, rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=False))
    jb = job("big", os.path.join(wd, "big-out"), config=big, seed=6)
    out = t.sn_in("d", ["train", "--state", t.state("d"), "--job", jb]).stdout
    bid = out.split("train: job ")[1].split()[0]

    out = t.wait("the memory shortfall in status", lambda: shown_on_a(
        t, bid, "problem: no plan fits"), 300)
    log("ok   too big reported: " + [ln for ln in out.splitlines() if "no plan fits" in ln][0])
    t.sn_in("d", ["train", "--state", t.state("d"), "--stop"])


if __name__ == "__main__":
    sys.exit(main())
