"""What mesh_test.py's checks are built from: the small programs run inside
namespaces (UDP echo and ask, a TCP connect), invite-token surgery, a node's
state directory and daemon (Node), and the checks on `status --json`
(validate_status, view, describe). Imported by tests/integration/*_test.py
that run meshes of real daemons in network namespaces (nslib.py builds the
namespaces)."""

import base64
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nslib import (MTU, PY, WG_PORT, Failure, check, log, sh)  # noqa: E402,F401

PREFIX = "10.77.0.0/16"          # overlay
UNDERLAY = "10.201.0"            # public /24 on the bridge
GOSSIP_PORT = 7946
POLL = 0.25
LOG_TAIL = 30
STATES = ("alive", "suspect", "dead", "left")
LINKS = ("self", "direct", "punched", "relayed", "pending", "unreachable", "none")
B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"



# --------------------------------------------------------------------------
# Small programs run inside namespaces

UDP_ECHO = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.settimeout(float(sys.argv[2]))
print("ready", flush=True)
try:
    while True:
        d, a = s.recvfrom(2048)
        s.sendto(("%s:%d" % a).encode(), a)
except socket.timeout:
    pass
"""

UDP_ASK = r"""
import json, socket, sys
res = {}
for host, port in json.loads(sys.argv[1]):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1.0)
    r = None
    for _ in range(3):
        try:
            s.sendto(b"who am i", (host, port))
            r = s.recvfrom(2048)[0].decode()
            break
        except OSError as e:
            r = "error: %s" % e
            if not isinstance(e, socket.timeout):
                break
    s.close()
    res["%s:%d" % (host, port)] = r
print(json.dumps(res))
"""

TCP_CONNECT = r"""
import json, socket, sys
res = {}
for host, port, timeout in json.loads(sys.argv[1]):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.settimeout(timeout)
    try:
        s.connect((host, port))
        r = "ok"
    except OSError as e:
        r = "%s: %s" % (type(e).__name__, e)
    finally:
        s.close()
    res["%s:%d" % (host, port)] = r
print(json.dumps(res))
"""


# --------------------------------------------------------------------------
# Tokens (docs/PROTOCOL.md, "Invite tokens")


def token_bytes(text):
    check(text.startswith("snj1."), "token %r does not start with snj1." % text[:20])
    body = text[5:]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))


def key_bytes(b):
    """Offsets of the token's random fixed-size fields: mesh id, member keys,
    secret, issuer key, signature. A change there still parses, and only the
    signature can tell (not the version, a length, the expiry or a string)."""
    offs = set(range(1, 17))
    o = 18 + b[17]
    m = b[o]
    o += 1
    for _ in range(m):
        offs.update(range(o, o + 64))
        o += 64
        o += 1 + b[o]
    o += 8
    offs.update(range(o, o + 16 + 32 + 64))
    check(o + 112 == len(b), "token of %d bytes: its layout is not docs/PROTOCOL.md's" % len(b))
    return offs


def alter_token(text):
    """The token with one character near its middle changed to another base64url
    character whose 6 bits fall in a key, the secret or the signature, so that
    the token still parses and only the signature check can refuse it.
    Returns (token, index of the character)."""
    b = token_bytes(text)
    allowed = key_bytes(b)
    body = text[5:]
    n = len(body)
    for d in range(n):
        for i in (n // 2 + d, n // 2 - d):
            if not 0 <= i < n - 1:
                continue
            covered = {(6 * i) // 8, (6 * i + 5) // 8}
            if not covered <= allowed:
                continue
            c = body[i]
            new = B64URL[(B64URL.index(c) + 21) % 64]
            out = "snj1." + body[:i] + new + body[i + 1:]
            check(token_bytes(out) != b, "altering a character changed no byte")
            return out, i + 5
    raise Failure("no character of the token to alter")


# --------------------------------------------------------------------------
# Nodes


class Node:
    def __init__(self, test, name, ns, ip, endpoint):
        self.t = test
        self.name = name
        self.ns = ns
        self.ip = ip                 # underlay address in its own namespace
        self.endpoint = endpoint     # what --endpoint says, None behind NAT
        self.state = os.path.join(test.tmp, "state", name)
        self.proc = None
        self.cmd = None
        self.started = None
        self.running = False         # a daemon is expected to run
        self.logs = []

    def node_json(self):
        with open(os.path.join(self.state, "node.json")) as f:
            return json.load(f)

    @property
    def overlay(self):
        return self.node_json()["overlay_address"]

    def run(self, args, timeout=60, ok=True):
        return self.t.net.exec(self.ns, [self.t.sn] + args, timeout=timeout, ok=ok)

    def start(self, args):
        """Starts `shardnode ARGS` in the node's namespace in the background,
        stdout and stderr to a log file of its own."""
        check(self.proc is None or self.proc.poll() is not None,
              "node %s: a daemon is still running" % self.name)
        path = os.path.join(self.t.tmp, "logs", "%s-%d-%s.log" % (self.name, len(self.logs) + 1,
                                                                  args[0]))
        self.logs.append(path)
        shown = [("snj1.%s..." % a[5:13]) if a.startswith("snj1.") else a for a in args]
        self.cmd = "shardnode " + " ".join(shown)
        with open(path, "w") as f:
            f.write("# ip netns exec %s %s\n" % (self.ns, self.cmd))
            f.flush()
            self.proc = subprocess.Popen(["ip", "netns", "exec", self.ns, self.t.sn] + args,
                                         stdin=subprocess.DEVNULL, stdout=f,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.t.procs.append(self.proc)
        self.started = time.time()
        self.running = True
        return self.proc

    def up(self):
        return self.start(["up", "--state", self.state])

    def join(self, token):
        args = ["join", token, "--state", self.state, "--name", self.name,
                "--listen-port", str(WG_PORT)]
        if self.endpoint:
            args += ["--endpoint", self.endpoint]
        return self.start(args)

    def check_running(self):
        if self.running and self.proc.poll() is not None:
            self.running = False
            raise Failure("node %s: `%s` exited with code %d %.1f s after it started%s"
                          % (self.name, self.cmd, self.proc.returncode,
                             time.time() - self.started, self.t.unknown_hint(self.logs[-1])))

    def tail(self):
        out = []
        for path in self.logs:
            try:
                with open(path, errors="replace") as f:
                    lines = f.read().splitlines()
            except OSError:
                continue
            out.append("---- %s (last %d of %d lines)" % (os.path.basename(path),
                                                           min(LOG_TAIL, len(lines)), len(lines)))
            out.extend(lines[-LOG_TAIL:])
        return "\n".join(out)


class Err:
    """A status that could not be had."""

    def __init__(self, why):
        self.why = why

    def __str__(self):
        return self.why


def validate_status(name, s):
    """The shape of `status --json` (the contract); raises Failure at once."""
    where = "node %s: status --json" % name
    check(isinstance(s, dict), "%s: not a JSON object" % where)
    for k in ("self", "mesh_id", "prefix", "members"):
        check(k in s, "%s: no %r key in %s" % (where, k, sorted(s)))
    check(s["self"] == name, "%s: self is %r" % (where, s["self"]))
    check(isinstance(s["members"], list), "%s: members is not a list" % where)
    selves = 0
    for m in s["members"]:
        for k in ("name", "self", "state", "address", "endpoint", "wg_public_key",
                  "incarnation", "last_heard_s", "link", "devices"):
            check(k in m, "%s: member %s has no %r key" % (where, m.get("name"), k))
        check(m["state"] in STATES, "%s: member %s: state %r is not one of %s"
              % (where, m["name"], m["state"], "|".join(STATES)))
        check(m["link"] in LINKS, "%s: member %s: link %r is not one of %s"
              % (where, m["name"], m["link"], "|".join(LINKS)))
        check(isinstance(m["incarnation"], int) and not isinstance(m["incarnation"], bool),
              "%s: member %s: incarnation %r" % (where, m["name"], m["incarnation"]))
        check(isinstance(m["self"], bool), "%s: member %s: self is not a bool" % (where, m["name"]))
        check(m["endpoint"] is None or isinstance(m["endpoint"], str),
              "%s: member %s: endpoint %r" % (where, m["name"], m["endpoint"]))
        check(m["last_heard_s"] is None or isinstance(m["last_heard_s"], (int, float)),
              "%s: member %s: last_heard_s %r" % (where, m["name"], m["last_heard_s"]))
        check(isinstance(m["devices"], dict), "%s: member %s: devices is not an object"
              % (where, m["name"]))
        if m["self"]:
            selves += 1
            check(m["name"] == name and m["link"] == "self",
                  "%s: the self member is %s with link %s" % (where, m["name"], m["link"]))
    check(selves == 1, "%s: %d members marked self" % (where, selves))
    names = [m["name"] for m in s["members"]]
    check(len(names) == len(set(names)), "%s: a member listed twice: %s" % (where, names))


def view(s):
    return {m["name"]: m for m in s["members"]}


def describe(views):
    """One line per observer: what it lists."""
    out = []
    for name, s in views.items():
        if isinstance(s, Err):
            out.append("  %s: %s" % (name, s))
        else:
            out.append("  %s sees: %s" % (name, ", ".join(
                "%s %s/%s" % (m["name"], m["state"], m["link"]) for m in s["members"])))
    return "\n".join(out)
