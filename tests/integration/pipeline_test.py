"""A pipeline of real processes on loopback against the single process.

    /usr/bin/python3 tests/integration/pipeline_test.py --shardnode build/shardnode --workdir DIR

1. Three `shardnode train --cluster` processes (uneven stages: 2, 3 and 1
   layers of a 6-layer model, head on the last) train 50 steps; the loss at
   every step must equal the single-process run of the same job to 1e-5
   relative, with 1 micro-batch, with 8 (1F1B), with 8 under GPipe, and with
   tied embeddings (whose gradient crosses from the last stage to the first);
   `shardnode export` then merges the stages into a model equal to the
   single-process model to 1e-5.
2. A stage killed with SIGKILL makes the other two stop within their timeout
   with an error that names the lost peer: no hang. SIGUSR1 to one stage
   (the middle, then the last) stops all three after one same step; resumed
   with --resume from their checkpoints they finish with the losses and
   weights of a run never stopped, bit for bit; --resume without a
   checkpoint is refused naming the file. A queued SIGUSR2 carrying a
   thread count changes a running stage's threads from its next step (at
   most those it started with), the losses unchanged.
3. A connection claiming a stage's name from another address is dropped and
   its closing does not end the run.
"""

import argparse
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nslib import (Failure, check, corpus_and_tokenizer, free_ports, max_rel_diff,  # noqa: E402
                   metrics, run)

STEPS = 50
LOSS_RTOL = 1e-5


def write_config(path, tied):
    cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=64,
               intermediate_size=176, num_hidden_layers=6, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=512, max_position_embeddings=64,
               rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=tied)
    with open(path, "w") as f:
        json.dump(cfg, f)


def write_job(wd, name, corpus, tok, config, micro_batch, out, grad_clip=None, steps=STEPS):
    job = {"config": config, "tokenizer": tok,
           "data": {"files": [corpus], "separator": "\n\n", "val_fraction": 0.05},
           "seq_len": 32, "batch": 8, "micro_batch": micro_batch, "steps": steps,
           "lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 5, "seed": 3, "log_interval": 1000,
           "out_dir": out}
    if grad_clip is not None:
        job["grad_clip"] = grad_clip
    path = os.path.join(wd, name + ".json")
    with open(path, "w") as f:
        json.dump(job, f, indent=1)
    return path


def write_cluster(wd, name, ports, schedule="1f1b", timeout_ms=20000, wire="f32"):
    layers = [[0, 2], [2, 5], [5, 6]]
    cl = {"run": name, "schedule": schedule, "timeout_ms": timeout_ms, "wire_dtype": wire,
          "nodes": [{"name": "n%d" % i, "host": "127.0.0.1", "port": ports[i],
                     "layers": layers[i]} for i in range(3)]}
    path = os.path.join(wd, name + "-cluster.json")
    with open(path, "w") as f:
        json.dump(cl, f, indent=1)
    return path


def start_nodes(sn, job, cluster, wd, name, extra=(), only=(0, 1, 2), keep_metrics=False):
    procs = []
    for i in only:
        m = os.path.join(wd, "%s-n%d.jsonl" % (name, i))
        if os.path.exists(m) and not keep_metrics:  # a stale file would look like progress
            os.unlink(m)
        cmd = [sn, "train", "--job", job, "--cluster", cluster, "--node", "n%d" % i,
               "--metrics", m, "--threads", "1"] + list(extra)
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    return procs


def check_equal_run(sn, wd, corpus, tok, name, tied, micro_batch, schedule, wire="f32",
                    rtol=LOSS_RTOL, wtol=1e-5, grad_clip=None):
    config = os.path.join(wd, name + "-config.json")
    write_config(config, tied)
    single_out = os.path.join(wd, name + "-single")
    pipe_out = os.path.join(wd, name + "-pipe")
    job1 = write_job(wd, name + "-single", corpus, tok, config, micro_batch, single_out, grad_clip)
    jobp = write_job(wd, name + "-pipe", corpus, tok, config, micro_batch, pipe_out, grad_clip)
    m1 = os.path.join(wd, name + "-single.jsonl")
    t0 = time.time()
    run([sn, "train", "--job", job1, "--metrics", m1, "--threads", "1"])
    t1 = time.time()
    cluster = write_cluster(wd, name, free_ports(3), schedule, wire=wire)
    procs = start_nodes(sn, jobp, cluster, wd, name)
    outs = [p.communicate(timeout=600) for p in procs]
    t2 = time.time()
    for i, (p, (o, e)) in enumerate(zip(procs, outs)):
        check(p.returncode == 0, "%s: node n%d exited %d:\n%s%s" % (name, i, p.returncode, o, e))
    want = metrics(m1)
    worst = 0.0
    for i in range(3):
        got = metrics(os.path.join(wd, "%s-n%d.jsonl" % (name, i)))
        check(len(got) == STEPS, "%s: node n%d wrote %d metrics lines" % (name, i, len(got)))
        for a, b in zip(got, want):
            rel = abs(a["loss"] - b["loss"]) / abs(b["loss"])
            worst = max(worst, rel)
            check(rel <= rtol, "%s: step %d loss %.9g on node n%d, single process %.9g"
                  % (name, b["step"], a["loss"], i, b["loss"]))
    run([sn, "export", "--job", jobp, "--cluster", cluster])
    wdiff = max_rel_diff(os.path.join(pipe_out, "model.safetensors"),
                         os.path.join(single_out, "model.safetensors"), "%s: exported" % name)
    check(wtol is None or wdiff <= wtol, "%s: exported model differs by %.2e (max rel) from the single process"
          % (name, wdiff))
    print("ok   %-28s %d steps: worst loss rel diff %.1e, exported weights rel diff %.1e "
          "(single %.1f s, 3 processes %.1f s)" % (name, STEPS, worst, wdiff, t1 - t0, t2 - t1))


def short_job(wd, name, corpus, tok, steps):
    """WD/NAME.json: a job of steps steps on the untied model, in micro-batches of 2."""
    config = os.path.join(wd, name + "-config.json")
    write_config(config, False)
    return write_job(wd, name, corpus, tok, config, 2, os.path.join(wd, name + "-out"),
                     steps=steps)


def check_kill(sn, wd, corpus, tok):
    job = short_job(wd, "kill", corpus, tok, 100000)
    timeout_ms = 5000
    cluster = write_cluster(wd, "kill", free_ports(3), timeout_ms=timeout_ms)
    procs = start_nodes(sn, job, cluster, wd, "kill")
    m0 = os.path.join(wd, "kill-n0.jsonl")
    t_end = time.time() + 60
    while time.time() < t_end:  # let it train a few steps
        if os.path.exists(m0) and len(metrics(m0)) >= 3:
            break
        check(all(p.poll() is None for p in procs), "kill: a node stopped before the kill")
        time.sleep(0.05)
    check(os.path.exists(m0) and len(metrics(m0)) >= 3, "kill: the pipeline made no progress")
    procs[1].send_signal(signal.SIGKILL)
    t_kill = time.time()
    for i in (0, 2):
        try:
            out, errs = procs[i].communicate(timeout=timeout_ms / 1000 + 20)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise Failure("kill: node n%d still runs %.0f s after its neighbour was killed"
                          % (i, time.time() - t_kill))
        check(procs[i].returncode not in (0, None) and procs[i].returncode > 0,
              "kill: node n%d exited %s" % (i, procs[i].returncode))
        lines = [ln for ln in errs.splitlines() if ln.startswith("shardnode train:")]
        check(lines and "n1" in lines[-1], "kill: node n%d's error does not name n1:\n%s"
              % (i, errs))
        print("ok   kill: node n%d stopped %.1f s after n1 was killed: %s"
              % (i, time.time() - t_kill, lines[-1]))
    procs[1].wait()


def mp_str(text):
    b = text.encode()
    return (bytes([0xa0 | len(b)]) if len(b) < 32 else bytes([0xd9, len(b)])) + b


def hello_frame(name, run):
    """A HELLO as any client could send it (docs/PROTOCOL.md, "Framing")."""
    run_id = 14695981039346656037
    for c in run.encode():
        run_id = ((run_id ^ c) * 1099511628211) % (1 << 64)
    payload = (b"\x85" + mp_str("v") + b"\x02" + mp_str("t") + b"\x01" + mp_str("run") +
               b"\xcf" + run_id.to_bytes(8, "big") + mp_str("name") + mp_str(name) +
               mp_str("text") + mp_str(run))
    return len(payload).to_bytes(4, "little") + payload


def check_impostor(sn, wd, corpus, tok):
    """Issue 12, finding 9: a connection that claims n0's name from another
    address than n0's (127.0.0.2; the cluster says 127.0.0.1) is dropped by
    n1, and closing it does not end the run: n1 keeps waiting for the real
    n0, and the run trains to the end."""
    job = short_job(wd, "impostor", corpus, tok, 5)
    ports = free_ports(3)
    cluster = write_cluster(wd, "impostor", ports)
    procs = start_nodes(sn, job, cluster, wd, "impostor", only=(1, 2))
    s = None
    t_end = time.time() + 30
    while time.time() < t_end and s is None:
        try:
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", ports[1]))
        except OSError:
            s.close()
            s = None
            time.sleep(0.05)
    check(s is not None, "impostor: n1 never listened")
    s.sendall(hello_frame("n0", "impostor"))
    s.settimeout(10)
    try:
        got = s.recv(4096)
    except socket.timeout:
        got = None
    s.close()
    check(got == b"", "impostor: n1 answered a HELLO for n0 from 127.0.0.2 with %r" % got)
    procs += start_nodes(sn, job, cluster, wd, "impostor", only=(0,))
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (o, e) in zip(procs, outs):
        check(p.returncode == 0, "impostor: a node exited %d after an impostor came and went:\n%s%s"
              % (p.returncode, o, e))
    check("comes from another address" in outs[0][1],
          "impostor: n1 did not log the impostor:\n%s" % outs[0][1])
    got = metrics(os.path.join(wd, "impostor-n0.jsonl"))
    check(len(got) == 5, "impostor: n0 wrote %d metrics lines" % len(got))
    print("ok   impostor: a HELLO for n0 from 127.0.0.2 was dropped; the run trained 5 steps")


def check_profile_lock(sn, wd):
    """Issue 12, finding 10: the profile lock is never taken through a link
    (one planted by another user would make this node create or lock a file
    of the planter's choosing); profiling goes on without it."""
    config = os.path.join(wd, "lock-config.json")
    write_config(config, False)
    target = os.path.join(wd, "lock-target")
    link = os.path.join(wd, "lock-link")
    for p in (target, link):
        if os.path.lexists(p):
            os.unlink(p)
    os.symlink(target, link)
    p = run([sn, "profile", "--model", config, "--iters", "1", "--micro-batch", "1", "--seq", "16",
             "--threads", "1", "--out", os.path.join(wd, "lock-profile.json"), "--cache",
             os.path.join(wd, "lock-cache"), "--lock", link])
    check("a symbolic link" in p.stderr and "without it" in p.stderr,
          "profile took a symbolic link as its lock without a word:\n%s" % p.stderr)
    check(not os.path.exists(target), "profile created %s through a symbolic link" % target)
    print("ok   profile lock: a symbolic link is not followed (%s)" % p.stderr.strip().splitlines()[-1])


def stage_files_equal(a_dir, b_dir, what):
    for i in range(3):
        d = max_rel_diff(os.path.join(b_dir, "stage-n%d.safetensors" % i),
                         os.path.join(a_dir, "stage-n%d.safetensors" % i),
                         "%s: stage n%d" % (what, i))
        check(d == 0.0, "%s: stage n%d's weights differ by %.2e (max rel) from the run never "
              "stopped" % (what, i, d))


def check_stop_resume(sn, wd, corpus, tok, signalled):
    """SIGUSR1 to one stage stops the whole pipeline at one step boundary; the
    stages resume from their checkpoints and finish the run that was never
    stopped, bit for bit (same machine, same threads)."""
    name = "stop-n%d" % signalled
    steps = 30
    config = os.path.join(wd, name + "-config.json")
    write_config(config, True)  # tied: the last stage's copy of the embedding too
    whole_out, stop_out = os.path.join(wd, name + "-whole"), os.path.join(wd, name + "-out")
    jw = write_job(wd, name + "-whole", corpus, tok, config, 2, whole_out, steps=steps)
    js = write_job(wd, name, corpus, tok, config, 2, stop_out, steps=steps)
    procs = start_nodes(sn, jw, write_cluster(wd, name + "-whole", free_ports(3)), wd,
                        name + "-whole")
    for i, p in enumerate(procs):
        o, e = p.communicate(timeout=600)
        check(p.returncode == 0, "%s: uninterrupted node n%d exited %d:\n%s%s"
              % (name, i, p.returncode, o, e))
    cluster = write_cluster(wd, name, free_ports(3))
    procs = start_nodes(sn, js, cluster, wd, name)
    m0 = os.path.join(wd, "%s-n0.jsonl" % name)
    t_end = time.time() + 120
    while time.time() < t_end and not (os.path.exists(m0) and len(metrics(m0)) >= 5):
        check(all(p.poll() is None for p in procs), "%s: a node ended before the signal" % name)
        time.sleep(0.02)
    check(os.path.exists(m0) and len(metrics(m0)) >= 5, "%s: the pipeline made no progress"
          % name)
    procs[signalled].send_signal(signal.SIGUSR1)
    stopped = []
    for i, p in enumerate(procs):
        o, e = p.communicate(timeout=120)
        check(p.returncode == 0, "%s: node n%d exited %d after SIGUSR1 to n%d:\n%s%s"
              % (name, i, p.returncode, signalled, o, e))
        lines = [ln for ln in o.splitlines() if " stopped after step " in ln]
        check(len(lines) == 1, "%s: node n%d did not say where it stopped:\n%s" % (name, i, o))
        stopped.append(int(lines[0].split(" stopped after step ")[1].split()[0]))
        ckpt = os.path.join(stop_out, "checkpoint-n%d.safetensors" % i)
        check(os.path.exists(ckpt), "%s: node n%d left no %s" % (name, i, ckpt))
    check(len(set(stopped)) == 1 and 5 <= stopped[0] < steps,
          "%s: the stages stopped after steps %s (want one step, 5..%d)"
          % (name, stopped, steps - 1))
    s = stopped[0]
    for i in range(3):
        got = metrics(os.path.join(wd, "%s-n%d.jsonl" % (name, i)))
        check(len(got) == s, "%s: node n%d wrote %d metrics lines, stopped after step %d"
              % (name, i, len(got), s))
    # Resume every stage from its checkpoint; the metrics files are appended.
    procs = start_nodes(sn, js, cluster, wd, name, extra=["--resume"], keep_metrics=True)
    for i, p in enumerate(procs):
        o, e = p.communicate(timeout=600)
        check(p.returncode == 0, "%s: resumed node n%d exited %d:\n%s%s"
              % (name, i, p.returncode, o, e))
        check("resumes after step %d" % s in o, "%s: node n%d did not say it resumed after "
              "step %d:\n%s" % (name, i, s, o))
    for i in range(3):
        got = metrics(os.path.join(wd, "%s-n%d.jsonl" % (name, i)))
        want = metrics(os.path.join(wd, "%s-whole-n%d.jsonl" % (name, i)))
        check([g["step"] for g in got] == list(range(1, steps + 1)),
              "%s: node n%d's metrics hold steps %s" % (name, i, [g["step"] for g in got]))
        for g, w in zip(got, want):
            check(g["loss"] == w["loss"], "%s: step %d loss %.17g on node n%d, %.17g never "
                  "stopped" % (name, g["step"], g["loss"], i, w["loss"]))
    stage_files_equal(whole_out, stop_out, name)
    print("ok   %-28s SIGUSR1 to n%d: every stage stopped after step %d and resumed; %d steps' "
          "losses and every stage's weights equal the run never stopped, bit for bit"
          % (name, signalled, s, steps))


def sigqueue(pid, sig, value):
    """sigqueue(3): sig with value (as `shardnode set --threads` has the
    node ask its stage)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    if libc.sigqueue(pid, sig, ctypes.c_void_p(value)) != 0:
        raise OSError(ctypes.get_errno(), "sigqueue")


def check_threads(sn, wd, corpus, tok):
    """A running stage computes with the threads a queued SIGUSR2 carries
    (docs/ARCHITECTURE.md, "Planned switches": `shardnode set --threads`),
    from its next step, at most the threads it started with; a SIGUSR2
    without a count changes nothing. The losses stay those of the same job
    run with one thread each, bit for bit (docs/ARCHITECTURE.md,
    "Determinism"). Needs check_stop_resume(1)'s run never stopped."""
    name = "threads"
    steps = 30
    config = os.path.join(wd, name + "-config.json")
    write_config(config, True)
    js = write_job(wd, name, corpus, tok, config, 2, os.path.join(wd, name + "-out"),
                   steps=steps)
    cluster = write_cluster(wd, name, free_ports(3))
    procs, ms = [], []
    for i in range(3):
        ms.append(os.path.join(wd, "%s-n%d.jsonl" % (name, i)))
        cmd = [sn, "train", "--job", js, "--cluster", cluster, "--node", "n%d" % i,
               "--metrics", ms[i], "--threads", "2" if i == 1 else "1"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))

    def at(step):
        t_end = time.time() + 120
        while time.time() < t_end:
            check(all(p.poll() is None for p in procs), "%s: a node ended early" % name)
            if os.path.exists(ms[1]) and len(metrics(ms[1])) >= step:
                return len(metrics(ms[1]))
            time.sleep(0.02)
        check(False, "%s: n1 did not reach step %d" % (name, step))

    asked = [(at(4), 1)]
    sigqueue(procs[1].pid, signal.SIGUSR2, 1)
    at(asked[-1][0] + 3)
    procs[1].send_signal(signal.SIGUSR2)   # no count: nothing changes
    asked.append((at(asked[-1][0] + 6), 3))
    sigqueue(procs[1].pid, signal.SIGUSR2, 3)   # more than it started with: 2
    outs = [p.communicate(timeout=600) for p in procs]
    for i, (p, (o, e)) in enumerate(zip(procs, outs)):
        check(p.returncode == 0, "%s: node n%d exited %d:\n%s%s" % (name, i, p.returncode, o, e))
    said = [ln for ln in outs[1][0].splitlines() if " computes with " in ln]
    check(len(said) == 2 and "with 1 thread from step" in said[0] and
          "with 2 threads from step" in said[1] and "scratch holds no more" in said[1],
          "%s: n1 said %s (want 1 thread, then 2 of the 3 asked)" % (name, said))
    from_ = [int(ln.split(" from step ")[1].split()[0]) for ln in said]
    got = metrics(ms[1])
    th = [g["threads"] for g in got]
    want_th = [2 if s_ < from_[0] or s_ >= from_[1] else 1 for s_ in range(1, steps + 1)]
    check(th == want_th and asked[0][0] < from_[0] and asked[1][0] < from_[1],
          "%s: n1 computed steps 1-%d with threads %s, asked for 1 after step %d and 3 after "
          "step %d (said: %s)" % (name, steps, th, asked[0][0], asked[1][0], said))
    for i in range(3):
        got = metrics(ms[i])
        want = metrics(os.path.join(wd, "stop-n1-whole-n%d.jsonl" % i))
        check([g["loss"] for g in got] == [w["loss"] for w in want],
              "%s: node n%d's losses differ from the run with one thread each" % (name, i))
    print("ok   %-28s n1 (2 threads) asked for 1 after step %d: 1 from step %d; for 3 after "
          "step %d: 2 from step %d; a SIGUSR2 without a count ignored; every loss equal the "
          "run with one thread each, bit for bit"
          % (name, asked[0][0], from_[0], asked[1][0], from_[1]))


def check_snapshots_resplit(sn, wd, corpus, tok):
    """Recovery's ground (docs/ARCHITECTURE.md, "Recovery"): every stage
    snapshots its state every ceil(snapshot_every / 2) steps (the newest two
    kept); a
    pipeline cut otherwise (2 stages instead of 3) starts from the three
    stages' snapshots of one step and finishes the run never interrupted,
    bit for bit (same machine, same threads). A set of snapshots that misses
    layers is refused, naming a missing tensor."""
    name, steps, every = "resplit", 30, 12   # snapshots every 6 steps
    config = os.path.join(wd, name + "-config.json")
    write_config(config, True)
    whole_out, re_out = os.path.join(wd, name + "-whole"), os.path.join(wd, name + "-out")
    jw = write_job(wd, name + "-whole", corpus, tok, config, 2, whole_out, steps=steps)
    with open(jw) as f:
        j = json.load(f)
    j["snapshot_every"] = every
    with open(jw, "w") as f:
        json.dump(j, f)
    snaps = os.path.join(wd, name + "-snaps")
    os.makedirs(snaps)
    whole_cluster = write_cluster(wd, name + "-whole", free_ports(3))
    procs = start_nodes(sn, jw, whole_cluster, wd, name + "-whole", extra=["--snapshots", snaps])
    for i, p in enumerate(procs):
        o, e = p.communicate(timeout=600)
        check(p.returncode == 0, "%s: node n%d exited %d:\n%s%s" % (name, i, p.returncode, o, e))
    have = sorted(os.listdir(snaps))
    want = sorted("L%d-%d-s%d.safetensors" % (b, e, s) for b, e in ((0, 2), (2, 5), (5, 6))
                  for s in (18, 24))
    check(have == want, "%s: snapshots kept %s, want the newest two of each stage %s"
          % (name, have, want))
    src = os.path.join(wd, name + "-from")
    os.makedirs(src)
    for b, e in ((0, 2), (2, 5), (5, 6)):
        f = "L%d-%d-s24.safetensors" % (b, e)
        os.link(os.path.join(snaps, f), os.path.join(src, f))
    j["out_dir"] = re_out
    del j["snapshot_every"]
    jr = os.path.join(wd, name + ".json")
    with open(jr, "w") as f:
        json.dump(j, f)
    ports = free_ports(2)
    cl = {"run": name, "schedule": "1f1b", "timeout_ms": 20000,
          "nodes": [{"name": "n%d" % i, "host": "127.0.0.1", "port": ports[i],
                     "layers": lay} for i, lay in enumerate([[0, 3], [3, 6]])]}
    cluster = os.path.join(wd, name + "-cluster.json")
    with open(cluster, "w") as f:
        json.dump(cl, f)
    procs = start_nodes(sn, jr, cluster, wd, name, extra=["--resume-from", src], only=(0, 1))
    for i, p in enumerate(procs):
        o, e = p.communicate(timeout=600)
        check(p.returncode == 0, "%s: node n%d of 2 exited %d:\n%s%s"
              % (name, i, p.returncode, o, e))
        check("resumes after step 24" in o, "%s: node n%d did not resume after step 24:\n%s"
              % (name, i, o))
    want_m = metrics(os.path.join(wd, "%s-whole-n0.jsonl" % name))[24:]
    for i in range(2):
        got = metrics(os.path.join(wd, "%s-n%d.jsonl" % (name, i)))
        check([g["step"] for g in got] == list(range(25, steps + 1)),
              "%s: node n%d's metrics hold steps %s" % (name, i, [g["step"] for g in got]))
        for g, w in zip(got, want_m):
            check(g["loss"] == w["loss"], "%s: step %d loss %.17g on node n%d of 2, %.17g in "
                  "the 3-stage run" % (name, g["step"], g["loss"], i, w["loss"]))
    run([sn, "export", "--job", jw, "--cluster", whole_cluster])
    run([sn, "export", "--job", jr, "--cluster", cluster])
    d = max_rel_diff(os.path.join(re_out, "model.safetensors"),
                     os.path.join(whole_out, "model.safetensors"), name)
    check(d == 0.0, "%s: the re-split run's model differs by %.2e (max rel) from the 3-stage "
          "run's" % (name, d))
    os.unlink(os.path.join(src, "L2-5-s24.safetensors"))
    one = os.path.join(wd, name + "-one.json")  # one stage: no peer to wait for
    with open(one, "w") as f:
        json.dump({"run": name + "-one", "nodes": [{"name": "n0", "host": "127.0.0.1",
                   "port": free_ports(1)[0], "layers": [0, 6]}]}, f)
    p = run([sn, "train", "--job", jr, "--cluster", one, "--node", "n0", "--resume-from",
             src], ok=False)
    check(p.returncode == 1 and "model.layers.2." in p.stderr and "none of the 2" in p.stderr,
          "%s: snapshots without layers 2..4: exit %d, %r" % (name, p.returncode, p.stderr))
    print("ok   %-28s snapshots every %d steps, the newest two kept; 2 stages resumed from 3 "
          "stages' step-24 snapshots: losses and model equal the 3-stage run bit for bit; "
          "missing layers refused" % (name, (every + 1) // 2))


def check_resume_refused(sn, wd, corpus, tok):
    job = short_job(wd, "noresume", corpus, tok, 10)
    cluster = write_cluster(wd, "noresume", free_ports(3))
    p = run([sn, "train", "--job", job, "--cluster", cluster, "--node", "n1", "--resume"],
            ok=False)
    want = os.path.join(wd, "noresume-out", "checkpoint-n1.safetensors")
    check(p.returncode == 1 and want in p.stderr and "no state of node n1" in p.stderr,
          "resume without a checkpoint: exit %d, %r" % (p.returncode, p.stderr))
    print("ok   --resume without a checkpoint is refused: %s" % p.stderr.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    sn = os.path.abspath(args.shardnode)
    wd = os.path.abspath(args.workdir)
    # Every run starts from an empty workdir: a second ctest run in the same
    # tree found the first run's profile cache and profiled nothing.
    shutil.rmtree(wd, ignore_errors=True)
    os.makedirs(wd)
    t0 = time.time()
    try:
        corpus, tok = corpus_and_tokenizer(sn, wd)
        check_equal_run(sn, wd, corpus, tok, "untied-mb1", False, 8, "1f1b")
        check_equal_run(sn, wd, corpus, tok, "untied-mb8", False, 1, "1f1b")
        check_equal_run(sn, wd, corpus, tok, "untied-mb8-gpipe", False, 1, "gpipe")
        check_equal_run(sn, wd, corpus, tok, "tied-mb4", True, 2, "1f1b")
        # Clipping that engages with a bound a float cannot hold (0.3): the
        # pipeline and the single process scale the gradients alike, so the
        # losses and the exported model are the same bits.
        check_equal_run(sn, wd, corpus, tok, "untied-mb4-clip0.3", False, 2, "1f1b",
                        rtol=0.0, wtol=0.0, grad_clip=0.3)
        # bf16 on the wire rounds activations and gradients: the losses stay
        # close; single weights drift apart (AdamW normalises tiny gradients)
        check_equal_run(sn, wd, corpus, tok, "untied-mb8-bf16", False, 1, "1f1b", wire="bf16",
                        rtol=2e-2, wtol=None)
        check_kill(sn, wd, corpus, tok)
        check_stop_resume(sn, wd, corpus, tok, 1)
        check_stop_resume(sn, wd, corpus, tok, 2)
        check_threads(sn, wd, corpus, tok)
        check_resume_refused(sn, wd, corpus, tok)
        check_snapshots_resplit(sn, wd, corpus, tok)
        check_impostor(sn, wd, corpus, tok)
        check_profile_lock(sn, wd)
    except Failure as e:
        print("FAIL " + str(e))
        print("pipeline_test: FAILED (%.1f s)" % (time.time() - t0))
        sys.exit(1)
    print("pipeline_test: all checks passed (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
