"""`shardnode init` and `shardnode invite`: the state directory and tokens.

    /usr/bin/python3 tests/integration/init_test.py --shardnode build/shardnode --workdir DIR

1. init makes DIR 0700 with wg.key and id.key 0600 and node.json and
   mesh.json as docs/FORMATS.md describes; the public keys in them are those
   of the key files (`wg pubkey` for wg.key where /usr/bin/wg exists, and
   Python's cryptography for both where it is installed); the overlay
   address lies inside the prefix.
2. A second init into the same directory is refused, naming wg.key, and
   leaves the keys byte for byte as they were.
3. A bad --name, --listen-port, --endpoint or --prefix is refused with one
   line naming the flag, before anything is written.
4. invite without an endpoint is refused, saying why.
5. invite prints one "snj1." token whose binary form (docs/PROTOCOL.md)
   carries the mesh id, prefix, this node's keys and endpoint, the expiry
   and secret recorded in invites.json (0600), and a valid signature; two
   invites differ in token and secret and both stay recorded; the recorded
   expiry is now + ttl (1s, 30m, default 24h, 7d) within a few seconds; a
   bad --ttl is refused naming the flag.
6. invite while the node is up (loopback, no WireGuard): joiners redeem
   their tokens while other `shardnode invite` run without pause; every
   joiner is admitted and the node keeps answering. (An invite once held
   invites.lock while it waited for the node's answer, and the node, taking
   that lock to record a token's use, could not answer: both stalled 10 s and
   the joiner's reply was lost.) A node admits at most 64 open invites: the
   65th is refused, naming invites.json, and the file is left as it was.
"""

import argparse
import base64
import ipaddress
import json
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def run(args, expect_rc=0):
    p = subprocess.run([SHARDNODE] + args, capture_output=True, text=True, timeout=60)
    if expect_rc is not None:
        check(p.returncode == expect_rc if expect_rc == 0 else p.returncode != 0,
              f"shardnode {' '.join(args)}: exit {p.returncode}, stderr: {p.stderr.strip()}")
    return p


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def b64key(s):
    raw = base64.b64decode(s, validate=True)
    check(len(raw) == 32 and len(s) == 44, f"{s!r} is not a 44-character base64 key")
    return raw


def read_key_file(path):
    with open(path) as f:
        return b64key(f.read().strip())


def refused(args, flag):
    """A refusal: non-zero exit, one line on stderr naming the flag."""
    p = run(args, expect_rc=1)
    lines = p.stderr.strip().splitlines()
    check(lines and flag in lines[0] and lines[0].startswith("shardnode "),
          f"{args}: expected one line naming {flag}, got {p.stderr!r}")
    return p


def decode_token(text):
    """The binary token of docs/PROTOCOL.md, as a dict."""
    check(text.startswith("snj1."), f"token {text[:20]!r} does not start with snj1.")
    body = text[5:]
    check(all(c.isalnum() or c in "-_" for c in body), "token has non-base64url characters")
    b = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    o = 0

    def take(n):
        nonlocal o
        check(o + n <= len(b), "token truncated")
        o += n
        return b[o - n:o]

    def string():
        return take(take(1)[0]).decode("ascii")

    t = {"version": take(1)[0], "mesh_id": take(16).hex(), "prefix": string(), "members": []}
    for _ in range(take(1)[0]):
        t["members"].append({"wg": take(32), "id": take(32), "endpoint": string()})
    t["expires"] = struct.unpack("<q", take(8))[0]
    t["secret"] = take(16).hex()
    t["issuer"] = take(32)
    signed = b"shardnode-invite" + b[:o]
    t["sig"] = take(64)
    check(o == len(b), "bytes after the signature")
    t["signed"] = signed
    return t


def verify_sig(pub, sig, msg):
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        return None
    try:
        Ed25519PublicKey.from_public_bytes(pub).verify(sig, msg)
        return True
    except Exception:
        return False


def public_keys(wg_priv, id_priv):
    """(X25519 public, Ed25519 public) via cryptography, or None without it."""
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
    except ImportError:
        return None
    raw = (Encoding.Raw, PublicFormat.Raw)
    return (X25519PrivateKey.from_private_bytes(wg_priv).public_key().public_bytes(*raw),
            Ed25519PrivateKey.from_private_bytes(id_priv).public_key().public_bytes(*raw))


def test_init(work):
    state = os.path.join(work, "alice")
    p = run(["init", "--state", state, "--name", "alice", "--listen-port", "51999",
             "--endpoint", "198.51.100.7:51999", "--prefix", "10.88.0.0/16"])
    check(mode(state) == 0o700, f"state dir mode {oct(mode(state))}")
    for k in ("wg.key", "id.key"):
        check(mode(os.path.join(state, k)) == 0o600, f"{k} mode {oct(mode(os.path.join(state, k)))}")
    with open(os.path.join(state, "node.json")) as f:
        node = json.load(f)
    with open(os.path.join(state, "mesh.json")) as f:
        mesh = json.load(f)
    check(node["name"] == "alice" and node["listen_port"] == 51999, f"node.json {node}")
    check(node["endpoint"] == "198.51.100.7:51999", f"endpoint {node['endpoint']}")
    # the data plane's MESH_PROTOCOL_VERSION (2 since COMMIT carries flags)
    check(node["protocol_version"] == 2 and isinstance(node["software_version"], str),
          "versions in node.json: %r, %r" % (node.get("protocol_version"),
                                              node.get("software_version")))
    wg_priv = read_key_file(os.path.join(state, "wg.key"))
    id_priv = read_key_file(os.path.join(state, "id.key"))
    wg_pub, id_pub = b64key(node["wg_public_key"]), b64key(node["id_public_key"])
    check(wg_pub != id_pub and wg_priv != id_priv, "the two key pairs are distinct")
    if os.path.exists("/usr/bin/wg"):
        with open(os.path.join(state, "wg.key")) as f:
            out = subprocess.run(["/usr/bin/wg", "pubkey"], stdin=f, capture_output=True,
                                 text=True, check=True).stdout.strip()
        check(out == node["wg_public_key"], f"wg pubkey {out} != node.json {node['wg_public_key']}")
    pubs = public_keys(wg_priv, id_priv)
    if pubs:
        check(pubs == (wg_pub, id_pub), "public keys in node.json are not those of the key files")
    addr = ipaddress.ip_address(node["overlay_address"])
    net = ipaddress.ip_network(mesh["prefix"])
    check(mesh["prefix"] == "10.88.0.0/16" and addr in net and
          addr not in (net.network_address, net.broadcast_address),
          f"overlay address {addr} not a host of {net}")
    check(len(mesh["mesh_id"]) == 32 and int(mesh["mesh_id"], 16) >= 0, "mesh_id: 32 hex digits")
    check(abs(mesh["created"] - time.time()) < 60, f"created {mesh['created']}")
    check(len(mesh["members"]) == 1, "one member")
    m = mesh["members"][0]
    for k in ("name", "wg_public_key", "id_public_key", "overlay_address", "endpoint"):
        check(m[k] == node[k], f"mesh.json member {k} differs from node.json")
    cpu = node["devices"]["cpu"]
    check(cpu["model"] and cpu["cores"] >= 1 and cpu["memory_bytes"] > 0, f"devices {cpu}")
    check(node["devices"]["gpus"] == [], "a CPU-only build lists no GPUs")
    check(p.stdout.count("\n") == 1 and node["overlay_address"] in p.stdout, "init's summary line")

    # Defaults, and a second node whose mesh differs.
    bob = os.path.join(work, "bob")
    run(["init", "--state", bob, "--name", "bob"])
    with open(os.path.join(bob, "node.json")) as f:
        bnode = json.load(f)
    with open(os.path.join(bob, "mesh.json")) as f:
        bmesh = json.load(f)
    check(bnode["listen_port"] == 51820 and bnode["endpoint"] is None, f"defaults {bnode}")
    check(bmesh["prefix"] == "10.77.0.0/16", f"default prefix {bmesh['prefix']}")
    check(bmesh["mesh_id"] != mesh["mesh_id"], "two inits made the same mesh id")
    check(bnode["wg_public_key"] != node["wg_public_key"], "two inits made the same key")
    return state, bob


def test_reinit(state):
    before = {k: open(os.path.join(state, k), "rb").read() for k in os.listdir(state)}
    p = run(["init", "--state", state, "--name", "other", "--endpoint", "a.example:1"],
            expect_rc=1)
    check("already holds a node (wg.key)" in p.stderr and "--state" in p.stderr,
          f"second init: {p.stderr!r}")
    after = {k: open(os.path.join(state, k), "rb").read() for k in os.listdir(state)}
    check(before == after, "a refused init changed the state directory")


def test_bad_flags(work):
    target = os.path.join(work, "never")
    base = ["init", "--state", target]
    cases = [
        (["--name", ""], "--name"),
        (["--name", "has space"], "--name"),
        (["--name", "a/b"], "--name"),
        (["--name", "x" * 64], "--name"),
        (["--name", "n", "--listen-port", "0"], "--listen-port"),
        (["--name", "n", "--listen-port", "65536"], "--listen-port"),
        (["--name", "n", "--listen-port", "80x"], "--listen-port"),
        (["--name", "n", "--endpoint", "host"], "--endpoint"),
        (["--name", "n", "--endpoint", "host:0"], "--endpoint"),
        (["--name", "n", "--endpoint", "host:70000"], "--endpoint"),
        (["--name", "n", "--endpoint", "bad_host:1"], "--endpoint"),
        (["--name", "n", "--endpoint", "[::1:51820"], "--endpoint"),
        (["--name", "n", "--endpoint", "h" * 60 + ".com:1"], "--endpoint"),
        (["--name", "n", "--prefix", "10.77.0.1/16"], "--prefix"),
        (["--name", "n", "--prefix", "10.77.0.0"], "--prefix"),
        (["--name", "n", "--prefix", "10.77.0.0/33"], "--prefix"),
        (["--name", "n", "--prefix", "fd00::1/64"], "--prefix"),
        (["--name", "n", "--bogus", "1"], "--bogus"),
        ([], "--name"),
    ]
    for extra, flag in cases:
        refused(base + extra, flag)
        check(not os.path.exists(target), f"{extra}: refused init left {target} behind")
    # The good forms of the same flags, IPv6 included.
    v6 = os.path.join(work, "v6")
    run(base[:1] + ["--state", v6, "--name", "n-1.b_c", "--endpoint", "[2001:db8::1]:51820",
                    "--prefix", "fd00:1::/64", "--listen-port", "1"])
    with open(os.path.join(v6, "node.json")) as f:
        addr = ipaddress.ip_address(json.load(f)["overlay_address"])
    check(addr in ipaddress.ip_network("fd00:1::/64"), f"v6 overlay {addr}")
    return v6


def invites(state):
    path = os.path.join(state, "invites.json")
    check(mode(path) == 0o600, f"invites.json mode {oct(mode(path))}")
    with open(path) as f:
        return json.load(f)["invites"]


def invite(state, ttl_args, ttl_s):
    t0 = time.time()
    p = run(["invite", "--state", state] + ttl_args)
    t1 = time.time()
    lines = p.stdout.splitlines()
    check(len(lines) == 1 and lines[0].startswith("snj1."), f"invite printed {p.stdout!r}")
    tok = decode_token(lines[0])
    rec = [r for r in invites(state) if r["secret"] == tok["secret"]]
    check(len(rec) == 1, "the token's secret is not recorded once in invites.json")
    check(rec[0]["expires"] == tok["expires"], "recorded expiry differs from the token's")
    check(int(t0) - 2 <= tok["expires"] - ttl_s <= int(t1) + 2,
          f"expiry {tok['expires']} is not now + {ttl_s}s")
    return lines[0], tok


def test_invite(state, bob, v6):
    # Without an endpoint a joiner could not reach the issuer.
    p = run(["invite", "--state", bob], expect_rc=1)
    check("endpoint" in p.stderr and p.stderr.count("\n") == 1, f"invite without endpoint: {p.stderr!r}")
    check(not os.path.exists(os.path.join(bob, "invites.json")), "refused invite recorded a secret")
    refused(["invite", "--state", state, "--ttl", "5"], "--ttl")
    refused(["invite", "--state", state, "--ttl", "0h"], "--ttl")
    refused(["invite", "--state", state, "--ttl", "366d"], "--ttl")
    refused(["invite", "--state", state, "--ttl", "1w"], "--ttl")
    refused(["invite"], "--state")
    p = run(["invite", "--state", os.path.join(os.path.dirname(state), "none")], expect_rc=1)
    check("node.json" in p.stderr, f"invite on a missing state dir: {p.stderr!r}")

    with open(os.path.join(state, "node.json")) as f:
        node = json.load(f)
    with open(os.path.join(state, "mesh.json")) as f:
        mesh = json.load(f)
    t1, a = invite(state, [], 86400)
    t2, b = invite(state, ["--ttl", "30m"], 1800)
    t3, c = invite(state, ["--ttl", "7d"], 7 * 86400)
    check(len({t1, t2, t3}) == 3 and len({a["secret"], b["secret"], c["secret"]}) == 3,
          "two invites gave the same token or secret")
    check(len(invites(state)) == 3, "every unexpired invite stays recorded")
    for t in (a, b, c):
        check(t["version"] == 1 and t["mesh_id"] == mesh["mesh_id"] and
              t["prefix"] == mesh["prefix"], "token mesh id / prefix")
        check(len(t["members"]) == 1, "one member in the token")
        m = t["members"][0]
        check(m["wg"] == b64key(node["wg_public_key"]) and m["id"] == b64key(node["id_public_key"])
              and m["endpoint"] == node["endpoint"], "token member is not this node")
        check(t["issuer"] == m["id"], "issuer is not the member")
        ok = verify_sig(t["issuer"], t["sig"], t["signed"])
        check(ok is not False, "token signature does not verify")
    # A one-second token: the join will refuse it once expired; here the
    # record must say now + 1 s.
    _, d = invite(state, ["--ttl", "1s"], 1)
    time.sleep(2.1)
    # The next invite drops the expired record, keeps the others.
    _, e = invite(state, ["--ttl", "90s"], 90)
    secrets = {r["secret"] for r in invites(state)}
    check(d["secret"] not in secrets and {a["secret"], b["secret"], c["secret"], e["secret"]} <= secrets,
          "expired invites must be dropped and live ones kept")
    # IPv6 endpoint and prefix go through the token as well.
    _, f = invite(v6, ["--ttl", "1h"], 3600)
    check(f["prefix"] == "fd00:1::/64" and f["members"][0]["endpoint"] == "[2001:db8::1]:51820",
          "v6 token contents")


def test_invite_cap(work):
    """A node admits at most 64 open invites: the 65th is refused, saying so,
    and invites.json keeps the 64."""
    state = os.path.join(work, "many")
    run(["init", "--state", state, "--name", "many", "--endpoint", "192.0.2.9:51820"])
    for _ in range(64):
        run(["invite", "--state", state, "--ttl", "1h"])
    before = open(os.path.join(state, "invites.json"), "rb").read()
    p = run(["invite", "--state", state, "--ttl", "1h"], expect_rc=1)
    line = p.stderr.strip()
    check("invites.json" in line and "64 invites are still open" in line and not p.stdout.strip(),
          f"the 65th open invite: expected a refusal naming invites.json, got {line!r}")
    check(open(os.path.join(state, "invites.json"), "rb").read() == before,
          "a refused invite changed invites.json")
    print("ok   the 65th open invite is refused")


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_up(state):
    p = subprocess.run([SHARDNODE, "status", "--state", state, "--json"], capture_output=True,
                       text=True, timeout=30)
    return p.returncode == 0


def open_invites(state):
    now = time.time()
    try:
        recs = invites(state)
    except (OSError, ValueError, KeyError, Failure):
        return 0  # mid-rename
    return sum(1 for r in recs if r["expires"] > now - 1 and "used_by" not in r)


def test_invite_while_up():
    tmp = tempfile.mkdtemp(prefix="shardnode-init-")
    procs, logs = {}, {}
    stop = threading.Event()
    issued = []

    def start(name, args, cpus=None):
        logs[name] = os.path.join(tmp, name + ".log")
        with open(logs[name], "ab") as out:
            procs[name] = subprocess.Popen([SHARDNODE] + args + ["--threads", "1", "--http", "off"],
                                           stdin=subprocess.DEVNULL, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True,
                                           preexec_fn=(lambda: os.sched_setaffinity(0, cpus))
                                           if cpus else None)

    def tail(name):
        with open(logs[name], errors="replace") as f:
            return "".join(f.readlines()[-10:])

    def wait(name, what, limit):
        end = time.time() + limit
        while not node_up(os.path.join(tmp, name)):
            for n, p in procs.items():
                check(p.poll() is None, f"{n} exited with {p.returncode} while {what}:\n{tail(n)}")
            check(time.time() < end, f"{what}: not within {limit} s:\n{tail(name)}")
            time.sleep(0.2)

    def invite_loop():
        while not stop.is_set():
            # one-second tokens: a node admits at most 64 open invites
            p = subprocess.run([SHARDNODE, "invite", "--state", os.path.join(tmp, "a"), "--ttl", "1s"],
                               capture_output=True, text=True, timeout=60)
            issued.append(p.returncode)
            # fewer than 64 open at once (the cap), however fast the build
            while not stop.is_set() and open_invites(os.path.join(tmp, "a")) >= 40:
                time.sleep(0.05)

    threads = []
    try:
        port = free_udp_port()
        run(["init", "--state", os.path.join(tmp, "a"), "--name", "a", "--listen-port", str(port),
             "--endpoint", f"127.0.0.1:{port}", "--prefix", "127.0.0.0/8"])
        # node.json's devices as `init` wrote them are replaced at `up` by the
        # devices as they are now: a started pinned to one CPU (taskset)
        # counts 1 core, whatever node.json said before; its other keys stay
        path = os.path.join(tmp, "a", "node.json")
        with open(path) as f:
            before = json.load(f)
        before["devices"]["cpu"]["cores"] = 4096
        before["devices"]["gpus"] = [{"device": "cuda:7", "vendor": "nvidia", "name": "gone",
                                      "memory_bytes": 1, "memory_free_bytes": 1, "arch": "sm_90",
                                      "driver": "1.0"}]
        with open(path, "w") as f:
            json.dump(before, f)
        start("a", ["up", "--state", os.path.join(tmp, "a")],
              cpus={sorted(os.sched_getaffinity(0))[0]})
        wait("a", "a starts", 30)
        with open(path) as f:
            after = json.load(f)
        check(after["devices"]["cpu"]["cores"] == 1 and after["devices"]["gpus"] == [],
              f"a up on one CPU: node.json's devices are {after['devices']}")
        check({k: v for k, v in after.items() if k != "devices"} ==
              {k: v for k, v in before.items() if k != "devices"},
              f"up changed node.json beyond its devices: {after}")
        print("ok   up on one CPU writes its devices again: 1 core, no GPU")
        threads = [threading.Thread(target=invite_loop) for _ in range(2)]
        for t in threads:
            t.start()
        for name in ["b", "c", "d", "e", "f"]:
            token = run(["invite", "--state", os.path.join(tmp, "a")]).stdout.split()[-1]
            port = free_udp_port()
            start(name, ["join", token, "--state", os.path.join(tmp, name), "--name", name,
                         "--listen-port", str(port), "--endpoint", f"127.0.0.1:{port}"])
            wait(name, f"{name} joins while invites are issued", 60)
        stop.set()
        for t in threads:
            t.join()
        check(issued and all(rc == 0 for rc in issued),
              f"invites issued meanwhile: exit codes {sorted(set(issued))}")
        check(node_up(os.path.join(tmp, "a")), "a no longer answers status")
        print(f"ok   5 joiners admitted while {len(issued)} other invites were issued")
    finally:
        stop.set()
        for t in threads:
            t.join()
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    global SHARDNODE
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    SHARDNODE = os.path.abspath(a.shardnode)
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    try:
        state, bob = test_init(a.workdir)
        test_reinit(state)
        v6 = test_bad_flags(a.workdir)
        test_invite(state, bob, v6)
        test_invite_cap(a.workdir)
        test_invite_while_up()
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    print("init_test: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
