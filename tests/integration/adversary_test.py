"""Issue 12's attacks on the mesh, made by real processes in network namespaces.

    /usr/bin/python3 tests/integration/adversary_test.py --shardnode build/shardnode --workdir DIR
        [--keep]

Root, wireguard-go, /dev/net/tun, setpriv and python3's `cryptography` (exits 77,
ctest's skip, when any is missing). It reuses mesh_test.py's namespaces and
nodes: a, b, c, d join as in mesh_test (a invites b, b c, c d), then:

1. A local unprivileged user on b (`setpriv --reuid nobody`): cannot read b's
   wg.key, cannot bind b's gossip port (UDP or TCP, even with SO_REUSEADDR);
   binds b's overlay address and sends a's gossip port, without a
   valid MAC, a DEAD claim about c at incarnation 2^64-1 (UDP), a FETCH of
   probe/64 and a SYNC (TCP). a answers nothing (the TCP connections are
   closed without a byte), logs "MAC does not verify", and keeps listing c
   alive (issue 12, 2).
2. A member (root on b: b's keys, so valid MACs as b): sends a an UPDATE
   with a DEAD claim about c at incarnation 2^64-1 and a SYNC carrying a
   self-signed record of a machine nobody invited (its own identity and
   WireGuard key, a's mesh id). a keeps c alive (issue 12, 3), never lists
   the intruder and adds no WireGuard peer for its key (issue 12, 1).
3. A used invite: 10 s after b's join (and every later one) a's WireGuard
   peers are exactly the members' keys: the invites b and its successors
   used are gone (issue 12, 6); b's token used again gets no answer.
4. A name: with c dead, a newcomer asks a to join as "c" with a fresh
   token: refused ("name belongs to another member"); c comes back up
   under its name (issue 12, 7).
5. An address: a joiner whose WireGuard key gives b's overlay address
   (ground for it here) is refused as "address taken" before its token is
   spent, draws a new key and joins with the same token; b keeps its
   address (issue 12, 11).
Throughout, the mesh goes on: a, b, c, d list each other alive at the end.
"""

import base64
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mesh_test as M  # noqa: E402
from nslib import NOBODY, PY, WG_PORT, Failure, Net, check, log, sh  # noqa: E402
from nslib import requirements, run_test  # noqa: E402

GOSSIP_PORT = M.GOSSIP_PORT

# The attacker's side runs in a namespace as its own python process: it gets
# its parameters as JSON and prints what it saw as JSON. A tiny msgpack
# writer (maps, str, bin, uint, bool, arrays) and the MAC of PROTOCOL.md.
ATTACK = r'''
import hashlib, hmac, json, os, socket, struct, sys, time
P = json.loads(sys.argv[1])

def mp(v):
    if isinstance(v, bool):
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        if v < 128: return bytes([v])
        if v < 1 << 8: return b"\xcc" + bytes([v])
        if v < 1 << 16: return b"\xcd" + struct.pack(">H", v)
        if v < 1 << 32: return b"\xce" + struct.pack(">I", v)
        return b"\xcf" + struct.pack(">Q", v)
    if isinstance(v, str):
        b = v.encode()
        return (bytes([0xa0 | len(b)]) if len(b) < 32 else b"\xd9" + bytes([len(b)])) + b
    if isinstance(v, (bytes, bytearray)):
        return (b"\xc4" + bytes([len(v)]) if len(v) < 256 else b"\xc5" + struct.pack(">H", len(v))) + bytes(v)
    if isinstance(v, list):
        return bytes([0x90 | len(v)]) + b"".join(mp(x) for x in v)
    if isinstance(v, dict):
        return bytes([0x80 | len(v)]) + b"".join(mp(k) + mp(x) for k, x in v.items())
    raise TypeError(type(v))

MESH = bytes.fromhex(P["mesh"])
def msg(t, **kw):
    m = {"v": 2, "t": t, "mesh": MESH, "from": P["as"]}
    m.update(kw)
    return mp(m)

def mac_key(priv, peer_pub):
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
    k = X25519PrivateKey.from_private_bytes(priv)
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    own = k.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    shared = k.exchange(X25519PublicKey.from_public_bytes(peer_pub))
    lo, hi = sorted([own, peer_pub])
    return hmac.new(shared, b"shardnode gossip mac v1" + lo + hi, hashlib.sha256).digest()

def seal(body):
    if P.get("wg_key_file"):
        priv = base64.b64decode(open(P["wg_key_file"]).read().strip())
        key = mac_key(priv, base64.b64decode(P["target_wg"]))
        return body + hmac.new(key, body, hashlib.sha256).digest()[:16]
    return body + os.urandom(16)   # a MAC it cannot compute

import base64
out = {}
# Take the member's own gossip port (datagrams meant for the daemon)?
for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
    t = socket.socket(socket.AF_INET, kind)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        t.bind((P["bind"], P["port"]))
        out["bound_gossip_port_" + str(int(kind))] = True
    except OSError:
        out["bound_gossip_port_" + str(int(kind))] = False
    t.close()
try:
    open(P["wg_key_path"], "rb").read()
    out["wg_key_readable"] = True
except OSError as e:
    out["wg_key_readable"] = False
dead = {"s": 2, "w": base64.b64decode(P["victim_wg"]), "inc": (1 << 64) - 1, "by": P["as"]}
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((P["bind"], 0))
for _ in range(3):
    u.sendto(seal(msg(7, up=[dead])), (P["target"], P["port"]))
out["udp_sent"] = 3

def tcp(body):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.bind((P["bind"], 0))
    s.connect((P["target"], P["port"]))
    frame = seal(body)
    s.sendall(struct.pack("<I", len(frame)) + frame)
    got = b""
    try:
        while True:
            b = s.recv(65536)
            if not b: break
            got += b
    except OSError:
        pass
    s.close()
    return len(got)

out["fetch_reply_bytes"] = tcp(msg(8, path="probe/64", off=0))
ups = []
if P.get("intruder"):
    I = P["intruder"]
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    idk = Ed25519PrivateKey.from_private_bytes(base64.b64decode(I["id_priv"]))
    rec = mp({"mesh": MESH, "name": I["name"], "wg": base64.b64decode(I["wg_pub"]),
              "id": idk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw), "addr": I["addr"], "port": P["port"],
              "inc": 1, "left": False, "ep": [], "sw": "shardnode 0.1.0", "proto": 1,
              "mem": 0, "dev": "", "t": int(time.time() * 1000)})
    ups.append({"s": 0, "r": rec, "g": idk.sign(rec)})
out["sync_reply_bytes"] = tcp(msg(4, fl=0, up=ups)) if ups else tcp(msg(4, fl=0))
print(json.dumps(out))
'''


def b64(path):
    with open(path) as f:
        return f.read().strip()


class AdversaryTest(M.MeshTest):
    def __init__(self, sn, workdir, keep):
        super().__init__(sn, workdir, keep)
        self.tag = "sna%d-" % os.getpid()
        self.net = Net(self.tag)

    def status(self, n):
        s = self.statuses([n])[n.name]
        check(not isinstance(s, M.Err), "status of %s: %s" % (n.name, s))
        return s

    def a_log(self):
        with open(os.path.join(self.nodes["a"].state, "node.log"), errors="replace") as f:
            return f.read()

    def attack(self, node, user, params):
        cmd = ["ip", "netns", "exec", node.ns] + (NOBODY if user else [])
        cmd += [PY, "-c", ATTACK, json.dumps(params)]
        p = sh(cmd, timeout=60, ok=False)
        check(p.returncode == 0, "the attacker on %s failed: %s" % (node.name, p.stderr))
        return json.loads(p.stdout)

    def params(self):
        N = self.nodes
        a, b, c = N["a"], N["b"], N["c"]
        s = self.status(a)
        mv = M.view(s)
        return {"mesh": s["mesh_id"], "as": "b", "bind": b.overlay, "target": a.overlay,
                "port": GOSSIP_PORT, "target_wg": mv["a"]["wg_public_key"],
                "victim_wg": mv["c"]["wg_public_key"],
                "wg_key_path": os.path.join(b.state, "wg.key")}

    def c_stays_alive(self, what):
        N = self.nodes
        self.hold(what, [N["a"], N["b"], N["d"]], self.lists({k: "alive" for k in "abcd"}), 5)

    def local_user(self):
        N = self.nodes
        # The temporary directory is 0700 (mesh_test): let nobody reach b's
        # state directory's entries so that the key file's own mode decides.
        os.chmod(self.tmp, 0o711)
        os.chmod(os.path.join(self.tmp, "state"), 0o711)
        os.chmod(N["b"].state, 0o711)
        before = self.a_log().count("MAC does not verify")
        drops = self.status(N["a"]).get("gossip_unauthenticated")
        check(isinstance(drops, int), "a's status has no gossip_unauthenticated count")
        out = self.attack(N["b"], True, self.params())
        check(not out["wg_key_readable"], "nobody on b can read b's wg.key")
        check(not any(v for k, v in out.items() if k.startswith("bound_gossip_port")),
              "nobody on b bound b's own gossip port (with SO_REUSEADDR): %s" % out)
        check(out["fetch_reply_bytes"] == 0, "a answered a FETCH made by nobody on b "
              "(%d bytes)" % out["fetch_reply_bytes"])
        check(out["sync_reply_bytes"] == 0, "a answered a SYNC made by nobody on b "
              "(%d bytes)" % out["sync_reply_bytes"])
        self.c_stays_alive("c after nobody on b sent a DEAD claim at 2^64-1 as b")
        time.sleep(1.1)
        after = self.a_log().count("MAC does not verify")
        check(after > before, "a did not log the unauthenticated datagrams and frames")
        now = self.status(N["a"])["gossip_unauthenticated"]
        check(now >= drops + 5, "a counted %d unauthenticated datagrams and frames, want at "
              "least 5 (3 datagrams, a FETCH, a SYNC)" % (now - drops))
        log("ok   1. nobody on b (setpriv): cannot read wg.key; its UDP DEAD claim, FETCH and "
            "SYNC as b are dropped by a (MAC does not verify); c stays alive")

    def member(self):
        N = self.nodes
        a, b = N["a"], N["b"]
        # The intruder: keys and an overlay address of a machine nobody invited.
        x = M.Node(self, "intruder", N["e"].ns, N["e"].ip, N["e"].endpoint)
        x.run(["init", "--state", x.state, "--name", "intruder", "--listen-port",
               str(WG_PORT), "--prefix", M.PREFIX])
        xj = x.node_json()
        p = self.params()
        p["wg_key_file"] = os.path.join(b.state, "wg.key")
        p["intruder"] = {"name": "intruder", "wg_pub": xj["wg_public_key"],
                         "addr": xj["overlay_address"],
                         "id_priv": b64(os.path.join(x.state, "id.key"))}
        out = self.attack(b, False, p)
        check(out["wg_key_readable"], "root on b cannot read b's wg.key")
        check(out["sync_reply_bytes"] > 0, "a did not answer b's authenticated SYNC")
        self.c_stays_alive("c after b (a member) sent a DEAD claim at 2^64-1")
        s = self.status(a)
        check("intruder" not in M.view(s), "a lists the intruder nobody invited")
        ifname = s["interface"]
        peers = sh(["ip", "netns", "exec", a.ns, "wg", "show", ifname, "peers"]).stdout.split()
        check(xj["wg_public_key"] not in peers, "a made the intruder a WireGuard peer")
        check("not admitted" in self.a_log(), "a did not log the refused record")
        log("ok   2. b (a member) as b: a DEAD claim at 2^64-1 about c leaves c alive; a "
            "self-signed record of a machine nobody invited is refused, no WireGuard peer")

    def used_invites(self):
        N = self.nodes
        a = N["a"]
        s = self.status(a)
        members = {m["wg_public_key"] for m in s["members"] if not m["self"]}
        t0 = time.time()
        while True:
            peers = set(sh(["ip", "netns", "exec", a.ns, "wg", "show", s["interface"],
                              "peers"]).stdout.split())
            if peers == members:
                break
            check(time.time() - t0 < 15, "a's WireGuard peers are not the members' keys 15 s "
                  "on: extra %s" % sorted(peers - members))
            time.sleep(0.5)
        log("ok   3. a's WireGuard peers are exactly the members': the used invite is gone")

    def names(self):
        N = self.nodes
        a, c, e = N["a"], N["c"], N["e"]
        self.net.kill_all(c.ns, signal.SIGKILL)
        c.running = False
        self.wait("a, b, d list c dead", [a, N["b"], N["d"]],
                  self.lists({"a": "alive", "b": "alive", "c": "dead", "d": "alive"}), 20)
        token = self.invite(a)
        j = M.Node(self, "c", e.ns, e.ip, e.endpoint)
        j.state = os.path.join(self.tmp, "state", "c-newcomer")
        self.nodes["c-newcomer"] = j
        j.join(token)
        try:
            j.proc.wait(timeout=45)
        except subprocess.TimeoutExpired:
            raise Failure("a newcomer's join as c still runs 45 s later")
        j.running = False
        with open(j.logs[-1], errors="replace") as f:
            text = f.read()
        check(j.proc.returncode != 0 and "name belongs to another member" in text,
              "a newcomer took dead c's name (exit %d):\n%s" % (j.proc.returncode, text))
        self.net.kill_all(e.ns, signal.SIGKILL)
        c.up()
        self.wait("c back up under its name", [a, N["b"], c, N["d"]],
                  self.lists({k: "alive" for k in "abcd"}), 20)
        log("ok   4. with c dead a newcomer asking to join as c is refused; c comes back as c")

    def collision(self):
        """A joiner whose WireGuard key gives b's overlay address (ground for it
        here): a refuses the JOIN as "address taken" before spending the token,
        the joiner draws a new key and is admitted with the same token."""
        N = self.nodes
        a, b, e = N["a"], N["b"], N["e"]
        s = self.status(a)
        target = M.view(s)["b"]["address"]
        net = [int(x) for x in M.PREFIX.split("/")[0].split(".")]
        plen = int(M.PREFIX.split("/")[1])
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
        from cryptography.hazmat.primitives.serialization import (Encoding, NoEncryption,
                                                                  PrivateFormat, PublicFormat)

        def address(pub):   # mesh_overlay_address (mesh/wg.c), IPv4
            h = 0xcbf29ce484222325
            for byte in pub:
                h = ((h ^ byte) * 0x100000001b3) & 0xffffffffffffffff
            h ^= h >> 30
            h = (h * 0xbf58476d1ce4e5b9) & 0xffffffffffffffff
            h ^= h >> 27
            h = (h * 0x94d049bb133111eb) & 0xffffffffffffffff
            h ^= h >> 31
            host = h % ((1 << (32 - plen)) - 2) + 1
            v = (net[0] << 24 | net[1] << 16 | net[2] << 8 | net[3]) | host
            return "%d.%d.%d.%d" % (v >> 24, (v >> 16) & 255, (v >> 8) & 255, v & 255)
        t0 = time.time()
        while True:
            k = X25519PrivateKey.generate()
            pub = k.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
            if address(pub) == target:
                break
            check(time.time() - t0 < 120, "no key for %s in 120 s" % target)
        # b's own address from our hash: the formula is mesh_overlay_address's.
        check(address(base64.b64decode(M.view(s)["b"]["wg_public_key"])) == target,
              "this test's copy of mesh_overlay_address disagrees with b's address")
        x = M.Node(self, "crowded", e.ns, e.ip, e.endpoint)
        self.nodes["crowded"] = x
        x.run(["init", "--state", x.state, "--name", "crowded", "--listen-port",
               str(WG_PORT), "--endpoint", e.endpoint, "--prefix", M.PREFIX])
        priv = k.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        with open(os.path.join(x.state, "wg.key"), "w") as f:
            f.write(base64.b64encode(priv).decode() + "\n")
        nj = x.node_json()
        nj["wg_public_key"] = base64.b64encode(pub).decode()
        nj["overlay_address"] = target
        with open(os.path.join(x.state, "node.json"), "w") as f:
            json.dump(nj, f)
        with open(os.path.join(x.state, "mesh.json"), "w") as f:
            json.dump({"mesh_id": s["mesh_id"], "prefix": M.PREFIX, "created": int(time.time()),
                       "gossip_port": GOSSIP_PORT, "joined": False, "members": []}, f)
        x.start(["join", self.invite(a), "--state", x.state])
        self.wait("crowded joins with a new key", [a, b],
                  self.lists({"a": "alive", "b": "alive", "crowded": "alive"}), 60)
        with open(x.logs[-1], errors="replace") as f:
            text = f.read()
        check("address was taken" in text, "the joiner did not draw a new key:\n%s" % text)
        got = M.view(self.status(a))
        check(got["crowded"]["address"] != target and got["b"]["address"] == target,
              "after the collision a lists crowded at %s and b at %s"
              % (got["crowded"]["address"], got["b"]["address"]))
        log("ok   5. a joiner whose key gave b's address (%s) was refused before its token was "
            "spent, drew a new key and joined at %s; b kept its address"
            % (target, got["crowded"]["address"]))

    def run(self, scaffold_only=False):
        self.setup()
        self.init_a()
        self.start_mesh()
        self.local_user()
        self.member()
        self.used_invites()
        self.names()
        self.collision()
        self.wait("the mesh goes on", [self.nodes[k] for k in "abcd"],
                  self.lists({k: "alive" for k in "abcd"}), 10)
        log("ok   6. a, b, c, d list each other alive after every attack")


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    sn = os.path.abspath(args.shardnode)
    rc = requirements("adversary_test", sn, ("setpriv", "wg"), ("cryptography",))
    if rc:
        return rc
    workdir = os.path.abspath(args.workdir) if args.workdir else None
    if workdir:
        os.makedirs(workdir, exist_ok=True)
    t = AdversaryTest(sn, workdir, args.keep)
    return run_test("adversary_test", t.run, t.failure_report, t.cleanup, t.t_start, t.summary)


if __name__ == "__main__":
    sys.exit(main())
