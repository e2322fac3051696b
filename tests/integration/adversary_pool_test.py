"""Issue 12's attacks on the pool while it trains, made by real processes in
network namespaces (points 5, 8 and 9; the membership's are adversary_test.py's).

    /usr/bin/python3 tests/integration/adversary_pool_test.py --shardnode build/shardnode
        [--keep]

Root, wireguard-go, /dev/net/tun, setpriv and faketime (exits 77, ctest's
skip, when any is missing). Namespaces a, b, d and an outsider x on one
bridge; a and b compute with --threads 1, d (--no-compute) submits a job of
pool_test's model (60 steps; 10 in an ASan build) and holds no stage. While
the plan's two stages s0 -> s1 train:

1. Pipeline connections (point 9), on the stages' port 7947:
   - nobody (`setpriv --reuid nobody`) on s0's machine, from s0's overlay
     address: a HELLO to s1 under s0's name (no MAC), then a 4 GiB frame
     length; and a 1 GiB length as the first frame;
   - nobody on s1's machine, from s1's overlay address: a HELLO to s0 under
     s1's name with a made-up MAC, then a 4 GiB length;
   - d (a member the plan does not name, root: its own keys): a HELLO to s1
     under s0's name, then a 4 GiB length; a connection to s0 that closes;
   - the outsider x on the underlay: s1's port on s1's underlay address
     (refused: nothing listens there) and on its overlay address (no route).
   Every connection is closed without a byte back; s1 logs the HELLOs for
   s0 and the oversized first frame, s0 the HELLO for s1.
2. Submitter and out_dir (point 5): root on b hands b's node, through its
   control socket (`train --state` of a folder whose node.json says "d",
   control.sock a link to b's), a valid bundle naming d as submitter with
   out_dir a folder of b's choosing: refused ("names another submitter");
   b's own job with that out_dir: refused (a job is running); nobody on b
   cannot reach b's control socket (submit or stop).
3. A far-future job (point 8): `train --state B --job J` under faketime a
   year ahead: b's node refuses it (submitted_at ahead of its clock).
Every member's status shows the same job and plan after every attempt. The
run finishes: every stage's loss equals the single-process run's at every
step (1e-5 relative), d gathers the model (equal to the single process's to
1e-5), the attacker's folder was never created, a and b gather nothing.
4. After the run, the receivers' side of point 8: d's node restarted under
   faketime a year ahead accepts its own far-future job, which a and b
   ignore (their job stays the finished one); a job a submits next (real
   clock) is taken up by a and b, so the future job overrides nothing.

Not covered here (unit tests only): point 4, a forged `committed` section
(it takes a rogue daemon: test_pool_trust's commit_verify), and a bundle
pinned on another member by a rogue daemon (test_pool_trust's submitter).
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nslib import (NOBODY, PY, Failure, Pool, check, check_gathered, log,  # noqa: E402
                   pool_job_files, requirements, run_test, write_json)

LOSS_RTOL = 1e-5
PIPE_PORT = 7947
FAKE = "+365d"
IP = {"a": "10.205.0.11", "b": "10.205.0.12", "d": "10.205.0.14", "x": "10.205.0.20"}
PREFIX = "10.79.0.0/16"

# The attacker on the pipeline port, as its own python process in a
# namespace (as root or nobody): a list of attempts in, what each saw out.
ATTACK = r'''
import json, socket, struct, sys
P = json.loads(sys.argv[1])

def mp_str(text):
    b = text.encode()
    return (bytes([0xa0 | len(b)]) if len(b) < 32 else bytes([0xd9, len(b)])) + b

def hello(name, run, text):
    run_id = 14695981039346656037
    for c in run.encode():
        run_id = ((run_id ^ c) * 1099511628211) % (1 << 64)
    payload = (b"\x85" + mp_str("v") + b"\x02" + mp_str("t") + b"\x01" + mp_str("run") +
               b"\xcf" + run_id.to_bytes(8, "big") + mp_str("name") + mp_str(name) +
               mp_str("text") + mp_str(text))
    return len(payload).to_bytes(4, "little") + payload

out = []
for a in P:
    r = {"what": a["what"]}
    s = socket.socket()
    s.settimeout(a.get("timeout", 8))
    try:
        if a.get("bind"):
            s.bind((a["bind"], 0))
        s.connect((a["host"], a["port"]))
        r["connected"] = True
    except OSError as e:
        r["connected"] = False
        r["error"] = str(e)
        s.close()
        out.append(r)
        continue
    data = b""
    if a.get("name"):
        data += hello(a["name"], a["run"], a["text"])
    if a.get("length"):
        data += struct.pack("<I", a["length"]) + b"\0" * 64
    got, end = b"", "closed"
    try:
        if data:
            s.sendall(data)
        else:
            s.shutdown(socket.SHUT_WR)
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
    except socket.timeout:
        end = "timeout"
    except OSError as e:
        end = "reset (%s)" % e
    s.close()
    r["got"] = len(got)
    r["end"] = end
    out.append(r)
print(json.dumps(out))
'''


def is_asan(sn):
    with open(sn, "rb") as f:
        return b"__asan_init" in f.read()


def clear_stale_faketime():
    """libfaketime (and its wrapper) keep a shared-memory segment and a
    semaphore named by their pid in /dev/shm, removed at exit: a process
    killed with its namespace (SIGKILL) leaves them, and a later wrapper
    that gets the same pid fails ("faketime: sem_open: File exists"; seen
    once on a machine after many runs). Those of pids no process has now
    are stale: removed, before each start under faketime."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    for name in names:
        m = re.fullmatch(r"(?:sem\.faketime_sem|faketime_shm)_(\d+)", name)
        if m and not os.path.exists("/proc/%s" % m.group(1)):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass


def asan_env():
    """libfaketime is preloaded before ASan's runtime: ASan must not refuse that."""
    clear_stale_faketime()
    env = dict(os.environ)
    opts = env.get("ASAN_OPTIONS", "")
    env["ASAN_OPTIONS"] = (opts + ":" if opts else "") + "verify_asan_link_order=0"
    return env


class AdvPool(Pool):
    def __init__(self, sn, keep):
        super().__init__(sn, keep, "snv%d-" % os.getpid())
        self.train_proc = None

    def sn_as(self, n, args, user=False, fake=False, timeout=60):
        cmd = ["ip", "netns", "exec", self.net.full(n)] + (NOBODY if user else [])
        if fake:
            cmd += ["faketime", "-f", FAKE]
        return subprocess.run(cmd + [self.sn] + args, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout,
                              env=asan_env() if fake else None)

    def start_fake(self, n, args):
        self.start(n, args, ["faketime", "-f", FAKE], asan_env())

    def attack(self, n, user, attempts):
        cmd = ["ip", "netns", "exec", self.net.full(n)] + (NOBODY if user else [])
        p = subprocess.run(cmd + [PY, "-c", ATTACK, json.dumps(attempts)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        check(p.returncode == 0, "the attacker on %s failed: %s" % (n, p.stderr))
        return json.loads(p.stdout)

    def cleanup(self):
        if self.train_proc and self.train_proc.poll() is None:
            try:
                os.killpg(self.train_proc.pid, signal.SIGTERM)
                self.train_proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        return super().cleanup()


def job_of(s):
    j = (s or {}).get("job") or {}
    return j.get("id"), ((j.get("committed") or {}).get("h"))


def body(t, steps):
    wd, _, _, _, job = pool_job_files(t, steps)
    # the reference, one process, in the background while the mesh forms
    single_out = os.path.join(wd, "single")
    m1 = os.path.join(wd, "single.jsonl")
    ref_proc = subprocess.Popen([t.sn, "train", "--job", job("single", single_out), "--metrics",
                                 m1, "--threads", "1"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    t_ref = time.time()

    t.net.build(IP, {})
    opts = {"a": ["--threads", "1"], "b": ["--threads", "1"], "d": ["--no-compute"]}
    t.grow(IP, PREFIX, opts, 60)

    def all_alive(names="abd"):
        return t.all_alive(names, 3)
    t.wait("a, b, d alive everywhere", all_alive, 90)
    log("mesh: a, b, d alive (a and b compute with 1 thread, d submits)")

    # the job, from d
    pool_out = os.path.join(wd, "pool-out")
    jp = job("pool", pool_out)
    tlog = open(os.path.join(t.tmp, "train-d.log"), "w")
    t.train_proc = subprocess.Popen(
        ["ip", "netns", "exec", t.net.full("d"), t.sn, "train", "--state", t.state("d"), "--job",
         jp, "--wait"], stdin=subprocess.DEVNULL, stdout=tlog, stderr=subprocess.STDOUT,
        start_new_session=True)

    def training():
        if t.train_proc.poll() is not None:
            raise Failure("train --wait on d ended before the attacks (exit %d):\n%s"
                          % (t.train_proc.returncode, open(tlog.name).read()))
        s = t.status("d")
        j = (s or {}).get("job") or {}
        c = j.get("committed")
        if not c:
            return None
        runs = [((j.get("members") or {}).get(st[0]) or {}).get("run") or {}
                for st in c["stages"]]
        if all(r.get("state") == "running" and (r.get("step") or 0) >= 1 for r in runs):
            return s
        return None
    s = t.wait("the stages training (step 1 done)", training, 600)
    jid, plan = job_of(s)
    stages = s["job"]["committed"]["stages"]
    check(len(stages) >= 2, "the plan has %d stage(s), the pipeline attacks need two: %s"
          % (len(stages), stages))
    check("d" not in [st[0] for st in stages], "d (--no-compute) holds a stage: %s" % stages)
    s0, s1 = stages[0][0], stages[1][0]
    ov = {st[0]: st[3] for st in stages}
    ov["d"] = [m["address"] for m in s["members"] if m["name"] == "d"][0]
    run = "job-%s-e%d" % (jid, s["job"]["committed"]["e"])
    log("training: job %s, plan %s: %s; run %s" % (jid, plan, ", ".join(
        "%s layers %d-%d at %s" % (st[0], st[1], st[2] - 1, st[3]) for st in stages), run))

    def unchanged(what):
        for n in "abd":
            got = job_of(t.status(n))
            check(got == (jid, plan), "after %s, %s shows job %s plan %s, not %s %s"
                  % (what, n, got[0], got[1], jid, plan))
        s = t.status("d")
        for st in stages:
            r = s["job"]["members"][st[0]].get("run") or {}
            check(r.get("state") in ("running", "done"), "after %s, stage %s is %s: %s"
                  % (what, st[0], r.get("state"), r.get("error")))

    def refused(results, who):
        for r in results:
            if r["what"].startswith("underlay") or r["what"].startswith("overlay from x"):
                check(not r["connected"], "%s: %s connected (%s)" % (who, r["what"], r))
                continue
            check(r["connected"], "%s: %s could not connect: %s" % (who, r["what"],
                                                                    r.get("error")))
            check(r["got"] == 0 and r["end"] != "timeout",
                  "%s: %s was answered (%d bytes) or left open (%s)"
                  % (who, r["what"], r["got"], r["end"]))

    # 1. pipeline connections (point 9)
    to = {"port": PIPE_PORT, "run": run}
    r_user0 = t.attack(s0, True, [
        dict(to, what="HELLO as %s to %s, then 4 GiB" % (s0, s1), bind=ov[s0], host=ov[s1],
             name=s0, text=run, length=0xFFFFFFF0),
        dict(to, what="1 GiB first frame to %s" % s1, bind=ov[s0], host=ov[s1],
             length=1 << 30)])
    refused(r_user0, "nobody on %s" % s0)
    r_user1 = t.attack(s1, True, [
        dict(to, what="HELLO as %s with a made-up MAC to %s, then 4 GiB" % (s1, s0),
             bind=ov[s1], host=ov[s0], name=s1, text=run + " #" + "0" * 32,
             length=0xFFFFFFF0)])
    refused(r_user1, "nobody on %s" % s1)
    r_member = t.attack("d", False, [
        dict(to, what="HELLO as %s to %s, then 4 GiB" % (s0, s1), bind=ov["d"], host=ov[s1],
             name=s0, text=run, length=0xFFFFFFF0),
        dict(to, what="a connection to %s that closes" % s0, bind=ov["d"], host=ov[s0])])
    refused(r_member, "d (a member not in the plan)")
    r_out = t.attack("x", False, [
        dict(to, what="underlay %s:%d" % (IP[s1], PIPE_PORT), host=IP[s1], timeout=3),
        dict(to, what="overlay from x %s:%d" % (ov[s1], PIPE_PORT), host=ov[s1], timeout=3)])
    refused(r_out, "the outsider x")
    unchanged("the pipeline attacks")
    log("ok   1. pipeline port: HELLOs under %s's and %s's names from nobody on their machines "
        "(no MAC, a made-up MAC) and from d, 4 GiB and 1 GiB frame lengths, a connection that "
        "closes: each closed without a byte; x on the underlay reaches no stage (%s; %s)"
        % (s0, s1, r_out[0].get("error"), r_out[1].get("error")))

    # 2. submitter and out_dir (point 5)
    evil = os.path.join(t.tmp, "chosen-by-b")
    jevil = job("evil", evil, seed=9)
    fake_state = os.path.join(t.tmp, "b-as-d")
    os.makedirs(fake_state)
    with open(os.path.join(t.state("b"), "node.json")) as f:
        nj = json.load(f)
    nj["name"] = "d"
    write_json(os.path.join(fake_state, "node.json"), nj)
    os.symlink(os.path.join(t.state("b"), "control.sock"), os.path.join(fake_state,
                                                                       "control.sock"))
    p = t.sn_as("b", ["train", "--state", fake_state, "--job", jevil])
    check(p.returncode != 0 and "names another submitter than this node" in p.stderr,
          "b's node took a job naming d as its submitter (exit %d):\n%s%s"
          % (p.returncode, p.stdout, p.stderr))
    why_d = p.stderr.strip()
    p = t.sn_as("b", ["train", "--state", t.state("b"), "--job", jevil])
    check(p.returncode != 0 and "a job is running" in p.stderr,
          "b's node took b's own job while d's runs (exit %d):\n%s%s"
          % (p.returncode, p.stdout, p.stderr))
    why_b = p.stderr.strip()
    # nobody on b: the folders let it through, the socket's own mode decides
    for path in (t.tmp, os.path.join(t.tmp, "state"), t.state("b")):
        os.chmod(path, 0o711)
    # (from Python: nobody may not be able to load shardnode itself from a
    # build tree under a 0700 folder; what counts is the socket's own mode)
    probe = ("import socket, sys\n"
             "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
             "try:\n"
             "    s.connect(sys.argv[1])\n"
             "    print('connected')\n"
             "except OSError as e:\n"
             "    print(type(e).__name__, e.strerror)\n")
    p = subprocess.run(["ip", "netns", "exec", t.net.full("b")] + NOBODY +
                       [PY, "-c", probe, os.path.join(t.state("b"), "control.sock")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    check(p.returncode == 0 and "Permission denied" in p.stdout,
          "nobody on b reached b's control socket (submit, stop): %s%s" % (p.stdout, p.stderr))
    unchanged("the submissions")
    log("ok   2. b's node refuses a bundle naming d as submitter (%s) and b's own job with "
        "out_dir %s (%s); nobody on b cannot reach its control socket"
        % (why_d, evil, why_b))

    # 3. a job from a year ahead (point 8)
    jfut = job("future", os.path.join(wd, "future-out"), seed=11)
    p = t.sn_as("b", ["train", "--state", t.state("b"), "--job", jfut], fake=True)
    check(p.returncode != 0 and "ahead of this node's clock" in p.stderr,
          "b's node took a job submitted a year ahead (exit %d):\n%s%s"
          % (p.returncode, p.stdout, p.stderr))
    unchanged("the far-future job")
    # the attacks were made while the stages trained
    s = t.status("d")
    runs = {st[0]: s["job"]["members"][st[0]].get("run") or {} for st in stages}
    still = ["%s at step %s/%d" % (n, r.get("step"), steps) for n, r in runs.items()
             if r.get("state") == "running"]
    check(still, "the run ended before the attacks did: raise the steps")
    log("ok   3. a job dated a year ahead (faketime %s) is refused: %s; after every attack "
        "%s still training" % (FAKE, p.stderr.strip(), ", ".join(still)))

    # the run goes on to its end
    try:
        t.train_proc.wait(timeout=900)
    except subprocess.TimeoutExpired:
        raise Failure("train --wait on d still runs 900 s on")
    tlog.close()
    with open(tlog.name) as f:
        out = f.read()
    check(t.train_proc.returncode == 0, "train --wait on d exited %d:\n%s"
          % (t.train_proc.returncode, out))
    try:
        ref_out, ref_err = ref_proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        ref_proc.kill()
        raise Failure("the single-process run still runs 900 s on")
    check(ref_proc.returncode == 0, "the single-process run exited %d:\n%s"
          % (ref_proc.returncode, ref_err))
    log("single process: %d steps in %.1f s (alongside the mesh)" % (steps, time.time() - t_ref))
    worst = t.check_losses(stages, jid, m1, steps, LOSS_RTOL)
    wdiff = check_gathered(pool_out, single_out, 1e-5)
    check(not os.path.lexists(evil), "%s (b's choice) exists after the run" % evil)
    for n in ("a", "b"):
        got = t.status(n)["job"]["out_dir"]
        mine = os.path.join(t.state(n), "jobs", jid, "model")
        check(got == mine, "%s would gather d's job into %s" % (n, got))
        check(not os.path.lexists(got), "%s gathered d's job into %s" % (n, got))
    # what the stages logged about the impostors
    with open(os.path.join(t.state(s1), "jobs", jid, "train.log"), errors="replace") as f:
        l1 = f.read()
    with open(os.path.join(t.state(s0), "jobs", jid, "train.log"), errors="replace") as f:
        l0 = f.read()
    check(l1.count('HELLO from "%s"' % s0) >= 2, "%s did not log the two HELLOs under %s's "
          "name:\n%s" % (s1, s0, l1))
    check("too large for a HELLO" in l1 or "exceeds the limit" in l1,
          "%s did not log the 1 GiB first frame:\n%s" % (s1, l1))
    check('HELLO from "%s"' % s1 in l0, "%s did not log the HELLO under %s's name:\n%s"
          % (s0, s1, l0))
    log("ok   the run went on: %d steps, every stage's loss equals one process (worst rel "
        "%.1e), d gathered the model (max rel %.1e); %s was never created; a and b gathered "
        "nothing" % (steps, worst, wdiff, evil))
    for line in sorted(set(ln.split(": ", 1)[-1] for ln in (l0 + l1).splitlines()
                           if "disconnecting" in ln)):
        log("     stage log: " + line)

    # 4. the receivers' side of point 8: d's node a year ahead
    t.procs["d"].send_signal(signal.SIGTERM)
    t.procs["d"].wait(timeout=30)
    t.start_fake("d", ["up", "--state", t.state("d")] + opts["d"])
    t.wait("d back up, a year ahead", lambda: all_alive("d"), 60)
    p = t.sn_as("d", ["train", "--state", t.state("d"), "--job", jfut], fake=True)
    check(p.returncode == 0, "d's node a year ahead did not take its own job (exit %d):\n%s%s"
          % (p.returncode, p.stdout, p.stderr))
    fid = p.stdout.split("train: job ")[1].split()[0]
    check(job_of(t.status("d"))[0] == fid, "d does not carry its future job %s" % fid)
    t0 = time.time()
    while time.time() - t0 < 5:
        for n in "ab":
            got = job_of(t.status(n))[0]
            check(got == jid, "%s took up d's job from a year ahead (%s shows %s)" % (n, n, got))
        time.sleep(0.5)
    jlater = job("later", os.path.join(wd, "later-out"), seed=13)
    p = t.sn_as("a", ["train", "--state", t.state("a"), "--job", jlater])
    check(p.returncode == 0, "a could not submit a job after d's future one:\n%s%s"
          % (p.stdout, p.stderr))
    lid = p.stdout.split("train: job ")[1].split()[0]
    t.wait("a and b on a's later job", lambda: all(job_of(t.status(n))[0] == lid for n in "ab"),
           60)
    t.sn_in("a", ["train", "--state", t.state("a"), "--stop"])
    log("ok   4. d's node a year ahead took its own job %s; a and b ignored it (kept %s) and "
        "took up the job a submitted next (%s)" % (fid, jid, lid))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    sn = os.path.abspath(args.shardnode)
    t_start = time.time()
    rc = requirements("adversary_pool_test", sn, ("setpriv", "faketime", "bible"))
    if rc:
        return rc
    steps = 10 if is_asan(sn) else 60
    t = AdvPool(sn, args.keep)
    return run_test("adversary_pool_test", lambda: body(t, steps), t.report, t.cleanup, t_start)


if __name__ == "__main__":
    sys.exit(main())
