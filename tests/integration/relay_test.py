"""A member relays for a pair that cannot meet (issue 19, points 6b, 6c, 6d;
docs/PROTOCOL.md, "Relays").

    /usr/bin/python3 tests/integration/relay_test.py --shardnode build/shardnode [--keep]

Runs as root with wireguard-go, iptables and /dev/net/tun (exits 77, ctest's
skip, when any is missing). Namespaces named snr<pid>-NAME (nslib.Net): a
public box `a` on a bridge (underlay 10.202.0.0/24, which nslib's bridge
carries for any prefix), and two routers r1, r2, each with a box behind it
(nat1, nat2) and Linux MASQUERADE with --random-fully (a symmetric mapping:
another port per destination, so the endpoint others observed is never the
one a new peer would see, and punching cannot succeed). Later a second
public box `b` joins.

1. `init` and `up` on a; nat1 and nat2 each `join` through an invite of a's
   (no --endpoint: "nat"). All three alive everywhere.
2. nat1 and nat2 list each other `pending`, then `unreachable` or at once
   `relayed`, never `direct` or `punched`; both end `relayed` with relay.via
   "a" within 90 s of nat2's join; a's status lists the pair under
   "relaying" with both ports.
3. TCP over the overlay both ways between nat1 and nat2 (through a); a
   connect may take up to CONNECT_S (WireGuard tries a handshake every 5 s),
   and one slower than 2 s logs what WireGuard holds on a, nat1 and nat2.
4. (6c) A capture on a's underlay interface (an AF_PACKET socket, as
   tcpdump's) while nat1 sends a marker line to nat2 over TCP: every
   datagram to or from the pair's two relay ports is WireGuard-shaped
   (types 1-4 at their sizes), datagrams both ways are forwarded, and the
   marker appears in no packet a sees.
5. `status` (text) on nat1 shows nat2 `relayed via a`. Then (6b's pool
   job; nat1 and nat2 compute with --threads 1, as adversary_pool_test's
   pair, so two stages beat one) a, which runs --no-compute, submits a job of STEPS steps: each
   end's document lists its link to the other relayed via a; the
   elected plan's two stages are nat1 and nat2 (neighbours, their pipeline
   traffic through a), every stage's loss at every step and the model a
   gathers equal the single process's bit for bit.
6. (6d) b and c join with --endpoint (public), c with --no-relay (status
   says which relays). a's daemon is killed (SIGKILL); the pair ends
   relayed via b within FAILOVER_S of the kill (the failure detector's
   < 10 s, a poll and two round trips, and 4 s more when c, which never
   answers, was asked first), TCP works both ways again, and c relays
   nothing.
7. Cleanup (also on failure and SIGTERM): every process stopped, namespaces
   and the temporary directory removed.
"""

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nslib import (PY, WG_PORT, Failure, Pool, check, check_gathered, log,  # noqa: E402
                   pool_job_files, requirements, run, run_test)
from nat_test import ECHO_CLIENT, ECHO_SERVER  # noqa: E402

PREFIX = "10.76.0.0/16"
PUBLIC = {"a": "10.202.0.11", "b": "10.202.0.12", "c": "10.202.0.13"}
ROUTERS = {"r1": ("10.202.0.101", "192.168.21", "nat1", True),
           "r2": ("10.202.0.102", "192.168.22", "nat2", True)}
ECHO_PORT = 9101
RELAY_LIMIT = 90
FAILOVER_S = 20
# A TCP connect over the relay may wait for WireGuard's next handshake
# attempt (every 5 s): three of them.
CONNECT_S = 15
STEPS = 10

# Summarises what crosses an interface for `secs` seconds: every UDP
# datagram to or from the given ports (WireGuard-shaped or not), and
# whether the marker appears in any packet.
SNIFF = r"""
import json, socket, struct, sys, time
iface, secs, marker, ports = sys.argv[1], float(sys.argv[2]), sys.argv[3].encode(), set(json.loads(sys.argv[4]))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((iface, 0))
s.settimeout(0.2)
print("ready", flush=True)
res = {"packets": 0, "marker": 0, "to_port": {}, "from_port": {}, "not_wireguard": 0, "types": {},
       "odd": []}
def wg(b):
    if len(b) < 4 or b[1:4] != b"\0\0\0":
        return None
    t, n = b[0], len(b)
    ok = {1: n == 148, 2: n == 92, 3: n == 64, 4: n >= 32}.get(t, False)
    return t if ok else None
end = time.time() + secs
while time.time() < end:
    try:
        d = s.recv(65535)
    except socket.timeout:
        continue
    res["packets"] += 1
    if marker in d:
        res["marker"] += 1
    ip = d[14:]
    if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 17:
        continue
    ihl = (ip[0] & 15) * 4
    sp, dp = struct.unpack("!HH", ip[ihl:ihl + 4])
    pay = ip[ihl + 8:]
    for port, key in ((dp, "to_port"), (sp, "from_port")):
        if port in ports:
            res[key][str(port)] = res[key].get(str(port), 0) + 1
            t = wg(pay)
            if t is None:
                res["not_wireguard"] += 1
                if len(res["odd"]) < 5:
                    res["odd"].append([sp, dp, len(pay), pay[:16].hex()])
            else:
                res["types"][str(t)] = res["types"].get(str(t), 0) + 1
print(json.dumps(res), flush=True)
"""


class RelayTest:
    def __init__(self, sn, keep):
        self.p = Pool(sn, keep, "snr%d-" % os.getpid())
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

    def all_alive(self, names):
        for n in names:
            v = self.view(n)
            if not v or any(v.get(o, {}).get("state") != "alive" for o in names):
                return False
        return True

    def relayed_via(self, n, other):
        v = self.view(n)
        m = v.get(other, {}) if v else {}
        return (m.get("relay") or {}).get("via") if m.get("link") == "relayed" else None

    def tcp_both_ways(self, what):
        p = self.p
        o1, o2 = self.overlay("nat1"), self.overlay("nat2")
        for srv, cli, addr in (("nat2", "nat1", o2), ("nat1", "nat2", o1)):
            proc = subprocess.Popen(["ip", "netns", "exec", p.net.full(srv), PY, "-c",
                                     ECHO_SERVER, addr, str(ECHO_PORT), "30"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            try:
                if proc.stdout.readline().strip() != "ready":
                    proc.kill()
                    raise Failure("the echo server on %s did not start: %s"
                                  % (srv, proc.communicate()[1].strip()))
                msg = "hello from %s" % cli
                t0 = time.time()
                r = p.net.exec(p.net.full(cli), [PY, "-c", ECHO_CLIENT, addr, str(ECHO_PORT),
                                                 msg, str(CONNECT_S)], timeout=60, ok=False)
                took = time.time() - t0
                if r.returncode != 0 or r.stdout.strip() != "echo " + msg:
                    self.wireguard_state()
                check(r.returncode == 0 and r.stdout.strip() == "echo " + msg,
                      "%s: TCP %s -> %s (%s:%d) over the overlay: exit %d after %.1f s %r %s" % (
                          what, cli, srv, addr, ECHO_PORT, r.returncode, took, r.stdout,
                          r.stderr.strip()))
                if took > 2:
                    log("     %s: TCP %s -> %s took %.1f s (WireGuard's handshake retry)"
                        % (what, cli, srv, took))
                    self.wireguard_state()
            finally:
                proc.kill()
                proc.communicate()

    def wireguard_state(self):
        """What WireGuard holds on a, nat1 and nat2 (`wg show all dump`: the
        endpoints, the last handshakes, the counters) and a's pairs: logged
        when TCP over the relay fails or is slow."""
        try:
            for n in ("a", "nat1", "nat2"):
                r = self.p.net.exec(self.p.net.full(n), ["wg", "show", "all", "dump"], ok=False)
                log("---- %s: wg show all dump (at %.1f)\n%s" % (n, time.time(),
                                                               r.stdout.strip()))
            sa = self.p.status("a")
            log("---- a relays %s" % json.dumps(sa.get("relaying") if sa else None))
        except (Failure, OSError, ValueError) as e:  # what it shows, never the verdict
            log("---- WireGuard's state could not be read: %s" % e)

    def report(self):
        """The nodes' logs, WireGuard's handshake lines (wireguard-go logs at
        LOG_LEVEL=verbose here) kept and its other debug lines left out."""
        self.p.report(60, lambda x: not x.startswith("DEBUG") or "andshake" in x or
                      "invalid" in x)

    def run(self):
        p = self.p
        p.net.build({"a": PUBLIC["a"]}, ROUTERS)
        os.makedirs(os.path.join(p.tmp, "state"))
        p.sn_in("a", ["init", "--state", p.state("a"), "--name", "a", "--listen-port",
                      str(WG_PORT), "--endpoint", "%s:%d" % (PUBLIC["a"], WG_PORT),
                      "--prefix", PREFIX])
        p.start("a", ["up", "--state", p.state("a"), "--http", "off", "--no-compute"])
        p.wait("a up", lambda: p.status("a") is not None, 20)
        t0 = time.time()
        for n in ("nat1", "nat2"):
            p.start(n, ["join", self.invite("a"), "--state", p.state(n), "--name", n,
                        "--listen-port", str(WG_PORT), "--http", "off", "--threads", "1"],
                    env=dict(os.environ, LOG_LEVEL="verbose"))
        t_join2 = time.time()
        p.wait("nat1 and nat2 joined", lambda: self.all_alive(["a", "nat1", "nat2"]), 30)
        self.measured("1. a up, nat1 and nat2 joined through a: all three alive", time.time() - t0)

        # 2. pending, then relayed via a, both ways.
        seen = {"nat1": [], "nat2": []}
        end = t_join2 + RELAY_LIMIT
        done = None
        while time.time() < end:
            vias = {}
            for n, other in (("nat1", "nat2"), ("nat2", "nat1")):
                v = self.view(n)
                m = v.get(other, {}) if v else {}
                link = m.get("link")
                if link == "relayed":
                    link = "relayed via %s" % (m.get("relay") or {}).get("via")
                vias[n] = link
                if link and (not seen[n] or seen[n][-1] != link):
                    seen[n].append(link)
                check(link in (None, "pending", "unreachable", "relayed via a"),
                      "%s lists %s with link %r (links so far %s)" % (n, other, link, seen[n]))
            if vias["nat1"] == vias["nat2"] == "relayed via a":
                done = time.time()
                break
            time.sleep(0.5)
        check(done is not None, "nat1 and nat2 not relayed via a within %d s of nat2's join; "
              "links seen %s" % (RELAY_LIMIT, seen))
        self.measured("2. nat1 <-> nat2 relayed via a, from nat2's join (links seen: %s)" % seen,
                      done - t_join2)
        sa = p.status("a")
        pairs = sa.get("relaying") or []
        check(len(pairs) == 1 and sorted(pairs[0]["pair"]) == ["nat1", "nat2"],
              "a's status lists the pairs it relays as %s" % pairs)
        ports = pairs[0]["ports"]
        check(all(isinstance(x, int) and 0 < x < 65536 for x in ports) and ports[0] != ports[1],
              "a relays on ports %s" % ports)

        # 3. TCP both ways.
        t3 = time.time()
        self.tcp_both_ways("3")
        self.measured("3. TCP over the overlay nat1 -> nat2 and nat2 -> nat1, through a",
                      time.time() - t3)

        # 4. (6c) What a forwards: WireGuard datagrams only; the marker nowhere.
        marker = "relay-marker-" + secrets.token_hex(8)
        sniff = subprocess.Popen(["ip", "netns", "exec", p.net.full("a"), PY, "-c", SNIFF, "eth0",
                                  "6", marker, json.dumps(ports)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            check(sniff.stdout.readline().strip() == "ready", "the capture on a did not start")
            o2 = self.overlay("nat2")
            srv = subprocess.Popen(["ip", "netns", "exec", p.net.full("nat2"), PY, "-c",
                                    ECHO_SERVER, o2, str(ECHO_PORT), "10"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
            try:
                check(srv.stdout.readline().strip() == "ready", "the echo server did not start")
                r = p.net.exec(p.net.full("nat1"), [PY, "-c", ECHO_CLIENT, o2, str(ECHO_PORT),
                                                    marker], timeout=30, ok=False)
                check(r.returncode == 0 and r.stdout.strip() == "echo " + marker,
                      "TCP with the marker: exit %d %r %s" % (r.returncode, r.stdout,
                                                              r.stderr.strip()))
            finally:
                srv.kill()
                srv.communicate()
            out, errs = sniff.communicate(timeout=30)
        finally:
            if sniff.poll() is None:
                sniff.kill()
                sniff.communicate()
        res = json.loads(out.strip().splitlines()[-1])
        log("     capture on a (6 s): %s" % json.dumps(res))
        for port in ports:
            check(res["to_port"].get(str(port), 0) > 0 and res["from_port"].get(str(port), 0) > 0,
                  "no datagrams both ways on relay port %d: %s" % (port, res))
        check(res["not_wireguard"] == 0, "%d datagrams on the relay ports are not WireGuard's"
              % res["not_wireguard"])
        check(res["types"].get("4", 0) > 0, "no WireGuard data messages relayed: %s" % res)
        check(res["marker"] == 0, "the marker sent nat1 -> nat2 appears in clear in %d packets "
              "on a" % res["marker"])
        log("ok   4. a forwards only WireGuard datagrams on the pair's ports (%s), the marker "
            "in none of %d packets" % (res["types"], res["packets"]))

        # 5. The text status.
        out = p.sn_in("nat1", ["status", "--state", p.state("nat1")]).stdout
        log("     status on nat1:\n" + "\n".join("       " + ln for ln in out.splitlines()))
        line = [ln for ln in out.splitlines() if ln.startswith("nat2 ")]
        check(line and " relayed via a " in line[0], "status on nat1 shows nat2 as %r" % line)
        note = [ln for ln in out.splitlines() if ln.startswith("note: nat2 is relayed via a")]
        check(note and "kB/s" in note[0], "status on nat1 has no note on the relayed nat2: %r"
              % out)
        tr = self.view("nat1")["nat2"].get("traffic") or {}
        check(isinstance(tr.get("rx_bytes_s"), (int, float)) and
              isinstance(tr.get("tx_bytes_s"), (int, float)),
              "status --json on nat1 has no traffic for nat2: %r" % tr)
        # Neither side took the relay's port for an endpoint of its own (what
        # its peer observes through the relay is the relay's).
        for n in ("nat1", "nat2"):
            eps = self.view(n)[n]["endpoints"]
            check(not any(e.startswith(PUBLIC["a"] + ":") for e in eps),
                  "%s's record lists the relay's address among its endpoints: %s" % (n, eps))
        log("ok   5. status on nat1 shows nat2 relayed via a; no record lists a relay port")

        # 5b. A pool job whose neighbouring stages are the relayed pair.
        self.pool_job()

        # 6. (6d) b joins; a dies; b takes over.
        for n, extra in (("b", []), ("c", ["--no-relay"])):
            self.add_public(n)
            p.start(n, ["join", self.invite("a"), "--state", p.state(n), "--name", n,
                        "--listen-port", str(WG_PORT), "--endpoint",
                        "%s:%d" % (PUBLIC[n], WG_PORT), "--http", "off"] + extra)
        p.wait("b and c joined and direct with nat1 and nat2", lambda: self.ready("b", "c"), 40)
        sb, sc = p.status("b"), p.status("c")
        check(sb.get("relays") is True and sc.get("relays") is False,
              "status says b relays: %s, c (--no-relay) relays: %s" % (sb.get("relays"),
                                                                      sc.get("relays")))
        check(self.relayed_via("nat1", "nat2") == "a", "the pair left a before a died")
        os.killpg(p.procs["a"].pid, signal.SIGKILL)
        p.procs["a"].wait()
        del p.procs["a"]
        killed = time.time()
        moved = None
        while time.time() < killed + FAILOVER_S + 15:
            if self.relayed_via("nat1", "nat2") == "b" and self.relayed_via("nat2", "nat1") == "b":
                moved = time.time()
                break
            time.sleep(0.25)
        check(moved is not None, "the pair is not relayed via b %d s after a was killed "
              "(nat1: %s, nat2: %s)" % (FAILOVER_S + 15, self.relayed_via("nat1", "nat2"),
                                        self.relayed_via("nat2", "nat1")))
        check(moved - killed <= FAILOVER_S, "the pair moved to b %.1f s after a was killed "
              "(bound %d s)" % (moved - killed, FAILOVER_S))
        self.measured("6. a killed: nat1 <-> nat2 relayed via b (bound %d s)" % FAILOVER_S,
                      moved - killed)
        self.tcp_both_ways("6")
        check(not p.status("c").get("relaying"), "c, run with --no-relay, relays %s"
              % p.status("c").get("relaying"))
        log("ok   6. TCP both ways through b; c (--no-relay) relays nothing")

    def pool_job(self):
        """a (--no-compute) submits a job; the plan's two stages are nat1 and
        nat2, whose pipeline traffic goes through a; every stage's loss at
        every step and the model a gathers equal one process's."""
        p = self.p
        wd, corpus, tok, config, job = pool_job_files(p, STEPS)
        single_out = os.path.join(wd, "single")
        m1 = os.path.join(wd, "single.jsonl")
        run([p.sn, "train", "--job", job("single", single_out), "--metrics", m1, "--threads",
             "1"])
        out = os.path.join(wd, "relayed")
        t0 = time.time()
        r = p.sn_in("a", ["train", "--state", p.state("a"), "--job", job("relayed", out),
                          "--wait"], timeout=900, ok=False)
        check(r.returncode == 0, "train --wait on a exited %d:\n%s%s" % (r.returncode, r.stdout,
                                                                        r.stderr))
        st = p.status("a")["job"]
        # each end's document names the relay of its link to the other (the
        # planner counts the pair through a: docs/ARCHITECTURE.md, "Links in
        # the plan")
        for x, y in (("nat1", "nat2"), ("nat2", "nat1")):
            ln = st.get("members", {}).get(x, {}).get("links", {}).get(y)
            check(isinstance(ln, list) and len(ln) == 3 and ln[2] == "a",
                  "%s's document lists its link to %s as %r, not relayed via a" % (x, y, ln))
        stages = st["committed"]["stages"]
        names = sorted(x[0] for x in stages)
        check(names == ["nat1", "nat2"], "the plan's stages are %s, not nat1 and nat2 (a runs "
              "--no-compute)" % stages)
        check(self.relayed_via("nat1", "nat2") == "a", "the pair is no longer relayed via a")
        worst = p.check_losses(stages, st["id"], m1, STEPS, 0.0)
        wdiff = check_gathered(out, single_out, 0.0)
        sa = p.status("a")["relaying"][0]
        self.measured("5b. a job over the relayed pair (plan %s; losses equal one process, worst "
                      "rel %.1e; gathered model %.1e; a forwarded %d datagrams, %.1f MB)" % (
                          ", ".join("%s layers %d-%d" % (x[0], x[1], x[2] - 1) for x in stages),
                          worst, wdiff, sum(sa["datagrams"]), sum(sa["bytes"]) / 1e6),
                      time.time() - t0)

    def add_public(self, short):
        net = self.p.net
        ns = net.add(short)
        net.wire(ns, "eth0", "p-" + short)
        net.ip(ns, "addr", "add", PUBLIC[short] + "/24", "dev", "eth0")

    def ready(self, *names):
        for n in ("nat1", "nat2"):
            v = self.view(n)
            for o in names:
                if not v or v.get(o, {}).get("state") != "alive" or v[o].get("link") != "direct":
                    return False
        return True

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
    rc = requirements("relay_test", sn)
    if rc:
        return rc
    t = RelayTest(sn, args.keep)
    return run_test("relay_test", t.run, t.report, t.p.cleanup, t.t_start, t.summary,
                    lambda secs: "ok   7. cleanup: namespaces, processes and files removed "
                    "(%.1f s)" % secs)


if __name__ == "__main__":
    sys.exit(main())
