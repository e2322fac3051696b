"""Hole punching through two NATs (issue 19, point 6a; docs/PROTOCOL.md, "Hole punching").

With routers that drop unsolicited UDP to themselves, as home routers do
(nslib.py), nat1 and nat2 reach `punched` about 6 s after nat2's join.

    /usr/bin/python3 tests/integration/nat_test.py --shardnode build/shardnode [--keep]

Runs as root with wireguard-go, iptables and /dev/net/tun (exits 77, ctest's
skip, when any is missing). Namespaces named snn<pid>-NAME (nslib.Net): a
public box `a` on a bridge (underlay 10.201.0.0/24), and two routers r1, r2
on the same bridge, each with a box behind it (nat1 on 192.168.11.0/24,
nat2 on 192.168.12.0/24) and Linux MASQUERADE with its default,
port-preserving mapping on its WAN leg. Nothing from outside reaches a box
behind a router unless that box sent to it first.

1. `init` and `up` on a (with --endpoint); nat1 and nat2 each `join` through
   an invite of a's, without --endpoint (their records say "nat"). Every
   node lists all three alive.
2. nat1 and nat2 list each other with link `pending` or `punched` from the
   first status on (never `indirect`, `unreachable` or `direct`), and both
   `punched` within 60 s of nat2's join: the seconds it took and the
   punching figures (rounds, attempts, requests) from `status --json`
   are reported; a lists both `direct`; the WireGuard endpoint each NATed
   node has for the other is the other's router (a direct path, not through
   a).
3. TCP over the overlay both ways between nat1 and nat2: an echo server on
   each one's overlay address, a client on the other sends a line and gets
   it back.
4. `status` (text) on nat1 shows nat2 `punched` with its round trip.
5. Cleanup (also on failure and SIGTERM): every process stopped, namespaces
   and the temporary directory removed.
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nslib import (PY, WG_PORT, Failure, Pool, check, log, requirements,  # noqa: E402
                   run_test)

PREFIX = "10.78.0.0/16"
PUBLIC = {"a": "10.201.0.11"}
ROUTERS = {"r1": ("10.201.0.101", "192.168.11", "nat1", False),
           "r2": ("10.201.0.102", "192.168.12", "nat2", False)}
ECHO_PORT = 9100
PUNCH_LIMIT = 60

ECHO_SERVER = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(4)
s.settimeout(float(sys.argv[3]))
print("ready", flush=True)
try:
    while True:
        c, _ = s.accept()
        c.settimeout(5)
        data = c.recv(1024)
        c.sendall(b"echo " + data)
        c.close()
except socket.timeout:
    pass
"""

ECHO_CLIENT = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])),
                             timeout=float(sys.argv[4]) if len(sys.argv) > 4 else 5)
s.sendall(sys.argv[3].encode())
print(s.recv(1024).decode())
"""


class NatTest:
    def __init__(self, sn, keep):
        self.p = Pool(sn, keep, "snn%d-" % os.getpid())
        self.t_start = time.time()
        self.times = []

    def measured(self, what, secs):
        self.times.append((what, secs))
        log("ok   %s: %.2f s" % (what, secs))

    def overlay(self, n):
        with open(os.path.join(self.p.state(n), "node.json")) as f:
            return json.load(f)["overlay_address"]

    def view(self, n):
        s = self.p.status(n)
        return {m["name"]: m for m in s["members"]} if s else None

    def invite(self, n):
        out = self.p.sn_in(n, ["invite", "--state", self.p.state(n)]).stdout.strip()
        check(out.startswith("snj1."), "invite printed %r" % out)
        return out

    def join(self, n, token):
        self.p.start(n, ["join", token, "--state", self.p.state(n), "--name", n,
                         "--listen-port", str(WG_PORT)])

    def all_alive(self, names):
        for n in names:
            v = self.view(n)
            if not v or any(v.get(o, {}).get("state") != "alive" for o in names):
                return False
        return True

    def run(self):
        p = self.p
        p.net.build(PUBLIC, ROUTERS)
        os.makedirs(os.path.join(p.tmp, "state"))
        p.sn_in("a", ["init", "--state", p.state("a"), "--name", "a", "--listen-port",
                      str(WG_PORT), "--endpoint", "%s:%d" % (PUBLIC["a"], WG_PORT),
                      "--prefix", PREFIX])
        p.start("a", ["up", "--state", p.state("a"), "--http", "off"])
        p.wait("a up", lambda: p.status("a") is not None, 20)
        t0 = time.time()
        self.join("nat1", self.invite("a"))
        p.wait("nat1 joined", lambda: self.all_alive(["a", "nat1"]), 30)
        t_join2 = time.time()
        self.join("nat2", self.invite("a"))
        p.wait("nat2 joined", lambda: self.all_alive(["a", "nat1", "nat2"]), 30)
        self.measured("1. a up, nat1 and nat2 joined through a: all three alive", time.time() - t0)

        # 2. pending, then punched, both ways.
        seen = {"nat1": [], "nat2": []}
        end = t_join2 + PUNCH_LIMIT
        punched_at = None
        while time.time() < end:
            links = {}
            for n, other in (("nat1", "nat2"), ("nat2", "nat1")):
                v = self.view(n)
                link = v.get(other, {}).get("link") if v else None
                links[n] = link
                if link and (not seen[n] or seen[n][-1] != link):
                    seen[n].append(link)
                check(link in (None, "pending", "punched"),
                      "%s lists %s with link %r (links so far %s)" % (n, other, link, seen[n]))
            if links["nat1"] == "punched" and links["nat2"] == "punched":
                punched_at = time.time()
                break
            time.sleep(0.25)
        check(punched_at is not None, "nat1 and nat2 not punched within %d s of nat2's join; "
              "links seen %s" % (PUNCH_LIMIT, seen))
        self.measured("2. nat1 <-> nat2 punched, counted from nat2's join (links seen: %s)"
                      % seen, punched_at - t_join2)
        va, v1, v2 = self.view("a"), self.view("nat1"), self.view("nat2")
        for n in ("nat1", "nat2"):
            check(va[n]["link"] == "direct", "a lists %s with link %s" % (n, va[n]["link"]))
            check(va[n].get("nat") is True, "a lists %s without nat" % n)
        check(v1["a"]["link"] == "direct" and v2["a"]["link"] == "direct",
              "nat1/nat2 list a as %s/%s" % (v1["a"]["link"], v2["a"]["link"]))
        check(v1["nat2"]["endpoint"] == "%s:%d" % (ROUTERS["r2"][0], WG_PORT),
              "nat1 sees nat2 at %s, not at r2's WAN address" % v1["nat2"]["endpoint"])
        check(v2["nat1"]["endpoint"] == "%s:%d" % (ROUTERS["r1"][0], WG_PORT),
              "nat2 sees nat1 at %s, not at r1's WAN address" % v2["nat1"]["endpoint"])
        for n, o, v in (("nat1", "nat2", v1), ("nat2", "nat1", v2)):
            log("     %s -> %s: endpoint %s, rtt %s ms, punch %s" % (
                n, o, v[o]["endpoint"], v[o].get("rtt_ms"), json.dumps(v[o].get("punch"))))

        # 3. TCP both ways over the overlay.
        o1, o2 = self.overlay("nat1"), self.overlay("nat2")
        t3 = time.time()
        for srv, cli, addr in (("nat2", "nat1", o2), ("nat1", "nat2", o1)):
            proc = subprocess.Popen(["ip", "netns", "exec", p.net.full(srv), PY, "-c",
                                     ECHO_SERVER, addr, str(ECHO_PORT), "20"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            try:
                # The server's stderr is read only when it did not start: read
                # eagerly (as a check() message argument), it blocks until the
                # server exits, and the client then finds no server.
                if proc.stdout.readline().strip() != "ready":
                    proc.kill()
                    raise Failure("the echo server on %s did not start: %s"
                                  % (srv, proc.communicate()[1].strip()))
                msg = "hello from %s" % cli
                r = p.net.exec(p.net.full(cli), [PY, "-c", ECHO_CLIENT, addr, str(ECHO_PORT), msg],
                               timeout=30, ok=False)
                check(r.returncode == 0 and r.stdout.strip() == "echo " + msg,
                      "TCP %s -> %s (%s:%d) over the overlay: exit %d %r %s" % (
                          cli, srv, addr, ECHO_PORT, r.returncode, r.stdout, r.stderr.strip()))
            finally:
                proc.kill()
                proc.communicate()
        self.measured("3. TCP over the overlay nat1 -> nat2 and nat2 -> nat1", time.time() - t3)

        # 4. The text status.
        out = p.sn_in("nat1", ["status", "--state", p.state("nat1")]).stdout
        log("     status on nat1:\n" + "\n".join("       " + ln for ln in out.splitlines()))
        line = [ln for ln in out.splitlines() if ln.startswith("nat2 ")]
        check(line and " punched " in line[0], "status on nat1 shows nat2 as %r" % line)
        log("ok   4. status on nat1 shows nat2 punched")

    def summary(self):
        if self.times:
            log("measured:")
            for what, secs in self.times:
                log("  %6.2f s  %s" % (secs, what))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    sn = os.path.abspath(args.shardnode)
    rc = requirements("nat_test", sn)
    if rc:
        return rc
    t = NatTest(sn, args.keep)
    return run_test("nat_test", t.run, t.p.report, t.p.cleanup, t.t_start, t.summary,
                    lambda secs: "ok   5. cleanup: namespaces, processes and files removed "
                    "(%.1f s)" % secs)


if __name__ == "__main__":
    sys.exit(main())
