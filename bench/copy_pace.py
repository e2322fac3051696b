"""A buddy's copy of a snapshot, paced and not: what it does to the frames
that share the tunnel (docs/ARCHITECTURE.md, "Recovery"; docs/PROTOCOL.md,
"Recovery", 2).

    /usr/bin/python3 bench/copy_pace.py --shardnode build/shardnode [--mb 24]
        [--rates 0,8000000,3000000] [--repeat 2]

Two members, a and b, in network namespaces over wireguard-go. a holds a
file of --mb MiB where a snapshot goes (jobs/ID/snap/L0-1-s1.safetensors);
b copies it with `shardnode fetch` (as a buddy does), once per rate in
--rates (0: unpaced, as fast as the link goes), --repeat times each, while
a 64-byte UDP echo runs between b and a over the overlay every 10 ms, as a
stand-in for the pipeline's small frames. Per copy: its time and MB/s, the
CPU seconds of both members' wireguard-go, daemons and the fetch itself,
and the echo's round trips during the copy (median, p90, p99, max); last,
the ratio of each pace's p99 to the unpaced p99 and of their CPU seconds.
Timings only, never pass/fail. Needs root (namespaces, wireguard-go).
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from nslib import Pool, Failure, requirements, run_test  # noqa: E402

JOB = "0123456789abcdef"
SNAP = "jobs/%s/snap/L0-1-s1.safetensors" % JOB


def echo(mode, host, secs=0.0):
    """The UDP echo: 'srv' answers on host:9999; 'cli' sends every 10 ms
    for secs and prints each round trip in ms (1000 for a lost one)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if mode == "srv":
        s.bind((host, 9999))
        while True:
            d, a = s.recvfrom(100)
            s.sendto(d, a)
    s.settimeout(1.0)
    end = time.time() + secs
    while time.time() < end:
        t0 = time.perf_counter()
        s.sendto(b"x" * 64, (host, 9999))
        try:
            s.recvfrom(100)
            print("%.3f" % ((time.perf_counter() - t0) * 1e3), flush=True)
        except socket.timeout:
            print("1000", flush=True)
        time.sleep(0.01)
    return 0


def cpu_s(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def main():
    if len(sys.argv) > 2 and sys.argv[1] in ("srv", "cli"):
        return echo(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 0)
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", default=os.path.join(ROOT, "build", "shardnode"))
    ap.add_argument("--mb", type=int, default=24)
    ap.add_argument("--rates", default="0,8000000,3000000",
                    help="bytes a second, comma-separated; 0: unpaced")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    sn = os.path.abspath(args.shardnode)
    if requirements("bench/copy_pace", sn):
        return 0
    rates = [int(x) for x in args.rates.split(",")]
    t = Pool(sn, args.keep, "sncp%d-" % os.getpid())
    # run_test: a failure or an interruption still removes the namespaces
    return run_test("bench/copy_pace", lambda: body(t, args, rates), t.report, t.cleanup,
                    time.time())


def body(t, args, rates):
    ip = {"a": "10.205.0.11", "b": "10.205.0.12"}
    t.net.build(ip, {})
    t.grow(ip, "10.80.0.0/16", {"a": [], "b": []}, 30)
    t.wait("a and b alive", lambda: t.all_alive("ab", 2), 60)
    st = t.status("a")
    addr = {m["name"]: m["address"] for m in st["members"]}
    d = os.path.join(t.state("a"), os.path.dirname(SNAP))
    os.makedirs(d)
    with open(os.path.join(t.state("a"), SNAP), "wb") as f:
        f.write(os.urandom(args.mb << 20))
    me = os.path.abspath(__file__)
    srv = subprocess.Popen(["ip", "netns", "exec", t.net.full("a"), sys.executable, me, "srv",
                            addr["a"]])
    time.sleep(0.5)
    pids = [p for n in "ab" for p in t.net.pids(t.net.full(n)) if p != srv.pid]
    env = dict(os.environ, SHARDNODE_STATE=t.state("b"))
    out = os.path.join(t.tmp, "copy.bin")
    # what the members use with no copy (gossip, the echo itself): counted
    # out of each copy's CPU seconds
    cli = subprocess.Popen(["ip", "netns", "exec", t.net.full("b"), sys.executable, me, "cli",
                            addr["a"], "5.5"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    c0, t0 = sum(cpu_s(p) for p in pids), time.time()
    time.sleep(4.5)
    idle = (sum(cpu_s(p) for p in pids) - c0) / (time.time() - t0)
    cli.communicate()
    print("idle: %.3f CPU s a second (counted out below)" % idle, flush=True)
    by_rate = {}
    for rep in range(args.repeat):
        for rate in rates:
            secs = 2.0 + (args.mb * 1.05 * (1 << 20) / rate if rate else 1.0)
            cli = subprocess.Popen(["ip", "netns", "exec", t.net.full("b"), sys.executable, me,
                                    "cli", addr["a"], "%.1f" % secs], stdout=subprocess.PIPE,
                                   text=True)
            time.sleep(0.5)
            c0 = sum(cpu_s(p) for p in pids)
            r0 = os.times()
            t0 = time.time()
            p = subprocess.run(["ip", "netns", "exec", t.net.full("b"), t.sn, "fetch", "--out",
                                out, "--mesh", st["mesh_id"], "--from", "b", "--bind", addr["b"]] +
                               (["--rate", str(rate)] if rate else []) +
                               ["--path", SNAP, "a=%s:%d" % (addr["a"], st["gossip_port"])],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env, timeout=600)
            el = time.time() - t0
            r1 = os.times()
            cpu = sum(cpu_s(p_) for p_ in pids) - c0 + \
                (r1.children_user + r1.children_system) - (r0.children_user + r0.children_system) - \
                idle * el
            if p.returncode != 0:
                raise Failure("fetch exited %d: %s" % (p.returncode, p.stderr))
            # the round trips sent while the copy ran: 0.5 s after the echo
            # started, for el seconds, one every ~10 ms
            v = [float(x) for x in cli.communicate()[0].split()]
            v = sorted(v[50:50 + max(1, int(el / 0.0102))])
            q = lambda f: v[min(len(v) - 1, int(len(v) * f))]  # noqa: E731
            by_rate.setdefault(rate, []).append((q(0.99), cpu))
            print("%-12s %d MiB in %.2f s (%.1f MB/s), %.2f CPU s; echo during it: median "
                  "%.2f, p90 %.2f, p99 %.2f, max %.2f ms (%d)"
                  % ("unpaced" if not rate else "%.1f MB/s" % (rate / 1e6), args.mb, el,
                     args.mb * (1 << 20) / el / 1e6, cpu, q(0.5), q(0.9), q(0.99), v[-1],
                     len(v)), flush=True)
    srv.kill()
    base = by_rate.get(0)
    for rate in rates:
        if not rate or not base:
            continue
        p99 = statistics.median(x[0] for x in by_rate[rate]) / \
            statistics.median(x[0] for x in base)
        cpu = statistics.median(x[1] for x in by_rate[rate]) / \
            statistics.median(x[1] for x in base)
        print("paced at %.1f MB/s / unpaced: echo p99 %.2f, CPU s %.2f"
              % (rate / 1e6, p99, cpu), flush=True)


if __name__ == "__main__":
    sys.exit(main())
