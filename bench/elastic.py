"""Recovery from a lost member: what it costs (docs/ARCHITECTURE.md, "Recovery").

    /usr/bin/python3 bench/elastic.py --shardnode build/shardnode [--trials 10] [--seed 1]

A pool of five members in network namespaces over wireguard-go (a, b, c, d
compute with one thread each — `--compute` may name fewer; the others keep
copies only — and e submits and watches), the demo's model
(configs/kjv/config.json: hidden 256, 4 layers) on the KJV text, batch 16
of 128 tokens in micro-batches of 4, snapshots as the pool chooses them
(the job sets none). Timings only, never pass/fail.

1. Insurance: the same job without snapshots (`snapshot_every` twice the
   job's steps) and with them, alternately, `--pairs` times (then up to
   `--extra` runs more while no cut of the layers came up both ways): the mean step
   time of each run (step_ms counts what a stage does between steps:
   snapshots, waits for a buddy's copy), and for each cut of the layers
   that came up both ways the ratio of their medians (the cost of snapshots
   and of the buddies' copies; runs that were planned differently do not
   compare).
2. `--trials` failures: a job is submitted from e; at a step drawn at random
   (seeded) every process of a stage holder drawn at random is killed
   (SIGKILL, as a machine that loses power); the pool recovers by itself.
   Per trial: the seconds from the kill to the members' noticing it
   (detection), to the new plan's commit, to the first step after it; the
   MB of snapshots moved to the new stages and their MB/s (stage-resume's
   lines); the steps redone; the seconds lost in all (the time from the
   kill to the end of the run, less the time the steps left would have
   taken at the new plan's mean step time, its snapshots and copy waits
   included; up to the last step, not the model's gathering after it);
   whether every loss every survivor wrote
   equals the uninterrupted run's at that step. The killed member is started
   again before the next trial.
3. `--joins` planned switches (docs/ARCHITECTURE.md, "Planned switches"): a
   computes alone (b, c keep copies only, d is down), a job is submitted, d
   comes up at a step drawn at random (with `--join-threads` threads, 1 by
   default: on 2 cores a second member of one thread beside a gains little
   over these links, one of two threads does), and the pool switches to a plan with
   it when the rule says so; at a later step drawn at random d gets SIGTERM
   and hands its layers back before it stops. Per switch: the step after
   which the stages handed over, the MB moved and the MB/s each fetch
   achieved against the link's bandwidth as its two ends measured it, the
   pause (how much longer than a step of the new plan the first step after
   the handover came after the old plan's last step, from the metrics'
   "time"), the seconds from the commit to the first step after the
   handover (swr.ms: the old stages' last step and one new step included),
   and the step time of the new plan measured (the
   median of its first stage's step_ms after 3 steps) against the one
   predicted; whether every loss equals the uninterrupted run's.

Needs root (namespaces, wireguard-go).
"""

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from nslib import Pool, Failure, log, metrics, requirements, run, write_json  # noqa: E402

NAMES = "abcde"
STEPS = 80     # --steps
TAG = "snb%d-" % os.getpid()


def status_job(t, n):
    s = t.status(n)
    return (s or {}).get("job") or {}


def job_metrics(t, n, jid):
    path = os.path.join(t.state(n), "jobs", jid, "metrics.jsonl")
    return [m for m in metrics(path) if "step" in m] if os.path.exists(path) else []


def ref_losses(t, jid):
    """Every step's loss of a run, from every member's metrics: a run that
    re-planned itself (a switch the pool made by its own measures) has its
    first stage on another member after it, which writes the later steps."""
    ref = {}
    for n in NAMES:
        for m in job_metrics(t, n, jid):
            if "loss" in m:
                ref.setdefault(m["step"], m["loss"])
    return ref


def log_times(t, n, pattern):
    """The times (Unix s) of node n's log lines matching pattern."""
    out = []
    try:
        with open(os.path.join(t.state(n), "node.log"), errors="replace") as f:
            for ln in f:
                if re.search(pattern, ln):
                    out.append(time.mktime(time.strptime(ln[:19], "%Y-%m-%d %H:%M:%S")))
    except OSError:
        pass
    return out


def submit(t, jp, prev):
    sub = subprocess.Popen(["ip", "netns", "exec", t.net.full("e"), t.sn, "train", "--state",
                            t.state("e"), "--job", jp, "--wait"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def new_commit():
        j = status_job(t, "e")
        return (j["id"], j["committed"]) if j.get("id") not in (None, prev) and \
            j.get("committed") else None
    jid, c = t.wait("a committed plan", new_commit, 600)
    return sub, jid, c


def finish(sub, what):
    o, e = sub.communicate(timeout=1800)
    if sub.returncode != 0:
        raise Failure("%s: train --wait exited %d:\n%s%s" % (what, sub.returncode, o, e))
    return o


def median_step(t, stages, jid):
    ms = [m["step_ms"] for m in job_metrics(t, stages[0][0], jid)][5:]
    return statistics.median(ms) if ms else float("nan")


def mean_step(t, stages, jid):
    """The mean of the first stage's step_ms after its first 5 steps: a
    stage's step_ms runs from its previous step's line, so the snapshots
    written and any wait for a buddy's copy count (a median would hide
    them: they come every few steps)."""
    ms = [m["step_ms"] for m in job_metrics(t, stages[0][0], jid)][5:]
    return statistics.mean(ms) if ms else float("nan")


def kill_member(t, n):
    ns = t.net.full(n)
    for pid in t.net.pids(ns):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    t.net.kill_all(ns, signal.SIGKILL)
    t.procs.pop(n).wait(timeout=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", default=os.path.join(ROOT, "build", "shardnode"))
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--extra", type=int, default=4,
                    help="insurance runs after the pairs while no cut of the layers came up "
                         "both with and without snapshots (default 4)")
    ap.add_argument("--joins", type=int, default=0,
                    help="join-and-leave trials after the failures (default 0)")
    ap.add_argument("--join-threads", type=int, default=1,
                    help="the threads d joins with in --joins (default 1)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--snapshot-every", type=int, default=0,
                    help="the job's snapshot_every for the insurance's 'on' runs and the "
                         "trials (default: none, the pool's choice)")
    ap.add_argument("--steps", type=int, default=80, help="the job's steps (default 80)")
    ap.add_argument("--compute", default="abcd",
                    help="the members of a, b, c, d that compute (the others, like e, vote, "
                         "watch and keep copies: --no-compute); default abcd")
    args = ap.parse_args()
    global STEPS
    STEPS = args.steps
    sn = os.path.abspath(args.shardnode)
    if requirements("bench/elastic", sn):
        return 0
    t = Pool(sn, args.keep, TAG)
    try:
        return body(t, args)
    except Failure as e:
        log("FAIL " + str(e))
        t.report()
        return 1
    finally:
        t.cleanup()


def body(t, args):
    rng = random.Random(args.seed)
    wd = os.path.join(t.tmp, "data")
    os.makedirs(wd)
    text = os.path.join(wd, "kjv.txt")
    with open(text, "w") as f:
        f.write(subprocess.run(["bible", "Gen1:1-Rev22:21"], stdout=subprocess.PIPE, text=True,
                               check=True).stdout)
    tok = os.path.join(wd, "tokenizer.json")
    run([t.sn, "tokenizer", "train", "--input", text, "--vocab-size", "2048", "--out", tok])
    config = os.path.join(ROOT, "configs", "kjv", "config.json")

    def job(name, **over):
        j = {"config": config, "tokenizer": tok,
             "data": {"files": [text], "separator": "\n\n", "val_fraction": 0.02},
             "seq_len": 128, "batch": 16, "micro_batch": 4, "steps": STEPS, "lr": 3e-3,
             "min_lr": 3e-4, "warmup_steps": 10, "seed": 1, "log_interval": 1000,
             "val_interval": 0, "checkpoint_interval": 0, "out_dir": os.path.join(wd, name)}
        j.update(over)
        return write_json(os.path.join(wd, name + ".json"), j)

    ip = {n: "10.205.0.%d" % (11 + i) for i, n in enumerate(NAMES)}
    t.net.build(ip, {})
    opts = {n: ["--threads", "1"] if n in args.compute else ["--no-compute"] for n in "abcd"}
    opts["e"] = ["--no-compute"]
    t.grow(ip, "10.80.0.0/16", opts, 30)
    t.wait("all five alive", lambda: t.all_alive(NAMES, 5), 120)
    print("load before: %s" % open("/proc/loadavg").read().split()[:3], flush=True)

    prev = None
    # 1. insurance: snapshots off (an interval past the job) and on (the pool's)
    # Runs compare only at the same cut of the layers (the members profile
    # themselves for each job, and a busy moment can elect another; a, b, c
    # and d are alike, so which one holds a range does not matter): the
    # ratio compares snapshots, not plans. Off and on alternate; each cut
    # that both got gives a ratio of their medians, and the figure is the
    # median of those ratios (weighted by nothing: few cuts occur).
    by_cut = {"off": {}, "on": {}}
    every = None
    ref = None
    mine = {"snapshot_every": args.snapshot_every} if args.snapshot_every > 0 else {}
    def insurance_run(kind, i):
        nonlocal prev, every, ref
        # off: snapshots every ceil(se / 2) steps, never at the last
        over = {"snapshot_every": 2 * STEPS} if kind == "off" else dict(mine)
        sub, jid, c = submit(t, job("ins-%s-%d" % (kind, i), **over), prev)
        finish(sub, "insurance")
        prev = jid
        ms = mean_step(t, c["stages"], jid)
        cut = " ".join("%d-%d" % (s_[1], s_[2]) for s_ in c["stages"])
        by_cut[kind].setdefault(cut, []).append(ms)
        if kind == "on":
            every = c.get("se")
        if ref is None:
            ref = ref_losses(t, jid)
        print("insurance %-3s run %d: mean step %.1f ms (plan: %s%s)"
              % (kind, i, ms, " ".join("%s:%d-%d" % tuple(s_[:3]) for s_ in c["stages"]),
                 ", snapshot_every %s" % c.get("se") if kind == "on" else ""),
              flush=True)

    for i in range(args.pairs):
        for kind in ("off", "on"):
            insurance_run(kind, i)
    # --extra runs while no cut came up both ways: of the kind that lacks
    # one (the elections cut the layers by noisy profiles; a cut that came
    # up once may come up again)
    for i in range(args.pairs, args.pairs + args.extra if args.pairs > 0 else 0):
        if set(by_cut["off"]) & set(by_cut["on"]):
            break
        runs = {k: sum(len(v) for v in by_cut[k].values()) for k in by_cut}
        insurance_run("on" if runs["on"] <= runs["off"] else "off", i)
    ratios = []
    for cut in sorted(set(by_cut["off"]) & set(by_cut["on"])):
        a, b = statistics.median(by_cut["off"][cut]), statistics.median(by_cut["on"][cut])
        ratios.append(b / a)
        print("insurance, layers cut %s: mean step %.1f ms without snapshots (%d runs), "
              "%.1f ms with snapshot_every %s (%d runs): ratio %.3f (%+.1f%%)"
              % (cut, a, len(by_cut["off"][cut]), b, every, len(by_cut["on"][cut]), b / a,
                 100 * (b / a - 1)), flush=True)
    if ratios:
        ratio = statistics.median(ratios)
        print("insurance: step time with snapshots / without: %.3f (%+.1f%%)"
              % (ratio, 100 * (ratio - 1)), flush=True)
    else:
        ratio = float("nan")
        if args.pairs > 0:
            print("insurance: no cut of the layers came up both with and without snapshots; "
                  "no ratio (run more --pairs)", flush=True)

    if ref is None:
        # no insurance runs: one uninterrupted run gives the losses to match
        sub, jid, c = submit(t, job("reference"), prev)
        finish(sub, "reference")
        prev = jid
        ref = ref_losses(t, jid)
        print("reference: an uninterrupted run of %d steps (plan: %s)"
              % (STEPS, " ".join("%s:%d-%d" % tuple(s_[:3]) for s_ in c["stages"])), flush=True)

    # 2. failures
    rows = []
    for k in range(args.trials):
        sub, jid, c = submit(t, job("trial-%d" % k, **mine), prev)
        prev = jid
        stages = c["stages"]
        victim = rng.choice([s[0] for s in stages])
        at = rng.randint(5, STEPS - 20)

        def reached():
            m = job_metrics(t, stages[0][0], jid)
            return m and m[-1]["step"] >= at
        t.wait("step %d" % at, reached, 900)
        done = max((m["step"] for n in "abcd" for m in job_metrics(t, n, jid)), default=0)
        t_kill = time.time()
        kill_member(t, victim)
        o = finish(sub, "trial %d" % k)
        t_end = time.time()
        j = status_job(t, "e")
        c2 = j["committed"]
        rec = j["members"]["e"].get("rec") or {}
        survivors = [n for n in NAMES if n not in (victim, "e")]
        seen = [t_ for n in survivors for t_ in log_times(t, n, r"pool: (lost|the pipeline "
                                                          r"broke)") if t_ >= t_kill - 1]
        commits = [t_ for n in survivors for t_ in log_times(t, n, "epoch %d committed"
                                                           % c2["e"]) if t_ >= t_kill - 1]
        moved_mb, moved_s = 0.0, 0.0
        for n in survivors:
            try:
                with open(os.path.join(t.state(n), "jobs", jid, "train.log")) as f:
                    for ln in f:
                        m = re.search(r"stage-resume: \S+ \(([\d.]+) MB\) from \S+ in ([\d.]+) s",
                                      ln)
                        if m:
                            moved_mb += float(m.group(1))
                            moved_s += float(m.group(2))
            except OSError:
                pass
        med = mean_step(t, c2["stages"], jid)
        left = STEPS - done
        # the run's last step (its metrics line, the last the file gets),
        # not finish()'s return, which also waits for the model's gathering
        # (there whether or not a member was lost)
        last = [os.path.getmtime(p) for p in
                [os.path.join(t.state(n), "jobs", jid, "metrics.jsonl") for n in survivors]
                if os.path.exists(p)]
        t_last = max(last) if last else t_end
        lost_s = (t_last - t_kill) - left * med / 1e3
        equal = all(m["loss"] == ref.get(m["step"]) for n in survivors
                    for m in job_metrics(t, n, jid) if "loss" in m)
        rows.append(dict(victim=victim, at=done, detect=(min(seen) - t_kill) if seen else None,
                         commit=(min(commits) - t_kill) if commits else None,
                         first=rec.get("ms", -1) / 1e3, mb=moved_mb,
                         mbps=moved_mb / moved_s if moved_s > 0 else None,
                         redone=done - c2.get("rs", 0), lost=lost_s, every=c.get("se"),
                         equal=equal))
        r = rows[-1]
        print("trial %2d: %s killed after step %2d (snapshot_every %s): detected %s s, committed "
              "%s s, first step %.1f s; %.1f MB moved%s; %d steps redone; %.1f s lost; losses %s"
              % (k, victim, done, c.get("se"),
                 "%.1f" % r["detect"] if r["detect"] is not None else "?",
                 "%.1f" % r["commit"] if r["commit"] is not None else "?", r["first"], r["mb"],
                 " at %.1f MB/s" % r["mbps"] if r["mbps"] else "", r["redone"], r["lost"],
                 "equal to the uninterrupted run" if equal else "DIFFER"), flush=True)
        t.start(victim, ["up", "--state", t.state(victim)] + opts[victim])
        t.wait("%s back" % victim, lambda: t.all_alive(NAMES, 5), 120)
    if rows:
        print("failures: %d trials, %d with the uninterrupted run's losses; median seconds lost "
              "%.1f (max %.1f), median first step after the loss %.1f s, median steps redone %d"
              % (len(rows), sum(r["equal"] for r in rows),
                 statistics.median(r["lost"] for r in rows), max(r["lost"] for r in rows),
                 statistics.median(r["first"] for r in rows),
                 statistics.median(r["redone"] for r in rows)), flush=True)
        print(json.dumps({"insurance": {"ratio": ratio, "every": every},
                          "trials": rows}))
    if args.joins > 0:
        joins(t, args, rng, job, ref, prev, opts)
    print("load after: %s" % open("/proc/loadavg").read().split()[:3])
    return 0


def fetches(t, n, jid, since):
    """The stage-resume fetches in n's train.log from line `since` on:
    [(MB, s, MB/s, from)], and the line count."""
    out, k = [], 0
    try:
        with open(os.path.join(t.state(n), "jobs", jid, "train.log"), errors="replace") as f:
            for k, ln in enumerate(f, 1):
                m = re.search(r"stage-resume: \S+ \(([\d.]+) MB\) from (\S+) in ([\d.]+) s",
                              ln)
                if m and k > since:
                    mb, s_ = float(m.group(1)), float(m.group(3))
                    out.append((mb, s_, mb / s_ if s_ > 0 else float("nan"), m.group(2)))
    except OSError:
        pass
    return out, k


def step_end(t, jid, step):
    """When step `step` of a run was done: the latest end (metrics "time")
    that any member's stage wrote for it (None: no line has a time)."""
    ts = [m["time"] for n in NAMES for m in job_metrics(t, n, jid)
          if m["step"] == step and "time" in m]
    return max(ts) if ts else None


def link_mbps(j, x, y):
    """The bandwidth (MB/s) between x and y as their documents measured it:
    the larger of the two ends' figures (each end measures its own probes)."""
    bw = []
    for a, b in ((x, y), (y, x)):
        k = (((j.get("members") or {}).get(a) or {}).get("links") or {}).get(b)
        if k and len(k) >= 2 and k[1] > 0:
            bw.append(k[1] / 1e6)
    return max(bw) if bw else None


def joins(t, args, rng, job, ref, prev, opts):
    """Section 3 of the docstring: d joins a running job and leaves it."""
    for n in "bcd":
        kill_member(t, n)
    for n in "bc":
        t.start(n, ["up", "--state", t.state(n), "--no-compute"])
    t.wait("a, b, c, e alive and d down", lambda: t.all_alive("abce", 4), 120)
    out = []
    for k in range(args.joins):
        # the job's own keys: switches as early as the rule allows
        sub, jid, c0 = submit(t, job("join-%d" % k, replan_min_steps=2), prev)
        prev = jid
        up_at = rng.randint(2, 6)
        t.wait("step %d" % up_at, lambda: (job_metrics(t, "a", jid) or [{"step": 0}])[-1]
               ["step"] >= up_at, 600)
        t.start("d", ["up", "--state", t.state("d"), "--threads", str(args.join_threads)])

        def switched(why):
            j = status_job(t, "e")
            sw = ((j.get("members") or {}).get("e") or {}).get("swr") or {}
            return (sw, j["committed"], j) if sw.get("why") == why and "ms" in sw else None
        got = t.wait("a switch with d, or the job's end",
                     lambda: switched("joined") or (sub.poll() is not None and "end"), 900)
        if got == "end":
            finish(sub, "join %d" % k)
            j = status_job(t, "e")
            print("join %d: d came up after step %d; no switch (d says: %s)"
                  % (k, up_at, (j["members"].get("d") or {}).get("why")), flush=True)
            kill_member(t, "d")
            t.wait("d gone", lambda: t.all_alive("abce", 4), 120)
            continue
        sw1, c1, j1 = got
        leave_at = sw1["from"] + rng.randint(10, 20)
        # the step of the run, from whichever of a and d computes (a plan with
        # d may leave a out)
        t.wait("step %d" % leave_at, lambda: max([m["step"] for n in "ad"
                                                   for m in job_metrics(t, n, jid)]
                                                  or [0]) >= leave_at, 600)
        p = t.procs.pop("d")
        t_term = time.time()
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=150)
        gone_s = time.time() - t_term
        finish(sub, "join %d" % k)
        j = status_job(t, "e")
        sw2, c2 = (j["members"]["e"].get("swr") or {}), j["committed"]
        equal = all(m["loss"] == ref.get(m["step"]) for n in "ad" for m in job_metrics(t, n, jid)
                    if "loss" in m)
        redone = sum(len(job_metrics(t, n, jid)) - len({m["step"] for m in job_metrics(t, n, jid)})
                     for n in "ad")
        for what, sw, c, jj in (("join", sw1, c1, j1), ("leave", sw2, c2, j)):
            if what == "leave" and sw.get("why") != "left":
                print("join %d: no switch when d left (e's record: %s; %s)"
                      % (k, sw, "recovered" if j["members"]["e"].get("rec") else "no recovery"),
                      flush=True)
                continue
            fetched = []
            # each member once (d is among the join's stages too: counted
            # twice until 2026-12-07, which doubled the MB fetched)
            for n in sorted({s_[0] for s_ in c["stages"]} | ({"d"} if what == "join" else set())):
                fetched += [(n,) + f for f in fetches(t, n, jid, 0)[0]]
            # the fetches of this switch: those into its new stages (a fetches again at the
            # leave; d only at the join)
            rows = [f for f in fetched if (what == "join" and f[0] == "d") or
                    (what == "leave" and f[0] == "a")]
            ms = [m["step_ms"] for m in job_metrics(t, c["stages"][0][0], jid)
                  if m["step"] > sw["from"] + 3 and (what == "leave" or m["step"] <= sw2["from"])]
            meas = statistics.median(ms) if ms else float("nan")
            mb = sum(r[1] for r in rows)
            secs = sum(r[2] for r in rows)
            bw = [link_mbps(jj, r[0], r[4]) for r in rows]
            bw = [b for b in bw if b]
            # the pause: how much longer than a step of the new plan the step
            # after the handover came after the last step of the old one
            t0, t1 = step_end(t, jid, sw["from"]), step_end(t, jid, sw["from"] + 1)
            gap = t1 - t0 if t0 is not None and t1 is not None else float("nan")
            r = dict(k=k, what=what, after=sw["from"], mb=sw.get("mb"), fetched_mb=mb,
                     gap=gap, paused=gap - meas / 1e3,
                     mbps=mb / secs if secs > 0 else None,
                     link_mbps=min(bw) if bw else None, pause=sw.get("ms", -1) / 1e3,
                     pred=sw.get("pred"), meas=meas, equal=equal, redone=redone,
                     term_s=gone_s if what == "leave" else None)
            out.append(r)
            print("join %d, %-5s: handed over after step %d; %.1f MB moved (fetched %.1f MB at "
                  "%s MB/s, link %s MB/s: %s); paused %.2f s (steps %d and %d %.2f s apart); "
                  "first step %.1f s after the commit; step %.1f ms measured, %.1f ms predicted "
                  "(%+.0f%%)%s"
                  % (k, what, r["after"], r["mb"] or 0, mb,
                     "%.1f" % r["mbps"] if r["mbps"] else "?",
                     "%.1f" % r["link_mbps"] if r["link_mbps"] else "?",
                     "%.0f%%" % (100 * r["mbps"] / r["link_mbps"]) if r["mbps"] and
                     r["link_mbps"] else "?", r["paused"], r["after"], r["after"] + 1, r["gap"],
                     r["pause"], meas, r["pred"] or 0,
                     100 * (meas / r["pred"] - 1) if r["pred"] else 0,
                     "; SIGTERM to exit %.1f s" % gone_s if what == "leave" else ""),
                  flush=True)
        print("join %d: %d steps redone; losses %s" % (k, redone, "equal to the uninterrupted "
              "run" if equal else "DIFFER"), flush=True)
        # d stopped: the others see it gone before the next job
        t.wait("d gone", lambda: t.all_alive("abce", 4), 120)
    if out:
        print(json.dumps({"switches": out}))


if __name__ == "__main__":
    sys.exit(main())
