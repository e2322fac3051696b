"""The mesh daemon in network namespaces: join, failure, restart, leave, tokens, NAT
(its pieces: meshlib.py; the namespaces: nslib.py).

    /usr/bin/python3 tests/integration/mesh_test.py --shardnode build/shardnode --workdir DIR
        [--keep] [--scaffold-only]

Runs as root with wireguard-go and /dev/net/tun (exits 77, ctest's skip, when
any is missing). Every box is a network namespace named snm<pid>-NAME; the
public boxes and the routers' WAN legs hang on one bridge in a hub namespace
of their own (underlay 10.201.0.0/24, veth MTU 1400); the root namespace's
network is never touched. Each node's state directory lies in a temporary
directory; its daemon's stdout and stderr go to a log file there, whose last
30 lines are printed on failure (and the logs copied to --workdir).

1. The scaffolding: each box reaches the others' underlay addresses (a UDP
   echo that reports the source it saw); a box behind a router is seen as the
   router's WAN address (MASQUERADE) and cannot be reached from outside.
2. Four public nodes a, b, c, d: `init` (a new mesh) and `up` on a; a invites
   b, b invites c, c invites d (chained), each `join` running in the
   foreground. Every node lists all four alive within 10 s of d's join
   starting (`status --json` polled every 0.25 s); the status records agree
   with the state directories (address, key, mesh id, prefix, endpoint); the
   public nodes reach each other directly; control.sock is mode 0600.
3. Gossip (port 7946, UDP and TCP) is bound to the node's overlay address
   only: `ss` in each namespace, and a TCP connect from another box to the
   underlay address fails while one to the overlay address succeeds. No two
   nodes' WireGuard interfaces share a name (their UAPI sockets share
   /var/run/wireguard).
4. A crashed box (kill -9 of every process in c's namespace, wireguard-go
   included): every survivor marks c dead within 10 s; `status` on c fails.
5. `shardnode up` on c's state directory again: everyone lists c alive
   within 20 s.
6. `shardnode leave` on d returns 0 once d is gone (its namespace is left
   without processes); a, b, c list d as left, never dead, within 10 s, and
   keep it left for 5 s more.
7. Tokens: an expired one (--ttl 1s, 2 s later), b's token again, and a fresh
   token altered in one character are each refused by `join` (exit non-zero
   within 35 s, "expired" / "already used" / "altered" on stderr: b's token
   gets no answer at all, a used invite's WireGuard key being withdrawn; no process
   left behind); the members and their states are unchanged.
8. NAT: nat1 behind a port-preserving MASQUERADE router joins through a
   without --endpoint; every node lists it alive, it lists every node alive,
   and TCP to gossip's overlay port works both ways between it and each
   public node (this machine has no ping; a TCP connect proves traffic both
   ways). nat2 behind a second router, a symmetric NAT (MASQUERADE
   --random-fully: a new port per destination, so no hole punching gets
   through), joins through a: nat1 and nat2 list each other alive with a link
   other than "direct", everyone lists nat2 alive, and nat2 exchanges traffic
   with every public node.
9. Cleanup (also on failure and on SIGTERM): every process in the test's
   namespaces is stopped, the namespaces and the temporary directory are
   removed, and the script checks that none of its namespaces or processes
   remain.

--scaffold-only builds the namespaces, runs check 1 and `init`/`invite`, and
cleans up: the part that needs no daemon. --keep keeps the temporary
directory.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nslib import (MTU, PY, WG_PORT, Failure, Net, check, log, requirements,  # noqa: E402
                   run_test, sh)
from meshlib import (GOSSIP_PORT, LOG_TAIL, POLL, PREFIX, TCP_CONNECT, UDP_ASK,  # noqa: E402
                     UDP_ECHO, UNDERLAY, Err, Node, alter_token, describe, validate_status,
                     view)

def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def remove_stale_runs():
    """Namespaces and temporary directories of earlier runs that were killed
    (ctest's timeout kills with SIGKILL, which no finally survives)."""
    def ours_dead(pid):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                return b"mesh_test.py" not in f.read()
        except OSError:
            return True
    p = sh(["ip", "netns", "list"], ok=False)
    stale = {}
    for ln in p.stdout.splitlines():
        m = re.match(r"(snm(\d+)-\S+)", ln)
        if m and int(m.group(2)) != os.getpid() and ours_dead(int(m.group(2))):
            stale.setdefault(int(m.group(2)), []).append(m.group(1))
    for pid, names in stale.items():
        net = Net("snm%d-" % pid)
        net.names = list(names)
        probs = net.destroy()
        log("note: removed namespaces of an earlier run (pid %d) that was killed: %s%s"
            % (pid, " ".join(names), ("; " + "; ".join(probs)) if probs else ""))
    tmp = tempfile.gettempdir()
    for d in os.listdir(tmp):
        m = re.match(r"snm(\d+)-", d)
        if m and int(m.group(1)) != os.getpid() and ours_dead(int(m.group(1))):
            shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)




# --------------------------------------------------------------------------
# The test


class MeshTest:
    def __init__(self, sn, workdir, keep):
        self.sn = sn
        self.workdir = workdir
        self.keep = keep
        self.tag = "snm%d-" % os.getpid()
        self.tmp = None
        self.net = Net(self.tag)
        self.nodes = {}
        self.procs = []
        self.times = []     # (what, seconds, limit or None)
        self.t_start = time.time()

    # ---------------------------------------------------------------- helpers

    def unknown_hint(self, path):
        try:
            with open(path, errors="replace") as f:
                text = f.read()
        except OSError:
            return ""
        lines = [ln for ln in text.splitlines() if not ln.startswith("# ")]
        if "unknown command" in text:
            return (": this shardnode has no such command yet (%s)"
                    % " / ".join(ln for ln in lines if "unknown command" in ln))
        return ":\n    " + "\n    ".join(lines[-LOG_TAIL:]) if lines else " (its log is empty)"

    def measured(self, what, secs, limit=None):
        self.times.append((what, secs, limit))
        log("ok   %s: %.2f s%s" % (what, secs, "" if limit is None else " (limit %g s)" % limit))

    def statuses(self, nodes):
        """`status --json` of each node, run in parallel; a dict name -> dict or Err."""
        procs = {}
        for n in nodes:
            procs[n.name] = subprocess.Popen(
                ["ip", "netns", "exec", n.ns, self.sn, "status", "--state", n.state, "--json"],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True)
        out = {}
        for n in nodes:
            p = procs[n.name]
            try:
                o, e = p.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                out[n.name] = Err("status --json did not answer within 5 s")
                continue
            if p.returncode != 0:
                if "unknown command" in e:
                    raise Failure("shardnode status: this shardnode has no such command yet (%s)"
                                  % e.strip())
                out[n.name] = Err("status --json exit %d: %s" % (p.returncode, e.strip()))
                continue
            try:
                s = json.loads(o)
            except ValueError as ex:
                raise Failure("node %s: status --json printed no JSON (%s): %r"
                              % (n.name, ex, o[:300]))
            validate_status(n.name, s)
            out[n.name] = s
        return out

    def poll(self, observers):
        """The daemons still run (a failure names the first that stopped), then
        the observers' status."""
        self.check_daemons()
        try:
            return self.statuses(observers)
        except Failure:
            time.sleep(0.3)       # a daemon that is not there yet exits at once:
            self.check_daemons()  # name it rather than the status command
            raise

    def check_daemons(self):
        for n in self.nodes.values():
            n.check_running()

    def wait(self, what, observers, pred, limit, t0=None):
        """Polls the observers' status every 0.25 s until pred(observer, view)
        holds for all of them in one poll, at most `limit` seconds after t0.
        pred returns None when satisfied, else what is missing. Returns
        (seconds until all held, {observer: seconds until it first held})."""
        t0 = time.time() if t0 is None else t0
        first = {}
        while True:
            started = time.time()
            views = self.poll(observers)
            now = time.time() - t0
            missing = {}
            for n in observers:
                s = views[n.name]
                why = str(s) if isinstance(s, Err) else pred(n, view(s))
                if why is None:
                    first.setdefault(n.name, now)
                else:
                    missing[n.name] = why
            if not missing:
                return now, first
            if now > limit:
                raise Failure("%s: not within %g s. Still missing:\n%s\nlast seen status:\n%s"
                              % (what, limit, "\n".join("  %s: %s" % kv for kv in missing.items()),
                                 describe(views)))
            time.sleep(max(0.0, started + POLL - time.time()))

    def hold(self, what, observers, pred, secs):
        """pred must hold for every observer at every poll for secs seconds."""
        t0 = time.time()
        polls = 0
        while time.time() - t0 < secs:
            started = time.time()
            views = self.poll(observers)
            polls += 1
            for n in observers:
                s = views[n.name]
                why = str(s) if isinstance(s, Err) else pred(n, view(s))
                check(why is None, "%s: broken %.1f s in: %s: %s\nlast seen status:\n%s"
                      % (what, time.time() - t0, n.name, why, describe(views)))
            time.sleep(max(0.0, started + POLL - time.time()))
        return polls

    @staticmethod
    def lists(expect):
        """pred: the observer lists each name in expect with that state (a str or a
        tuple of allowed states)."""
        def pred(obs, v):
            bad = []
            for name, want in expect.items():
                want = (want,) if isinstance(want, str) else want
                got = v.get(name, {}).get("state", "missing")
                if got not in want:
                    bad.append("%s is %s, want %s" % (name, got, "|".join(want)))
            return "; ".join(bad) or None
        return pred

    def tcp(self, ns, targets, timeout=2.0):
        p = self.net.exec(ns, [PY, "-c", TCP_CONNECT,
                               json.dumps([[h, pt, timeout] for h, pt in targets])],
                          timeout=30 + timeout * len(targets))
        return json.loads(p.stdout)

    def tcp_until(self, what, pairs, limit):
        """pairs: [(from node, to node)]: TCP connect from the first's namespace to
        the second's overlay address, gossip port, until all work."""
        t0 = time.time()
        todo = list(pairs)
        last = {}
        while todo:
            self.check_daemons()
            by_src = {}
            for a, b in todo:
                by_src.setdefault(a, []).append(b)
            for a, bs in by_src.items():
                res = self.tcp(a.ns, [(b.overlay, GOSSIP_PORT) for b in bs])
                for b in bs:
                    r = res["%s:%d" % (b.overlay, GOSSIP_PORT)]
                    last[(a.name, b.name)] = r
                    if r == "ok":
                        todo.remove((a, b))
            if todo and time.time() - t0 > limit:
                raise Failure("%s: no TCP connection within %g s: %s" % (
                    what, limit, "; ".join("%s -> %s (%s:%d): %s" % (a.name, b.name, b.overlay,
                                                                     GOSSIP_PORT, last[(a.name, b.name)])
                                           for a, b in todo)))
            if todo:
                time.sleep(0.5)
        return time.time() - t0

    def invite(self, node, ttl=None):
        args = ["invite", "--state", node.state] + (["--ttl", ttl] if ttl else [])
        p = node.run(args)
        lines = p.stdout.splitlines()
        check(len(lines) == 1 and lines[0].startswith("snj1."),
              "%s: shardnode invite printed %r" % (node.name, p.stdout))
        return lines[0]

    # ---------------------------------------------------------------- phases

    def setup(self):
        self.tmp = tempfile.mkdtemp(prefix=self.tag)
        os.chmod(self.tmp, 0o700)
        os.makedirs(os.path.join(self.tmp, "state"))
        os.makedirs(os.path.join(self.tmp, "logs"))
        t0 = time.time()
        public = {s: "%s.%d" % (UNDERLAY, 11 + i) for i, s in enumerate("abcde")}
        self.wan = {"r1": UNDERLAY + ".101", "r2": UNDERLAY + ".102"}
        self.lan = {"r1": "192.168.11", "r2": "192.168.12"}
        self.net.build(public, {"r1": (self.wan["r1"], self.lan["r1"], "nat1", False),
                                "r2": (self.wan["r2"], self.lan["r2"], "nat2", True)})
        for s, addr in public.items():
            self.nodes[s] = Node(self, s, self.net.full(s), addr, "%s:%d" % (addr, WG_PORT))
        for r, nat in (("r1", "nat1"), ("r2", "nat2")):
            self.nodes[nat] = Node(self, nat, self.net.full(nat), self.lan[r] + ".2", None)
        for n in self.nodes.values():
            sock = os.path.join(n.state, "control.sock")
            check(len(sock) < 100, "control socket path %s is too long for AF_UNIX" % sock)
        built = time.time() - t0
        self.preflight()
        self.measured("1. scaffolding: %d namespaces built (%.2f s) and checked"
                      % (len(self.net.names), built), time.time() - t0)

    def preflight(self):
        """The underlay works as the test assumes, before any daemon runs."""
        N = self.nodes
        for ns in self.net.names:
            if ns == self.net.hub:
                continue
            out = sh(["ip", "-n", ns, "-o", "link", "show"]).stdout
            for line in out.splitlines():
                if re.match(r"\d+: (eth0|wan0|lan0)@", line):
                    check(" mtu %d " % MTU in line, "%s: %s" % (ns, line))
        port = 9999
        echo = subprocess.Popen(["ip", "netns", "exec", N["a"].ns, PY, "-c", UDP_ECHO, str(port),
                                 "15"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.procs.append(echo)
        try:
            check(echo.stdout.readline().strip() == "ready", "the UDP echo in a did not start")
            a = (N["a"].ip, port)
            expect = {"b": N["b"].ip, "c": N["c"].ip, "d": N["d"].ip, "e": N["e"].ip,
                      "nat1": self.wan["r1"], "nat2": self.wan["r2"]}
            for name, seen_ip in expect.items():
                res = json.loads(self.net.exec(N[name].ns, [PY, "-c", UDP_ASK,
                                                            json.dumps([a])]).stdout)
                r = res["%s:%d" % a]
                check(r and r.split(":")[0] == seen_ip,
                      "underlay: %s -> a (%s:%d) over UDP: %s (expected to be seen as %s)"
                      % (name, a[0], a[1], r, seen_ip))
            # No way in from outside the routers.
            res = json.loads(self.net.exec(N["b"].ns, [PY, "-c", UDP_ASK, json.dumps(
                [[N["nat1"].ip, port], [N["nat2"].ip, port]])]).stdout)
            for r in res.values():
                check(r.startswith("error"), "underlay: b reaches a box behind NAT: %s" % res)
        finally:
            echo.kill()
            echo.communicate()

    def init_a(self):
        a = self.nodes["a"]
        p = a.run(["init", "--state", a.state, "--name", "a", "--listen-port", str(WG_PORT),
                   "--endpoint", a.endpoint, "--prefix", PREFIX])
        log("ok   init a: %s" % p.stdout.strip())
        self.token_b = self.invite(a)
        return self.token_b

    def start_mesh(self):
        N = self.nodes
        a, b, c, d = N["a"], N["b"], N["c"], N["d"]
        t0 = time.time()
        a.up()
        secs, _ = self.wait("a starts (`shardnode up`) and lists itself alive", [a],
                            self.lists({"a": "alive"}), 20, t0)
        self.measured("2. a up: status lists a alive", secs)
        ctl = os.path.join(a.state, "control.sock")
        mode = os.stat(ctl).st_mode & 0o777
        check(mode == 0o600, "%s has mode %o, not 600" % (ctl, mode))
        t0 = time.time()
        b.join(self.token_b)
        secs, _ = self.wait("b joins through a's token", [a, b],
                            self.lists({"a": "alive", "b": "alive"}), 30, t0)
        self.measured("2. b joined (a, b list both alive)", secs)
        token_c = self.invite(b)
        t0 = time.time()
        c.join(token_c)
        secs, _ = self.wait("c joins through b's token", [a, b, c],
                            self.lists({k: "alive" for k in "abc"}), 30, t0)
        self.measured("2. c joined through b (a, b, c list all alive)", secs)
        token_d = self.invite(c)
        t0 = time.time()
        d.join(token_d)
        secs, first = self.wait("all four list all four alive after d's join started",
                                [a, b, c, d], self.lists({k: "alive" for k in "abcd"}), 10, t0)
        self.measured("2. d joined through c: every node lists all 4 alive", secs, 10)

        # The records agree with the state directories.
        public = [a, b, c, d]
        truth = {n.name: n.node_json() for n in public}
        with open(os.path.join(a.state, "mesh.json")) as f:
            mesh_id = json.load(f)["mesh_id"]
        views = self.statuses(public)
        for n in public:
            s = views[n.name]
            check(not isinstance(s, Err), "status of %s: %s" % (n.name, s))
            check(s["mesh_id"] == mesh_id and s["prefix"] == PREFIX,
                  "%s: mesh_id %s prefix %s, a's mesh.json says %s %s"
                  % (n.name, s["mesh_id"], s["prefix"], mesh_id, PREFIX))
            v = view(s)
            for m in public:
                rec = v[m.name]
                check(rec["address"] == truth[m.name]["overlay_address"],
                      "%s lists %s at %s, its node.json says %s" % (
                          n.name, m.name, rec["address"], truth[m.name]["overlay_address"]))
                check(rec["wg_public_key"] == truth[m.name]["wg_public_key"],
                      "%s lists %s with key %s, its node.json says %s" % (
                          n.name, m.name, rec["wg_public_key"], truth[m.name]["wg_public_key"]))
                check(rec["endpoint"] == m.endpoint, "%s lists %s's endpoint as %s, not %s"
                      % (n.name, m.name, rec["endpoint"], m.endpoint))

        def direct(obs, v):
            bad = ["%s is %s/%s, last heard %s s ago" % (k, v[k]["state"], v[k]["link"],
                                                         v[k]["last_heard_s"])
                   for k in "abcd" if k != obs.name and not (
                       v[k]["state"] == "alive" and v[k]["link"] == "direct" and
                       v[k]["last_heard_s"] is not None)]
            return "; ".join(bad) or None
        secs, _ = self.wait("public nodes on one bridge list each other alive, link direct, "
                            "heard from", public, direct, 10)
        log("ok   2. status records agree with the state directories; a, b, c, d list each "
            "other with link direct")

    def gossip_ports(self):
        public = [self.nodes[k] for k in "abcd"]
        owner = {}
        for n in public:   # wireguard-go's UAPI sockets share /var/run/wireguard
            self.net.note_ifaces(n.ns)
            ifs = self.net.ifaces.get(n.ns, set())
            check(ifs, "%s: no interface besides lo and eth0 in its namespace (wireguard-go's?)"
                  % n.name)
            for i in ifs:
                check(i not in owner, "%s and %s both have an interface named %s"
                      % (owner.get(i), n.name, i))
                owner[i] = n.name
        for i, n in enumerate(public):
            ov = n.overlay
            for proto in ("u", "t"):
                out = self.net.exec(n.ns, ["ss", "-H", "-ln" + proto]).stdout
                bound = []
                for line in out.splitlines():
                    f = line.split()
                    if len(f) < 5:
                        continue
                    host, _, port = f[3].rpartition(":")
                    if port == str(GOSSIP_PORT):
                        bound.append(host.strip("[]").split("%")[0])
                kind = "UDP" if proto == "u" else "TCP"
                check(bound, "%s: nothing listens on %s port %d (ss -H -ln%s:\n%s)"
                      % (n.name, kind, GOSSIP_PORT, proto, out))
                check(all(h == ov for h in bound),
                      "%s: %s port %d bound to %s; must be the overlay address %s only"
                      % (n.name, kind, GOSSIP_PORT, ", ".join(bound), ov))
            other = public[(i + 1) % len(public)]
            res = self.tcp(other.ns, [(n.ip, GOSSIP_PORT), (ov, GOSSIP_PORT)])
            under, over = res["%s:%d" % (n.ip, GOSSIP_PORT)], res["%s:%d" % (ov, GOSSIP_PORT)]
            check(under != "ok", "%s -> %s's underlay %s:%d: TCP connect succeeded; gossip must "
                  "not answer outside the overlay" % (other.name, n.name, n.ip, GOSSIP_PORT))
            check(over == "ok", "%s -> %s's overlay %s:%d: TCP connect failed: %s"
                  % (other.name, n.name, ov, GOSSIP_PORT, over))
        log("ok   3. gossip UDP+TCP %d bound to the overlay address only on a, b, c, d; "
            "refused on the underlay, open on the overlay" % GOSSIP_PORT)

    def not_running(self, n):
        p = n.run(["status", "--state", n.state], ok=False, timeout=15)
        check(p.returncode != 0 and (p.stderr.strip() or p.stdout.strip()),
              "status on %s, whose node is not running: exit %d, stderr %r"
              % (n.name, p.returncode, p.stderr))

    def crash_and_restart(self):
        N = self.nodes
        a, b, c, d = N["a"], N["b"], N["c"], N["d"]
        self.net.note_ifaces(c.ns)
        before = self.net.pids(c.ns)
        check(c.proc.pid in before, "c's daemon (pid %d) is not among the processes in its "
              "namespace %s" % (c.proc.pid, before))
        c.running = False
        t0 = time.time()
        left = self.net.kill_all(c.ns, signal.SIGKILL)
        check(not left, "c's namespace: processes %s survive SIGKILL" % left)
        c.proc.wait()
        log("ok   4. crashed c: SIGKILL to the %d processes in its namespace (%s)"
            % (len(before), ", ".join(map(str, before))))
        secs, first = self.wait("every survivor marks c dead after kill -9", [a, b, d],
                                self.lists({"c": "dead"}), 10, t0)
        for k in "abd":
            self.measured("4. %s marks c dead after kill -9" % k, first[k], 10)
        self.not_running(c)

        t0 = time.time()
        c.up()
        secs, _ = self.wait("every node lists c alive again after `up` on c's state dir",
                            [a, b, c, d], self.lists({k: "alive" for k in "abcd"}), 20, t0)
        self.measured("5. c restarted: every node lists all 4 alive", secs, 20)

    def leave(self):
        N = self.nodes
        a, b, c, d = N["a"], N["b"], N["c"], N["d"]
        t0 = time.time()
        p = d.run(["leave", "--state", d.state], ok=False, timeout=60)
        took = time.time() - t0
        check(p.returncode == 0, "shardnode leave --state d: exit %d after %.1f s: %s%s"
              % (p.returncode, took, p.stderr.strip(), self.unknown_hint_text(p.stderr)))
        d.running = False
        try:
            d.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            raise Failure("shardnode leave returned 0 but d's daemon (pid %d) still runs 2 s "
                          "later" % d.proc.pid)
        end = time.time() + 5
        while self.net.pids(d.ns) and time.time() < end:
            time.sleep(0.1)
        check(not self.net.pids(d.ns), "d left, but processes %s still run in its namespace "
              "(wireguard-go not stopped?)" % self.net.pids(d.ns))
        self.measured("6. shardnode leave on d returned 0, d's daemon exited with code %d"
                      % d.proc.returncode, took)
        self.not_running(d)
        seen_dead = []

        def left(obs, v):
            st = v.get("d", {}).get("state", "missing")
            if st == "dead":
                seen_dead.append(obs.name)
                raise Failure("%s lists d as dead after d left (%.1f s after leave started): a "
                              "node that leaves must be listed as left" % (obs.name,
                                                                            time.time() - t0))
            return None if st == "left" else "d is %s, want left" % st
        secs, first = self.wait("a, b, c list d as left", [a, b, c], left, 10, t0)
        for k in "abc":
            self.measured("6. %s lists d as left" % k, first[k], 10)
        polls = self.hold("d stays left for 5 s", [a, b, c], self.lists({"d": "left"}), 5)
        log("ok   6. a, b, c kept d left for 5 s (%d polls)" % polls)

    def unknown_hint_text(self, text):
        return " (this shardnode has no such command yet)" if "unknown command" in text else ""

    def tokens(self):
        N = self.nodes
        a, b, c, e = N["a"], N["b"], N["c"], N["e"]
        observers = [a, b, c]
        expect = {"a": "alive", "b": "alive", "c": "alive", "d": "left"}
        self.wait("the mesh before the token checks", observers, self.lists(expect), 10)
        expired = self.invite(a, "1s")
        time.sleep(2.0)
        fresh = self.invite(a, "10m")
        altered, at = alter_token(fresh)
        cases = [("expired", "e-expired", expired, "expired"),
                 ("already used (b's token)", "e-used", self.token_b, "already used"),
                 ("altered at character %d of %d" % (at, len(fresh)), "e-altered", altered,
                  "altered")]
        for what, name, token, word in cases:
            j = Node(self, name, e.ns, e.ip, e.endpoint)
            self.nodes[name] = j
            t0 = time.time()
            j.join(token)
            try:
                j.proc.wait(timeout=35)
            except subprocess.TimeoutExpired:
                raise Failure("join with an %s token still runs %.0f s later (must be refused "
                              "within 30 s)" % (what, time.time() - t0))
            took = time.time() - t0
            j.running = False
            with open(j.logs[-1], errors="replace") as f:
                text = "\n".join(ln for ln in f.read().splitlines() if not ln.startswith("# "))
            check(j.proc.returncode != 0, "join with an %s token exited 0:\n%s" % (what, text))
            check("unknown command" not in text, "join with an %s token: this shardnode has no "
                  "join command yet (%s)" % (what, text.strip()))
            hits = [ln for ln in text.splitlines() if word in ln.lower()]
            check(hits, "join with an %s token exited %d without saying %r on stderr:\n%s"
                  % (what, j.proc.returncode, word, text))
            end = time.time() + 5
            while self.net.pids(e.ns) and time.time() < end:
                time.sleep(0.1)
            check(not self.net.pids(e.ns), "refused join (%s) left processes %s in its namespace"
                  % (what, self.net.pids(e.ns)))
            self.measured("7. join with an %s token refused (exit %d): %s"
                          % (what, j.proc.returncode, hits[0].strip()), took, 30)
        names = {"a", "b", "c", "d"}

        def unchanged(obs, v):
            extra = set(v) - names
            if extra:
                return "lists %s, who were refused" % ", ".join(sorted(extra))
            return self.lists(expect)(obs, v)
        self.wait("the mesh after the refused tokens", observers, unchanged, 5)
        log("ok   7. after the refusals a, b, c still list exactly a, b, c alive and d left")

    def nat(self):
        N = self.nodes
        a, b, c, n1, n2 = N["a"], N["b"], N["c"], N["nat1"], N["nat2"]
        public = [a, b, c]
        gone = ("left", "missing")   # a joiner may not know of d at all
        t0 = time.time()
        n1.join(self.invite(a))
        want = {"a": "alive", "b": "alive", "c": "alive", "nat1": "alive", "d": gone}
        secs, first = self.wait("nat1 (behind MASQUERADE, no --endpoint) joins through a",
                                public + [n1], self.lists(want), 30, t0)
        self.measured("8. nat1 joined: a, b, c list nat1 alive and nat1 lists them alive", secs)
        secs = self.tcp_until("nat1 <-> public nodes over the overlay",
                              [(n1, p) for p in public] + [(p, n1) for p in public], 20)
        self.measured("8. TCP over the overlay nat1 -> a, b, c and a, b, c -> nat1", secs)

        t0 = time.time()
        n2.join(self.invite(a))
        want = dict(want, nat2="alive")

        def pred(obs, v):
            why = self.lists(want)(obs, v)
            if why is None and obs.name in ("nat1", "nat2"):
                other = "nat2" if obs.name == "nat1" else "nat1"
                if v[other]["link"] == "direct":
                    why = ("lists %s with link direct, but the two are behind NATs that no "
                           "hole punching gets through" % other)
            return why
        secs, first = self.wait("nat2 (behind a symmetric NAT) joins through a; nat1 and nat2 "
                                "list each other alive, not direct", public + [n1, n2], pred, 30, t0)
        self.measured("8. nat2 joined: everyone lists nat2 alive", secs)
        views = self.statuses([n1, n2])
        links = {o: view(views[o])["nat2" if o == "nat1" else "nat1"]["link"]
                 for o in ("nat1", "nat2")}
        self.hold("nat1 and nat2 keep listing each other alive and not direct", [n1, n2], pred, 3)
        log("ok   8. nat1 lists nat2 alive/%s, nat2 lists nat1 alive/%s" % (links["nat1"],
                                                                          links["nat2"]))
        secs = self.tcp_until("nat2 <-> public nodes over the overlay",
                              [(n2, p) for p in public] + [(p, n2) for p in public], 20)
        self.measured("8. TCP over the overlay nat2 -> a, b, c and a, b, c -> nat2", secs)
        res = self.tcp(n1.ns, [(n2.overlay, GOSSIP_PORT)], timeout=3)
        log("note nat1 -> nat2 TCP over the overlay (relayed, not required): %s"
            % list(res.values())[0])

    # ---------------------------------------------------------------- run

    def run(self, scaffold_only):
        self.setup()
        token = self.init_a()
        altered, at = alter_token(token)
        log("ok   init a, invite: %d-character token; the altered one differs at character %d"
            % (len(token), at))
        if scaffold_only:
            return
        self.start_mesh()
        self.gossip_ports()
        self.crash_and_restart()
        self.leave()
        self.tokens()
        self.nat()

    def failure_report(self):
        for n in self.nodes.values():
            if n.logs:
                log(n.tail())
        if self.workdir and self.tmp and os.path.isdir(os.path.join(self.tmp, "logs")):
            dst = os.path.join(self.workdir, "logs")
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(os.path.join(self.tmp, "logs"), dst)
            log("logs copied to %s" % dst)

    def cleanup(self):
        problems = []
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.terminate()
                except ProcessLookupError:
                    pass
        problems += self.net.destroy()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    problems.append("process %d does not exit" % p.pid)
        if self.tmp:
            if self.keep:
                log("kept %s" % self.tmp)
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)
                if os.path.exists(self.tmp):
                    problems.append("%s not removed" % self.tmp)
        names, pids = self.net.leftovers()
        if names:
            problems.append("namespaces left: %s" % " ".join(names))
        if pids:
            problems.append("processes left in the test's namespaces: %s" % pids)
        if self.tmp:
            for d in os.listdir("/proc"):
                if d.isdigit() and int(d) != os.getpid():
                    try:
                        with open("/proc/%s/cmdline" % d, "rb") as f:
                            if self.tmp.encode() in f.read():
                                problems.append("process %s still runs on %s" % (d, self.tmp))
                    except OSError:
                        pass
        return problems

    def summary(self):
        if not self.times:
            return
        log("measured:")
        for what, secs, limit in self.times:
            log("  %6.2f s%s  %s" % (secs, "" if limit is None else " /%3g" % limit, what))




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--workdir", help="where logs are copied on failure")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--scaffold-only", action="store_true",
                    help="namespaces, underlay checks, init and invite; no daemon")
    args = ap.parse_args()
    sn = os.path.abspath(args.shardnode)
    workdir = os.path.abspath(args.workdir) if args.workdir else None
    rc = requirements("mesh_test", sn)
    if rc:
        return rc
    if workdir:
        os.makedirs(workdir, exist_ok=True)
    remove_stale_runs()
    t = MeshTest(sn, workdir, args.keep)
    return run_test("mesh_test", lambda: t.run(args.scaffold_only), t.failure_report, t.cleanup,
                    t.t_start, t.summary,
                    lambda secs: "ok   9. cleanup: namespaces, processes and %s removed (%.1f s)"
                    % ("temporary directory" if not args.keep else "nothing else", secs))


if __name__ == "__main__":
    sys.exit(main())
