"""What the integration tests share (standard library only; each test script
puts this folder on sys.path and imports it):

- failing, skipping and running: Failure, Skip (exit 77, ctest's skip),
  Terminated (SIGTERM, SIGHUP), check, log, sh, run, and run_test, which runs
  a test's body, reports a failure, always cleans up and gives the exit code;
- network namespaces (mesh_test, adversary_test, pool_test,
  adversary_pool_test): Net, a bridge in a hub namespace with boxes and NAT
  routers on it, preconditions (root, /dev/net/tun, wireguard-go, ...),
  NOBODY (a command prefix that drops to the unprivileged user nobody);
- a pool of shardnode nodes in namespaces training a job (pool_test,
  adversary_pool_test): Pool, the job's files (pool_job_files), the pool grown
  by chained invites (grow_pool), the losses and the gathered model against
  the single process;
- files: metrics, write_json, corpus_and_tokenizer, max_rel_diff; and
  free_ports (pipeline_test; bench/benchlib.py takes it from here too).
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "reference")   # llama_ref (torch), loaded when needed
SKIP = 77
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
MTU = 1400                       # the veths' MTU (Net)
WG_PORT = 51820
PASSAGE = "Gen1:1-Gen20:18"      # the corpus of pool_test and pipeline_test (`bible`)
# Prefix a command run in a namespace with this to run it as nobody.
NOBODY = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]


class Failure(Exception):
    pass


class Skip(Exception):
    pass


class Terminated(BaseException):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def log(msg):
    try:
        print(msg, flush=True)
    except OSError:   # a closed pipe must not stop the cleanup
        pass


def sh(cmd, timeout=30, ok=True, **kw):
    """Runs cmd (a list), returns the CompletedProcess; ok: a non-zero exit fails."""
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        raise Failure("%s: still running after %d s" % (" ".join(cmd), timeout))
    if ok and p.returncode != 0:
        raise Failure("%s: exit %d: %s%s" % (" ".join(cmd), p.returncode, p.stdout,
                                              p.stderr.strip()))
    return p


def run(cmd, timeout=600, ok=True, **kw):
    """Runs cmd (a list) with its output captured as text; ok: a non-zero exit fails."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, **kw)
    if ok and p.returncode != 0:
        raise Failure("%s exited %d:\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p


def requirements(name, sn, tools=(), modules=()):
    """0 when the test can run here: root, namespaces, wireguard-go and the
    like (preconditions), and the further tools and python modules named;
    SKIP (logged) when one is missing; 1 (logged) when sn is no executable."""
    try:
        preconditions(sn)
        for tool in tools:
            if not shutil.which(tool):
                raise Skip("%s is not installed" % tool)
        for module in modules:
            try:
                __import__(module)
            except ImportError:
                raise Skip("python3 has no %s module" % module)
    except Skip as e:
        log("SKIP %s: %s" % (name, e))
        return SKIP
    except Failure as e:
        log("FAIL %s" % e)
        return 1
    return 0


def run_test(name, body, report, cleanup, t_start, summary=None, cleaned=None):
    """Runs body() with SIGTERM and SIGHUP raising Terminated. A failure (a
    Failure, an interruption, or the script itself breaking) is logged and
    report() shows what helps; then, with those signals ignored, cleanup()
    always runs and returns a list of problems (each fails the test);
    summary() follows it; cleaned(seconds) is logged when nothing was left.
    Returns the exit code (0 or 1) after a last line with the verdict."""
    def on_signal(signum, frame):
        raise Terminated("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    rc = 1
    try:
        body()
        rc = 0
    except Failure as e:
        log("FAIL %s" % e)
        report()
    except (Terminated, KeyboardInterrupt) as e:
        log("FAIL interrupted (%s)" % (e or "SIGINT"))
        report()
    except Exception:
        import traceback
        traceback.print_exc()
        log("FAIL the test script itself broke (above)")
        report()
    finally:
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        t0 = time.time()
        problems = cleanup()
        if summary:
            summary()
        for p in problems:
            log("FAIL cleanup: %s" % p)
            rc = 1
        if not problems and cleaned:
            log(cleaned(time.time() - t0))
    log("%s: %s (%.1f s)" % (name, "all checks passed" if rc == 0 else "FAILED",
                             time.time() - t_start))
    return rc


def free_ports(n):
    """n distinct free TCP ports on loopback (bound at once, then released)."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def metrics(path):
    """A metrics.jsonl file: one dict per line."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
    return path


def corpus_and_tokenizer(sn, wd, passage=PASSAGE):
    """wd/corpus.txt (`bible PASSAGE`) and wd/tokenizer.json, 512 tokens
    learned from it by `shardnode tokenizer train`."""
    corpus = os.path.join(wd, "corpus.txt")
    with open(corpus, "w") as f:
        f.write(subprocess.run(["bible", passage], stdout=subprocess.PIPE, text=True,
                               check=True).stdout)
    tok = os.path.join(wd, "tokenizer.json")
    run([sn, "tokenizer", "train", "--input", corpus, "--vocab-size", "512", "--out", tok])
    return corpus, tok


def max_rel_diff(path, ref_path, what):
    """The largest difference between two .safetensors files' tensors, relative
    to each reference tensor's largest magnitude; what names the first file's
    tensors when the two do not hold the same names."""
    if REFERENCE not in sys.path:
        sys.path.insert(0, REFERENCE)
    import llama_ref as ref
    a = ref.read_safetensors(path)
    b = ref.read_safetensors(ref_path)
    check(sorted(a) == sorted(b), "%s tensors differ: %s" % (what, sorted(set(a) ^ set(b))))
    wdiff = 0.0
    for k in b:
        scale = max(float(abs(b[k]).max()), 1e-30)
        wdiff = max(wdiff, float(abs(a[k] - b[k]).max()) / scale)
    return wdiff


# --------------------------------------------------------------------------
# Namespaces, the bridge, routers


class Net:
    """Network namespaces named PREFIX + short name, a bridge in a hub namespace."""

    def __init__(self, tag):
        self.prefix = tag
        self.names = []        # full namespace names, in creation order
        self.inodes = set()    # their nsfs inodes, to find processes inside later
        self.ifaces = {}       # ns -> interface names seen (wireguard-go's among them)

    def full(self, short):
        return self.prefix + short

    def add(self, short):
        ns = self.full(short)
        sh(["ip", "netns", "add", ns])
        self.names.append(ns)
        self.inodes.add(os.stat("/run/netns/" + ns).st_ino)
        sh(["ip", "-n", ns, "link", "set", "lo", "up"])
        return ns

    def exec(self, ns, cmd, **kw):
        return sh(["ip", "netns", "exec", ns] + cmd, **kw)

    def ip(self, ns, *args):
        return sh(["ip", "-n", ns] + list(args))

    def build(self, public, routers):
        """public: {short: ip}; routers: {short: (wan_ip, lan_net, nat_short, symmetric)}."""
        self.hub = self.add("hub")
        self.ip(self.hub, "link", "add", "br0", "type", "bridge")
        self.ip(self.hub, "link", "set", "br0", "up")
        for short, addr in public.items():
            ns = self.add(short)
            self.wire(ns, "eth0", "p-" + short)
            self.ip(ns, "addr", "add", addr + "/24", "dev", "eth0")
        for short, (wan, lan, nat, symmetric) in routers.items():
            r = self.add(short)
            n = self.add(nat)
            self.wire(r, "wan0", "p-" + short)
            self.ip(r, "addr", "add", wan + "/24", "dev", "wan0")
            self.ip(r, "link", "add", "lan0", "mtu", str(MTU), "type", "veth", "peer", "name",
                    "eth0", "mtu", str(MTU), "netns", n)
            self.ip(r, "addr", "add", lan + ".1/24", "dev", "lan0")
            self.ip(r, "link", "set", "lan0", "up")
            self.ip(n, "addr", "add", lan + ".2/24", "dev", "eth0")
            self.ip(n, "link", "set", "eth0", "up")
            self.ip(n, "route", "add", "default", "via", lan + ".1")
            self.exec(r, ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
            rule = ["iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "wan0", "-j", "MASQUERADE"]
            self.exec(r, rule + (["--random-fully"] if symmetric else []))
            # As home routers do (OpenWrt's wan zone, most others): unsolicited
            # UDP to the router's own WAN address is dropped. Dropped in
            # filter INPUT, its conntrack entry is never confirmed, so it
            # cannot take the port a member's later outbound packet needs
            # (which is what makes simultaneous hole punching work).
            self.exec(r, ["iptables", "-A", "INPUT", "-i", "wan0", "-p", "udp", "-m", "conntrack",
                          "--ctstate", "NEW", "-j", "DROP"])

    def wire(self, ns, name, hub_name):
        """A veth from the hub's bridge into ns, both ends MTU 1400, up."""
        self.ip(self.hub, "link", "add", hub_name, "mtu", str(MTU), "type", "veth", "peer",
                "name", name, "mtu", str(MTU), "netns", ns)
        self.ip(self.hub, "link", "set", hub_name, "master", "br0", "up")
        self.ip(ns, "link", "set", name, "up")

    def pids(self, ns):
        p = sh(["ip", "netns", "pids", ns], ok=False)
        return [int(x) for x in p.stdout.split()] if p.returncode == 0 else []

    def note_ifaces(self, ns):
        p = sh(["ip", "-n", ns, "-o", "link", "show"], ok=False)
        names = self.ifaces.setdefault(ns, set())
        for line in p.stdout.splitlines():
            m = re.match(r"\d+: ([^:@]+)", line)
            if m and m.group(1) not in ("lo", "eth0", "wan0", "lan0", "br0"):
                names.add(m.group(1))

    def kill_all(self, ns, sig, wait=5.0):
        """Sends sig to every process in ns until none is left or wait runs out;
        returns the pids still there."""
        end = time.time() + wait
        while True:
            left = self.pids(ns)
            if not left or time.time() > end:
                return left
            for pid in left:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def destroy(self, names=None):
        """Stops every process in the namespaces (SIGTERM, then SIGKILL), deletes
        them; returns a list of problems."""
        names = list(self.names if names is None else names)
        problems = []
        for ns in names:
            self.note_ifaces(ns)
        for ns in names:
            for pid in self.pids(ns):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        end = time.time() + 5
        while time.time() < end and any(self.pids(ns) for ns in names):
            time.sleep(0.1)
        for ns in names:
            left = self.kill_all(ns, signal.SIGKILL)
            if left:
                problems.append("namespace %s: processes %s survive SIGKILL" % (ns, left))
        for ns in reversed(names):
            p = sh(["ip", "netns", "del", ns], ok=False)
            if p.returncode != 0:
                problems.append("ip netns del %s: %s" % (ns, p.stderr.strip()))
            elif ns in self.names:
                self.names.remove(ns)
        # wireguard-go killed with SIGKILL leaves its UAPI socket behind.
        for ns, ifs in self.ifaces.items():
            for name in ifs:
                path = "/var/run/wireguard/%s.sock" % name
                if os.path.exists(path) and not unix_socket_live(path):
                    try:
                        os.unlink(path)
                    except OSError:
                        pass
        return problems

    def leftovers(self):
        """Our namespaces still listed, and processes still inside our namespaces."""
        listed = [ln.split()[0] for ln in sh(["ip", "netns", "list"]).stdout.splitlines()
                  if ln.strip()]
        mine = [n for n in listed if n.startswith(self.prefix)]
        procs = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                link = os.readlink("/proc/%s/ns/net" % d)
            except OSError:
                continue
            m = re.match(r"net:\[(\d+)\]", link)
            if m and int(m.group(1)) in self.inodes:
                procs.append(int(d))
        return mine, procs


def unix_socket_live(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()



def preconditions(sn):
    if os.geteuid() != 0:
        raise Skip("needs root (network namespaces, wireguard-go)")
    if not os.path.exists("/dev/net/tun"):
        raise Skip("no /dev/net/tun")
    for tool in ("wireguard-go", "ip", "ss", "iptables"):
        if not shutil.which(tool):
            raise Skip("%s is not installed" % tool)
    if not os.access(sn, os.X_OK):
        raise Failure("%s is not an executable" % sn)
    probe = "snm%d-probe" % os.getpid()
    p = sh(["ip", "netns", "add", probe], ok=False)
    if p.returncode != 0:
        raise Skip("cannot create network namespaces: %s" % p.stderr.strip())
    sh(["ip", "netns", "del", probe], ok=False)


# --------------------------------------------------------------------------
# A pool of nodes in namespaces training a job (pool_test, adversary_pool_test)


class Pool:
    """Nodes in namespaces named TAG + name, their state directories and logs
    in a temporary directory (removed by cleanup unless keep)."""

    def __init__(self, sn, keep, tag):
        self.sn = sn
        self.keep = keep
        self.tmp = tempfile.mkdtemp(prefix="shardnode-pool-")
        self.net = Net(tag)
        self.procs = {}
        self.logs = {}

    def state(self, n):
        return os.path.join(self.tmp, "state", n)

    def sn_in(self, n, args, timeout=120, ok=True):
        p = subprocess.run(["ip", "netns", "exec", self.net.full(n), self.sn] + args,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout)
        if ok and p.returncode != 0:
            raise Failure("node %s: shardnode %s exited %d:\n%s%s"
                          % (n, " ".join(args[:3]), p.returncode, p.stdout, p.stderr))
        return p

    def start(self, n, args, prefix=(), env=None):
        """shardnode ARGS as node n's daemon in its namespace, behind the
        command prefix given (faketime, say), its output to n's log."""
        path = os.path.join(self.tmp, "%s.log" % n)
        self.logs[n] = path
        f = open(path, "a")
        self.procs[n] = subprocess.Popen(
            ["ip", "netns", "exec", self.net.full(n)] + list(prefix) + [self.sn] + args,
            stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
            start_new_session=True, env=env)

    def status(self, n):
        p = self.sn_in(n, ["status", "--state", self.state(n), "--json"], ok=False, timeout=20)
        if p.returncode != 0:
            return None
        return json.loads(p.stdout)

    def wait(self, what, cond, timeout):
        end = time.time() + timeout
        while time.time() < end:
            for n, p in self.procs.items():
                if p.poll() is not None:
                    raise Failure("node %s exited %d while waiting for %s:\n%s"
                                  % (n, p.returncode, what, self.tail(n)))
            r = cond()
            if r:
                return r
            time.sleep(0.5)
        raise Failure("timed out after %d s waiting for %s" % (timeout, what))

    def tail(self, n, lines=40, keep=None):
        """The last lines of n's logs; keep(line): which lines count (all)."""
        out = []
        for path in (self.logs.get(n), os.path.join(self.state(n), "node.log")):
            try:
                with open(path, errors="replace") as f:
                    kept = [x for x in f if keep is None or keep(x)]
                out.append("---- %s\n%s" % (path, "".join(kept[-lines:])))
            except (OSError, TypeError):
                pass
        return "\n".join(out)

    def report(self, lines=40, keep=None):
        for n in self.procs:
            log(self.tail(n, lines, keep))

    def cleanup(self):
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                pass
        end = time.time() + 10
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, end - time.time()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
        problems = self.net.destroy()
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return problems

    def grow(self, ip, prefix, opts, wait_s):
        """`init` on the first node of opts (name -> extra arguments of its
        daemon, in order) and `up` there; then each next node joins through
        an invite from the one before it, once that one answers status."""
        os.makedirs(os.path.join(self.tmp, "state"))
        names = list(opts)
        first = names[0]
        self.sn_in(first, ["init", "--state", self.state(first), "--name", first,
                           "--listen-port", str(WG_PORT), "--endpoint",
                           "%s:%d" % (ip[first], WG_PORT), "--prefix", prefix])
        self.start(first, ["up", "--state", self.state(first)] + opts[first])
        prev = first
        for n in names[1:]:
            self.wait("the node on %s" % prev, lambda: self.status(prev) is not None, wait_s)
            token = self.sn_in(prev, ["invite", "--state", self.state(prev)]).stdout.strip()
            self.start(n, ["join", token.split()[-1], "--state", self.state(n), "--name", n,
                           "--listen-port", str(WG_PORT), "--endpoint",
                           "%s:%d" % (ip[n], WG_PORT)] + opts[n])
            prev = n

    def all_alive(self, names, count):
        """Every node named lists count members alive."""
        for n in names:
            s = self.status(n)
            if not s or sum(1 for m in s["members"] if m["state"] == "alive") != count:
                return False
        return True

    def check_losses(self, stages, jid, want_path, steps, rtol):
        """Every stage's loss at every step of job jid against the single
        process's metrics (want_path) to rtol; returns the worst relative
        difference."""
        want = metrics(want_path)
        worst = 0.0
        for st in stages:
            got = metrics(os.path.join(self.state(st[0]), "jobs", jid, "metrics.jsonl"))
            check(len(got) == steps, "stage %s wrote %d metrics lines" % (st[0], len(got)))
            for x, y in zip(got, want):
                rel = abs(x["loss"] - y["loss"]) / abs(y["loss"])
                worst = max(worst, rel)
                check(rel <= rtol, "step %d: loss %.9g on %s, single process %.9g"
                      % (y["step"], x["loss"], st[0], y["loss"]))
        return worst


def check_gathered(out_dir, single_dir, tol):
    """The model gathered into out_dir against the single process's, to tol
    (max relative difference); returns that difference."""
    wdiff = max_rel_diff(os.path.join(out_dir, "model.safetensors"),
                         os.path.join(single_dir, "model.safetensors"), "gathered")
    check(wdiff <= tol, "gathered model differs by %.2e (max rel) from one process" % wdiff)
    return wdiff


def pool_job_files(t, steps):
    """t.tmp/data: the corpus, the tokenizer, pool_test's model (hidden 256, 8
    layers) and job(name, out, **over), which writes a job of `steps` steps
    (with the keys in over changed) and returns its path."""
    wd = os.path.join(t.tmp, "data")
    os.makedirs(wd)
    corpus, tok = corpus_and_tokenizer(t.sn, wd)
    config = write_json(os.path.join(wd, "config.json"), dict(
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=256,
        intermediate_size=688, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4,
        vocab_size=512, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=False))

    def job(name, out, **over):
        j = {"config": config, "tokenizer": tok,
             "data": {"files": [corpus], "separator": "\n\n", "val_fraction": 0.05},
             "seq_len": 64, "batch": 16, "micro_batch": 4, "steps": steps, "lr": 3e-3,
             "min_lr": 3e-4, "warmup_steps": 5, "seed": 3, "log_interval": 1000,
             "val_interval": 0, "checkpoint_interval": 0, "out_dir": out}
        j.update(over)
        return write_json(os.path.join(wd, name + ".json"), j)
    return wd, corpus, tok, config, job
