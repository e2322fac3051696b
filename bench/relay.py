"""Throughput and latency of a relayed path against a direct one (issue 19,
point 7; docs/PROTOCOL.md, "Relays").

    sudo /usr/bin/python3 bench/relay.py [--shardnode build/shardnode] [--mb 32] [--pings 300]

The same namespaces as tests/integration/relay_test.py, built twice in one
run: a public member `a` on a bridge, nat1 and nat2 each behind its own
MASQUERADE router (wireguard-go on all three). With the routers'
port-preserving mapping the pair punches: the **direct** path. With
`--random-fully` on both routers it cannot, and `a` relays it: the
**relayed** path (nat1 -> a -> nat2, WireGuard datagrams forwarded as they
are). On each, over the overlay between nat1 and nat2: latency, the median
round trip of a 1-byte TCP request and its answer (`--pings` of them, after
20 unmeasured), and throughput, `--mb` MiB sent over one TCP connection
nat1 -> nat2 (the receiver counts, the sender times until the receiver's
acknowledgement of the last byte). Prints both and the ratios relayed /
direct. Not part of the suite; figures on a shared 2-core machine vary, the
ratio taken in one run is what to compare (the load is printed beside it).
Needs root, wireguard-go, iptables, /dev/net/tun.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from nslib import PY, WG_PORT, Pool, Skip, preconditions  # noqa: E402

PREFIX = "10.75.0.0/16"
PUBLIC = {"a": "10.203.0.11"}
PORT = 9200

SERVER = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(2)
print("ready", flush=True)
for mode in ("ping", "bulk"):
    c, _ = s.accept()
    if mode == "ping":
        while True:
            d = c.recv(1)
            if not d:
                break
            c.sendall(d)
    else:
        n = 0
        while True:
            d = c.recv(1 << 16)
            if not d:
                break
            n += len(d)
        c.sendall(str(n).encode())
    c.close()
"""

CLIENT = r"""
import json, socket, statistics, sys, time
addr, port, pings, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
c = socket.create_connection((addr, port), timeout=30)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for i in range(20 + pings):
    t = time.perf_counter()
    c.sendall(b"x")
    c.recv(1)
    if i >= 20:
        rtts.append(time.perf_counter() - t)
c.close()
c = socket.create_connection((addr, port), timeout=60)
buf = b"\0" * (1 << 16)
total = mb << 20
t = time.perf_counter()
sent = 0
while sent < total:
    c.sendall(buf)
    sent += len(buf)
c.shutdown(socket.SHUT_WR)
got = int(c.recv(64).decode())
secs = time.perf_counter() - t
print(json.dumps({"rtt_ms": 1e3 * statistics.median(rtts), "rtt_p90_ms":
                  1e3 * sorted(rtts)[int(0.9 * len(rtts))], "mbit_s": 8 * got / secs / 1e6,
                  "bytes": got, "secs": secs}))
"""


def wait(what, cond, timeout):
    end = time.time() + timeout
    while time.time() < end:
        r = cond()
        if r:
            return r
        time.sleep(0.5)
    sys.exit("relay.py: timed out after %d s waiting for %s" % (timeout, what))


def measure(sn, symmetric, pings, mb, tag):
    p = Pool(sn, False, "snb%d%s-" % (os.getpid(), tag))
    try:
        routers = {"r1": ("10.203.0.101", "192.168.31", "nat1", symmetric),
                   "r2": ("10.203.0.102", "192.168.32", "nat2", symmetric)}
        p.net.build(PUBLIC, routers)
        os.makedirs(os.path.join(p.tmp, "state"))
        p.sn_in("a", ["init", "--state", p.state("a"), "--name", "a", "--listen-port",
                      str(WG_PORT), "--endpoint", "%s:%d" % (PUBLIC["a"], WG_PORT),
                      "--prefix", PREFIX])
        p.start("a", ["up", "--state", p.state("a"), "--http", "off"])
        p.wait("a up", lambda: p.status("a") is not None, 20)
        for n in ("nat1", "nat2"):
            tok = p.sn_in("a", ["invite", "--state", p.state("a")]).stdout.strip()
            p.start(n, ["join", tok, "--state", p.state(n), "--name", n, "--listen-port",
                        str(WG_PORT), "--http", "off"])
        want = "relayed" if symmetric else "punched"

        def linked():
            for n, o in (("nat1", "nat2"), ("nat2", "nat1")):
                s = p.status(n)
                m = {x["name"]: x for x in s["members"]}.get(o) if s else None
                if not m or m["link"] != want:
                    return False
            return True
        wait("nat1 and nat2 %s" % want, linked, 120)
        with open(os.path.join(p.state("nat2"), "node.json")) as f:
            o2 = json.load(f)["overlay_address"]
        srv = subprocess.Popen(["ip", "netns", "exec", p.net.full("nat2"), PY, "-c", SERVER, o2,
                                str(PORT)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        if srv.stdout.readline().strip() != "ready":
            srv.kill()
            sys.exit("relay.py: the server did not start: %s" % srv.communicate()[1])
        r = subprocess.run(["ip", "netns", "exec", p.net.full("nat1"), PY, "-c", CLIENT, o2,
                            str(PORT), str(pings), str(mb)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=600)
        srv.kill()
        srv.communicate()
        if r.returncode != 0:
            sys.exit("relay.py: the client failed: %s" % r.stderr)
        res = json.loads(r.stdout)
        res["link"] = want
        if symmetric:
            sa = p.status("a")
            res["relay_datagrams"] = sum(sa["relaying"][0]["datagrams"]) if sa.get("relaying") else 0
        return res
    finally:
        p.cleanup()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardnode", default=os.path.join(REPO, "build", "shardnode"))
    ap.add_argument("--mb", type=int, default=32, help="MiB sent for throughput")
    ap.add_argument("--pings", type=int, default=300, help="measured request/answer round trips")
    args = ap.parse_args()
    sn = os.path.abspath(args.shardnode)
    try:
        preconditions(sn)
    except Skip as e:
        sys.exit("relay.py: cannot run here: %s" % e)
    load = open("/proc/loadavg").read().split()[:3]
    print("load before: %s" % " ".join(load), flush=True)
    direct = measure(sn, False, args.pings, args.mb, "d")
    print("direct  (punched): rtt median %.3f ms (p90 %.3f), %.1f Mbit/s (%d MiB in %.2f s)"
          % (direct["rtt_ms"], direct["rtt_p90_ms"], direct["mbit_s"], args.mb,
             direct["secs"]), flush=True)
    relayed = measure(sn, True, args.pings, args.mb, "r")
    print("relayed (via a):   rtt median %.3f ms (p90 %.3f), %.1f Mbit/s (%d MiB in %.2f s; "
          "a forwarded %d datagrams)" % (relayed["rtt_ms"], relayed["rtt_p90_ms"],
                                         relayed["mbit_s"], args.mb, relayed["secs"],
                                         relayed["relay_datagrams"]), flush=True)
    print("ratio relayed/direct: latency %.2fx, throughput %.2fx"
          % (relayed["rtt_ms"] / direct["rtt_ms"], relayed["mbit_s"] / direct["mbit_s"]))
    print("load after: %s" % " ".join(open("/proc/loadavg").read().split()[:3]))


if __name__ == "__main__":
    main()
