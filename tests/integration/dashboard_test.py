"""The dashboard every node serves (`up --http ADDR:PORT`): the page in a real
browser, /api/status against `status --json`, /metrics against the
Prometheus text exposition format, the plan as SVG, and bad requests.

    /usr/bin/python3 tests/integration/dashboard_test.py --shardnode build/shardnode \\
        --workdir DIR [--docs DIR] [--keep]

1. A pool of three nodes a, b, c as processes on loopback (the insecure
   mode `shardnode demo` uses without root: mesh prefix 127.0.0.0/8, no
   WireGuard), joined by invites, each with --threads 1 and its dashboard on
   a free loopback port; a small job submitted through a, trained until a
   few steps are done.
2. /api/status is status --json plus "dashboard": the same keys, and the
   fields that do not change between two reads (the mesh, the members'
   names, addresses, keys and endpoints, the job and its committed plan)
   are equal.
3. /metrics passes a strict checker of the exposition format (HELP and TYPE
   before a metric's first sample, names and labels by the grammar,
   Go-parsable float values, no sample twice) and says what the status
   says: 3 members alive, the step, a loss, every stage's predicted time.
4. The page in headless Chromium (--dump-dom after its script ran) shows
   every member, every stage's layer range and the loss of the step it
   shows, equal to that step's loss in the stage's metrics.jsonl; a
   screenshot (PNG) is saved in --workdir (and in --docs with the plan
   SVG when given).
5. `status --svg` and `plan --svg` write well-formed SVG naming every
   stage's layers.
6. Bad requests: POST/PUT/DELETE (405), a 100 KB header, a body, paths
   outside the three routes including traversal (404), garbage bytes, a
   client that sends half a request and stalls: each gets a 4xx or a
   closed connection, the stalled one does not hold up the others, and
   every node still answers and runs afterwards.
7. No private key (wg.key, id.key) appears in any answer.

Exits 77 (skipped) after the other checks when chromium is not installed
(scripts/deps.sh installs it).
"""

import argparse
import functools
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nslib  # noqa: E402
from nslib import SKIP, Failure, check, log  # noqa: E402

NAMES = ["a", "b", "c"]
STEPS = 1000000   # never done: the job is running while the test looks
run = functools.partial(nslib.run, timeout=120)


def free_port(kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http_get(port, path, timeout=10):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
        return r.status, r.headers, r.read()


def raw_request(port, data, timeout=15):
    """Sends bytes, returns the status code of the answer, or None when the
    node closed the connection without one."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        buf = b""
        try:
            while b"\r\n" not in buf:
                c = s.recv(4096)
                if not c:
                    break
                buf += c
        except ConnectionResetError:
            pass
    finally:
        s.close()
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", buf)
    return int(m.group(1)) if m else None


# ---- the Prometheus text exposition format, strictly ----

NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
FLOAT_RE = re.compile(r"^[+-]?(?:Inf|NaN|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)$")


def parse_labels(text, where):
    """The inside of {...}: name="value" pairs, comma separated (a trailing
    comma allowed), values with \\\\, \\" and \\n escapes only."""
    labels, i = {}, 0
    while i < len(text):
        m = re.match(r"[a-zA-Z_][a-zA-Z0-9_]*", text[i:])
        check(m, "%s: a label name expected at %r" % (where, text[i:]))
        name = m.group(0)
        i += len(name)
        check(text[i:i + 2] == '="', "%s: label %s: =\" expected" % (where, name))
        i += 2
        val = ""
        while True:
            check(i < len(text), "%s: label %s: unterminated value" % (where, name))
            ch = text[i]
            if ch == "\\":
                check(i + 1 < len(text) and text[i + 1] in '\\"n',
                      "%s: label %s: bad escape" % (where, name))
                val += {"\\": "\\", '"': '"', "n": "\n"}[text[i + 1]]
                i += 2
            elif ch == '"':
                i += 1
                break
            elif ch == "\n":
                raise Failure("%s: label %s: newline in a value" % (where, name))
            else:
                val += ch
                i += 1
        check(name not in labels, "%s: label %s twice" % (where, name))
        labels[name] = val
        if i < len(text):
            check(text[i] == ",", "%s: ',' expected after label %s" % (where, name))
            i += 1
    return labels


def parse_exposition(text):
    """Returns {metric: {"type", "help", "samples": [(labels, value)]}}."""
    check(text.endswith("\n"), "/metrics: the last line does not end with a newline")
    fams, seen = {}, set()
    for no, line in enumerate(text.split("\n")[:-1], 1):
        where = "/metrics line %d" % no
        check(line.strip() != "" or line == "", "%s: whitespace-only line" % where)
        if line == "":
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 2 and parts[1] in ("HELP", "TYPE"):
                check(len(parts) >= 3 and NAME_RE.match(parts[2]),
                      "%s: %s without a valid metric name" % (where, parts[1]))
                f = fams.setdefault(parts[2], {"type": None, "help": None, "samples": []})
                check(not f["samples"], "%s: %s for %s after its samples" % (where, parts[1], parts[2]))
                if parts[1] == "HELP":
                    check(f["help"] is None, "%s: second HELP for %s" % (where, parts[2]))
                    f["help"] = parts[3] if len(parts) > 3 else ""
                else:
                    check(f["type"] is None, "%s: second TYPE for %s" % (where, parts[2]))
                    check(len(parts) == 4 and parts[3] in TYPES,
                          "%s: TYPE %s: unknown type" % (where, parts[2]))
                    f["type"] = parts[3]
            continue
        m = re.match(r"^([^\s{]+)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?$", line)
        check(m, "%s: not a sample: %r" % (where, line))
        name, ltext, value = m.group(1), m.group(2), m.group(3)
        check(NAME_RE.match(name), "%s: bad metric name %r" % (where, name))
        check(FLOAT_RE.match(value), "%s: %s: value %r is not a float" % (where, name, value))
        f = fams.get(name)
        check(f is not None and f["help"] is not None and f["type"] is not None,
              "%s: %s has no HELP and TYPE before its sample" % (where, name))
        labels = parse_labels(ltext, where) if ltext else {}
        for ln in labels:
            check(LABEL_NAME_RE.match(ln) and not ln.startswith("__"),
                  "%s: bad label name %r" % (where, ln))
        key = (name, tuple(sorted(labels.items())))
        check(key not in seen, "%s: %s%s appears twice" % (where, name, labels))
        seen.add(key)
        if f["type"] == "counter":
            check(name.endswith("_total"), "%s: counter %s does not end in _total" % (where, name))
        f["samples"].append((labels, float(value)))
    # the families of one name stand together: a name's samples are contiguous
    order = [l.split("{")[0].split(" ")[0] for l in text.split("\n") if l and not l.startswith("#")]
    runs = [n for i, n in enumerate(order) if i == 0 or order[i - 1] != n]
    check(len(runs) == len(set(runs)), "/metrics: a metric's samples are not contiguous")
    return fams


# ---- the pool ----

class Pool:
    def __init__(self, sn, workdir, keep):
        self.sn, self.workdir, self.keep = sn, workdir, keep
        self.tmp = tempfile.mkdtemp(prefix="shardnode-dash-")
        self.procs, self.http, self.logs = {}, {}, {}

    def state(self, n):
        return os.path.join(self.tmp, n)

    def start(self, n, args):
        self.http[n] = free_port()
        self.logs[n] = os.path.join(self.tmp, n + ".log")
        out = open(self.logs[n], "ab")
        self.procs[n] = subprocess.Popen(
            [self.sn] + args + ["--threads", "1", "--http", "127.0.0.1:%d" % self.http[n]],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
        out.close()

    def status(self, n):
        p = run([self.sn, "status", "--state", self.state(n), "--json"], ok=False, timeout=20)
        return json.loads(p.stdout) if p.returncode == 0 else None

    def check_running(self):
        for n, p in self.procs.items():
            check(p.poll() is None, "node %s exited with %s:\n%s" % (n, p.returncode, self.tail(n)))

    def tail(self, n, lines=25):
        try:
            with open(self.logs[n], errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def wait(self, what, pred, limit):
        end = time.time() + limit
        while True:
            self.check_running()
            r = pred()
            if r:
                return r
            if time.time() > end:
                raise Failure("%s: not within %d s" % (what, limit))
            time.sleep(0.25)

    def cleanup(self):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if self.workdir:
            for n, path in self.logs.items():
                shutil.copy(path, os.path.join(self.workdir, n + ".log"))
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


def build_pool(t):
    wd = os.path.join(t.tmp, "data")
    os.makedirs(wd)
    corpus = os.path.join(wd, "corpus.txt")
    with open(corpus, "w") as f:
        f.write(subprocess.run(["bible", "Gen1:1-Gen10:32"], stdout=subprocess.PIPE, text=True,
                               check=True).stdout)
    tok = os.path.join(wd, "tokenizer.json")
    run([t.sn, "tokenizer", "train", "--input", corpus, "--vocab-size", "320", "--out", tok])
    config = os.path.join(wd, "config.json")
    with open(config, "w") as f:
        json.dump(dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=64,
                       intermediate_size=172, num_hidden_layers=6, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=320, max_position_embeddings=32,
                       rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False), f)
    job = os.path.join(wd, "job.json")
    with open(job, "w") as f:
        json.dump({"config": config, "tokenizer": tok,
                   "data": {"files": [corpus], "separator": "\n\n", "val_fraction": 0.05},
                   "seq_len": 32, "batch": 8, "micro_batch": 2, "steps": STEPS, "lr": 3e-3,
                   "min_lr": 3e-4, "warmup_steps": 5, "seed": 3, "log_interval": 1000,
                   "val_interval": 5, "val_batches": 1, "checkpoint_interval": 0,
                   "out_dir": os.path.join(wd, "out")}, f)

    ports = [free_port(socket.SOCK_DGRAM) for _ in NAMES]
    run([t.sn, "init", "--state", t.state("a"), "--name", "a", "--listen-port", str(ports[0]),
         "--endpoint", "127.0.0.1:%d" % ports[0], "--prefix", "127.0.0.0/8"])
    t.start("a", ["up", "--state", t.state("a")])
    t.wait("a answers status", lambda: t.status("a"), 20)
    for i, n in enumerate(NAMES[1:], 1):
        out = run([t.sn, "invite", "--state", t.state("a")]).stdout.split()
        t.start(n, ["join", out[-1], "--state", t.state(n), "--name", n, "--listen-port",
                    str(ports[i]), "--endpoint", "127.0.0.1:%d" % ports[i]])

    def all_alive():
        for n in NAMES:
            st = t.status(n)
            if not st or sorted(m["name"] for m in st["members"] if m["state"] == "alive") != NAMES:
                return None
        return True
    t.wait("every node lists a, b, c alive", all_alive, 45)
    log("ok   pool of %s alive on loopback" % ", ".join(NAMES))
    run([t.sn, "train", "--state", t.state("a"), "--job", job])

    def stepping():
        st = t.status("a")
        job = (st or {}).get("job") or {}
        if not job.get("committed"):
            return None
        steps = [((m.get("run") or {}).get("step") or 0) for m in job["members"].values()]
        return st if max(steps) >= 3 else None
    st = t.wait("the job's plan committed and 3 steps trained", stepping, 60)
    log("ok   job %s: plan %s, %d stages, training" % (
        st["job"]["id"], st["job"]["committed"]["h"], len(st["job"]["committed"]["stages"])))
    return st, wd


# ---- the checks ----

STABLE_MEMBER = ("name", "self", "address", "wg_public_key", "endpoint", "endpoints",
                 "gossip_port", "software", "devices")


def check_api_status(t, v):
    """v: the node looked at (one that holds a stage, so it has a series)."""
    port = t.http[v]
    code, hdr, body = http_get(port, "/api/status")
    check(code == 200 and hdr["Content-Type"].startswith("application/json"),
          "/api/status: %d %s" % (code, hdr["Content-Type"]))
    api = json.loads(body)
    st = t.status(v)
    check("dashboard" in api and "dashboard" not in st, "/api/status has no \"dashboard\"")
    dash = api.pop("dashboard")
    check(set(api) == set(st), "/api/status keys %s, status --json keys %s"
          % (sorted(api), sorted(st)))
    for k in ("self", "mesh_id", "prefix", "interface", "gossip_port"):
        check(api[k] == st[k], "/api/status %s = %r, status --json %r" % (k, api[k], st[k]))
    check(len(api["members"]) == len(st["members"]), "members differ in number")
    for x, y in zip(api["members"], st["members"]):
        check(set(x) == set(y), "member %s: keys differ" % x.get("name"))
        for k in STABLE_MEMBER:
            check(x.get(k) == y.get(k), "member %s: %s %r vs %r" % (x["name"], k, x.get(k), y.get(k)))
    for k in ("id", "submitted_by", "out_dir", "job_file", "committed"):
        check(api["job"][k] == st["job"][k], "job.%s differs: %r vs %r" % (k, api["job"][k], st["job"][k]))
    check(set(api["job"]["members"]) == set(st["job"]["members"]), "job members differ")
    se = dash["series"]
    check(len(se["step"]) == len(se["loss"]) == len(se["tokens_per_s"]) and se["step"],
          "the metrics series is empty or ragged: %s" % {k: len(v) for k, v in se.items()})
    check(len(se["step"]) <= 2000, "the series holds more than 2000 points")
    check(se["step"] == sorted(se["step"]), "the series' steps are not in order")
    check(isinstance(dash["plan_svg"], str) and dash["plan_svg"].startswith("<svg"),
          "dashboard.plan_svg is not SVG")
    ET.fromstring(dash["plan_svg"])   # well-formed
    check(any("plan" in e["text"] and "committed" in e["text"] for e in dash["events"]),
          "no event says the plan was committed: %s" % dash["events"])
    log("ok   /api/status = status --json (%d keys) + dashboard (%d points, %d events)"
        % (len(st), len(se["step"]), len(dash["events"])))
    return api, dash


def check_metrics(t, st, v):
    code, hdr, body = http_get(t.http[v], "/metrics")
    check(code == 200 and hdr["Content-Type"].startswith("text/plain; version=0.0.4"),
          "/metrics: %d %s" % (code, hdr["Content-Type"]))
    fams = parse_exposition(body.decode("utf-8"))
    need = ["shardnode_members", "shardnode_step", "shardnode_loss", "shardnode_tokens_per_second",
            "shardnode_stage_seconds", "shardnode_recoveries_total"]
    for n in need:
        check(n in fams and fams[n]["samples"], "/metrics has no %s" % n)
    alive = [v for l, v in fams["shardnode_members"]["samples"] if l == {"state": "alive"}]
    check(alive == [3.0], "shardnode_members{state=\"alive\"} = %s, expected 3" % alive)
    check(fams["shardnode_step"]["samples"][0][1] >= 3, "shardnode_step below 3")
    loss = fams["shardnode_loss"]["samples"][0][1]
    check(0 < loss < 20, "shardnode_loss = %s" % loss)
    stages = st["job"]["committed"]["stages"]
    pred = {(l["stage"], l["member"]): v for l, v in fams["shardnode_stage_seconds"]["samples"]
            if l.get("kind") == "predicted"}
    for i, s in enumerate(stages):
        check(abs(pred.get((str(i), s[0]), -1) - s[4] / 1e9) < 1e-12,
              "shardnode_stage_seconds for stage %d (%s): %s, the plan says %s ns"
              % (i, s[0], pred.get((str(i), s[0])), s[4]))
    check(fams["shardnode_recoveries_total"]["type"] == "counter", "recoveries is not a counter")
    log("ok   /metrics: %d metrics, %d samples, exposition format strict" %
        (len(fams), sum(len(f["samples"]) for f in fams.values())))
    return body.decode()


def browser():
    for b in ("chromium", "chromium-browser"):
        if shutil.which(b):
            return shutil.which(b)
    return None


def chromium(exe, tmp, args, timeout=90):
    prof = tempfile.mkdtemp(prefix="chromium-", dir=tmp)
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage", "--user-data-dir=" + prof] + args
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    shutil.rmtree(prof, ignore_errors=True)
    return p


def metrics_loss(t, st, step):
    """The loss at `step` in any stage member's metrics.jsonl."""
    jid = st["job"]["id"]
    for s in st["job"]["committed"]["stages"]:
        path = os.path.join(t.state(s[0]), "jobs", jid, "metrics.jsonl")
        try:
            with open(path) as f:
                for line in f:
                    if line.strip():
                        m = json.loads(line)
                        if m.get("step") == step:
                            return m["loss"]
        except (OSError, ValueError):
            continue
    return None


def check_page(t, exe, st, workdir, docs, v):
    url = "http://127.0.0.1:%d/" % t.http[v]
    code, hdr, body = http_get(t.http[v], "/")
    check(code == 200 and hdr["Content-Type"].startswith("text/html"), "/: %d" % code)
    page = body.decode()
    check(not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page, re.I),
          "the page refers to an external asset")
    p = chromium(exe, t.tmp, ["--virtual-time-budget=5000", "--dump-dom", url])
    dom = p.stdout.decode("utf-8", "replace")
    check(p.returncode == 0 and "<table" in dom, "chromium --dump-dom exited %d:\n%s"
          % (p.returncode, p.stderr.decode("utf-8", "replace")[-2000:]))
    rows = re.findall(r'<tr class="member">(.*?)</tr>', dom, re.S)
    shown = [re.sub(r"<[^>]*>", "", re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)[0]).split(" ")[0]
             for r in rows]
    check(sorted(shown) == sorted(NAMES), "the page's member rows show %s, expected %s"
          % (shown, NAMES))
    for i, s in enumerate(st["job"]["committed"]["stages"]):
        want = "layers %d..%d" % (s[1], s[2] - 1)
        check(re.search(r">[^<]*" + re.escape(want) + r"[^<]*<", dom),
              "the page does not show stage %d's %s" % (i, want))
    m = re.search(r'<span id="step">(\d+)</span>', dom)
    ml = re.search(r'<span id="loss">([0-9.]+)</span>', dom)
    check(m and ml, "the page shows no step and loss")
    step, shown_loss = int(m.group(1)), ml.group(1)
    want = metrics_loss(t, st, step)
    check(want is not None and "%.4f" % want == shown_loss,
          "the page shows loss %s at step %d; metrics.jsonl says %s" % (shown_loss, step, want))
    check("polyline" in dom, "the page draws no curve")
    log("ok   the page in Chromium shows %s, every stage's layers, step %d loss %s"
        % (", ".join(NAMES), step, shown_loss))
    shot = os.path.join(workdir, "dashboard.png")
    p = chromium(exe, t.tmp, ["--virtual-time-budget=5000", "--hide-scrollbars",
                              "--window-size=1280,900", "--screenshot=" + shot, url])
    check(p.returncode == 0 and os.path.exists(shot), "chromium --screenshot exited %d:\n%s"
          % (p.returncode, p.stderr.decode("utf-8", "replace")[-2000:]))
    with open(shot, "rb") as f:
        png = f.read()
    check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000,
          "%s is not a PNG screenshot (%d bytes)" % (shot, len(png)))
    log("ok   screenshot %s (%d bytes)" % (shot, len(png)))
    if docs:
        shutil.copy(shot, os.path.join(docs, "dashboard.png"))
    return dom


def check_svg(t, st, workdir, docs, v):
    out = os.path.join(workdir, "status-plan.svg")
    run([t.sn, "status", "--state", t.state(v), "--svg", out])
    root = ET.parse(out).getroot()
    check(root.tag == "{http://www.w3.org/2000/svg}svg", "status --svg: the root is %s" % root.tag)
    text = " ".join("".join(e.itertext()) for e in root.iter("{http://www.w3.org/2000/svg}text"))
    for i, s in enumerate(st["job"]["committed"]["stages"]):
        check("layers %d..%d" % (s[1], s[2] - 1) in text and s[0] in text,
              "status --svg does not show stage %d (%s)" % (i, s[0]))
    check("bottleneck" in text, "status --svg marks no bottleneck")
    pout = os.path.join(workdir, "plan.svg")
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    run([t.sn, "plan", "--fleet", os.path.join(repo, "configs", "fleets", "homelab.json"),
         "--model", os.path.join(repo, "configs", "fleets", "models", "llama-3b.json"),
         "--svg", pout])
    root = ET.parse(pout).getroot()
    ptext = " ".join("".join(e.itertext()) for e in root.iter("{http://www.w3.org/2000/svg}text"))
    check(re.search(r"layers \d+\.\.\d+", ptext) and "bottleneck" in ptext,
          "plan --svg shows no stage or no bottleneck")
    if docs:
        shutil.copy(pout, os.path.join(docs, "plan.svg"))
    # what the picture quotes is escaped: a fleet named with markup
    with open(os.path.join(repo, "configs", "fleets", "homelab.json")) as f:
        fleet = json.load(f)
    fleet["name"] = "<home & \"lab\"> '</svg>"
    fleet["devices"] = os.path.join(repo, "configs", "devices.json")
    fpath = os.path.join(t.tmp, "fleet-markup.json")
    with open(fpath, "w") as f:
        json.dump(fleet, f)
    mout = os.path.join(workdir, "plan-markup.svg")
    run([t.sn, "plan", "--fleet", fpath, "--model",
         os.path.join(repo, "configs", "fleets", "models", "llama-3b.json"), "--svg", mout])
    root = ET.parse(mout).getroot()
    title = "".join(next(root.iter("{http://www.w3.org/2000/svg}text")).itertext())
    check(fleet["name"] in title, "plan --svg's title %r does not quote the fleet's name" % title)
    log("ok   status --svg and plan --svg: well-formed SVG with every stage's layers")


def check_bad_requests(t, v):
    port = t.http[v]
    results = {}
    for m in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        results[m] = raw_request(port, ("%s /api/status HTTP/1.1\r\nHost: x\r\nContent-Length: 0"
                                        "\r\n\r\n" % m).encode())
        check(results[m] == 405, "%s answered %s, expected 405" % (m, results[m]))
    big = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n"
    results["100 KB header"] = raw_request(port, big)
    body = b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n" + b"b" * 200000
    results["200 KB body"] = raw_request(port, body)
    for path in ("/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/api/../../etc/passwd",
                 "/metrics/../../../etc/shadow", "//etc/passwd", "/api/status/x", "/wg.key",
                 "/control.sock", "/index.html/../mesh.json"):
        results[path] = raw_request(port, ("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
        check(results[path] == 404, "GET %s answered %s, expected 404" % (path, results[path]))
    results["GET with a body"] = raw_request(port, b"GET / HTTP/1.1\r\nHost: x\r\n"
                                                   b"Content-Length: 5\r\n\r\nhello")
    check(results["GET with a body"] == 400, "GET with a body answered %s, expected 400"
          % results["GET with a body"])
    results["HEAD"] = raw_request(port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    check(results["HEAD"] == 200, "HEAD /metrics answered %s" % results["HEAD"])
    results["garbage"] = raw_request(port, bytes(range(256)) * 8 + b"\r\n\r\n")
    results["bad method"] = raw_request(port, b"FROB / HTTP/1.1\r\nHost: x\r\n\r\n")
    results["bad version"] = raw_request(port, b"GET / HTTP/9.9\r\nHost: x\r\n\r\n")
    for k in ("100 KB header", "200 KB body", "garbage", "bad method", "bad version"):
        v = results[k]
        check(v is None or 400 <= v < 500, "%s answered %s, expected a 4xx or a closed "
              "connection" % (k, v))
    # a client that sends half a request and stalls holds nobody up
    stall = socket.create_connection(("127.0.0.1", port), timeout=5)
    stall.sendall(b"GET /api/status HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    t0 = time.time()
    code, _, _ = http_get(port, "/api/status", timeout=5)
    check(code == 200 and time.time() - t0 < 5, "a stalled client held up /api/status")
    stall.close()
    t.check_running()
    for n in NAMES:
        code, _, body = http_get(t.http[n], "/api/status")
        check(code == 200 and json.loads(body)["self"] == n, "node %s's dashboard" % n)
    log("ok   bad requests: %s; every node still answers"
        % ", ".join("%s %s" % (k, v if v else "closed") for k, v in results.items()))


def check_http_option(t, v):
    """A malformed --http is a usage error; a taken address is a log line and
    the node runs without its dashboard."""
    p = run([t.sn, "up", "--state", t.state("a"), "--http", "localhost:80"], ok=False)
    check(p.returncode == 2 and "--http" in p.stderr and "not an IP address" in p.stderr,
          "up --http localhost:80: exit %d, %s" % (p.returncode, p.stderr))
    port = free_port(socket.SOCK_DGRAM)
    run([t.sn, "init", "--state", t.state("x"), "--name", "x", "--listen-port", str(port),
         "--endpoint", "127.0.0.1:%d" % port, "--prefix", "127.0.0.0/8"])
    held = t.http[v]
    t.logs["x"] = os.path.join(t.tmp, "x.log")
    with open(t.logs["x"], "ab") as out:
        t.procs["x"] = subprocess.Popen([t.sn, "up", "--state", t.state("x"), "--http",
                                         "127.0.0.1:%d" % held], stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
    t.wait("x, whose dashboard port is taken, answers status", lambda: t.status("x"), 20)
    want = "dashboard: cannot listen on 127.0.0.1:%d" % held
    t.wait("x logs that its dashboard cannot listen", lambda: want in t.tail("x", 100), 10)
    os.killpg(t.procs["x"].pid, signal.SIGTERM)
    t.procs["x"].wait(timeout=15)
    del t.procs["x"]
    log("ok   --http: a malformed address is a usage error; a taken port is a log line, the "
        "node runs")


def check_no_secrets(t, outputs):
    for n in NAMES:
        for f in ("wg.key", "id.key"):
            path = os.path.join(t.state(n), f)
            if not os.path.exists(path):
                continue
            with open(path) as fh:
                secret = fh.read().strip()
            check(len(secret) >= 32, "%s is too short to search for" % path)
            for what, text in outputs.items():
                check(secret not in text, "%s's %s appears in %s" % (n, f, what))
    log("ok   no private key in any answer")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--docs", help="also write dashboard.png and plan.svg here")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    sn = os.path.abspath(args.shardnode)
    os.makedirs(args.workdir, exist_ok=True)
    if not shutil.which("bible"):
        log("SKIP dashboard_test: bible (bible-kjv) is not installed (scripts/deps.sh)")
        return SKIP
    t = Pool(sn, args.workdir, args.keep)
    rc = 1
    t0 = time.time()

    def on_signal(signum, frame):
        raise Failure("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        st, wd = build_pool(t)
        # the plan may leave a node out: look at the last stage's node, which
        # has a metrics series; a node without a stage has an empty one
        v = st["job"]["committed"]["stages"][-1][0]
        for n in NAMES:
            if n not in [s[0] for s in st["job"]["committed"]["stages"]]:
                _, _, b = http_get(t.http[n], "/api/status")
                check(json.loads(b)["dashboard"]["series"]["step"] == [],
                      "%s holds no stage but shows a metrics series" % n)
        log("ok   looking at %s's dashboard (the last stage)" % v)
        api, dash = check_api_status(t, v)
        metrics = check_metrics(t, st, v)
        check_svg(t, st, args.workdir, args.docs, v)
        exe = browser()
        dom = ""
        if exe:
            dom = check_page(t, exe, st, args.workdir, args.docs, v)
        check_bad_requests(t, v)
        check_http_option(t, v)
        _, _, page = http_get(t.http[v], "/")
        check_no_secrets(t, {"/api/status": json.dumps(api) + json.dumps(dash),
                             "/metrics": metrics, "/": page.decode(), "the page's DOM": dom})
        t.check_running()
        if exe:
            rc = 0
        else:
            log("SKIP dashboard_test: chromium is not installed (scripts/deps.sh installs it); "
                "every other check passed")
            rc = SKIP
    except Failure as e:
        log("FAIL %s" % e)
        for n in t.procs:
            log("---- %s.log\n%s" % (n, t.tail(n)))
    finally:
        t.cleanup()
    log("dashboard_test: %.1f s" % (time.time() - t0))
    return rc


if __name__ == "__main__":
    sys.exit(main())
