#!/usr/bin/python3
"""plan_bench.py — the planner on the example fleets of configs/fleets.

For every example fleet it runs `shardnode plan --json` R times and prints
the plan's predicted throughput beside the uniform splits (the
Megatron/DeepSpeed default), the ratio, the cost model's distance from the
1F1B simulator, and the median planning time (64 and 256 nodes x 80 layers
are the two long-tail fleets). Then it measures the heuristic's gap to the
exhaustive search on random 9-node fleets, where the heuristic is what
`shardnode plan` runs (exact search stops at 8 nodes). Standard library
only. Not part of the pass/fail suite: nothing here is compared with a
threshold.

    /usr/bin/python3 bench/plan_bench.py [--shardnode build/shardnode] [--rounds 5]
        [--random 20] [--write-fleets]

--write-fleets regenerates configs/fleets/longtail-{64,256}.json (fixed
seeds: the same files every time) and exits.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLEETS = os.path.join(ROOT, "configs", "fleets")

# fleet, model, sequence length, sequences per step: the figures the docs and
# tests/unit/test_fleet.c use (enough micro-batches for the stages each plan
# uses, so that 1F1B's pipeline fill stays small).
EXAMPLES = [
    ("homelab.json", "llama-3b.json", 512, 64),
    ("homelab.json", "llama-3b.json", 1024, 64),
    ("internet.json", "llama-3b.json", 1024, 64),
    ("datacenter.json", "llama-13b.json", 1024, 64),
    ("longtail-64.json", "llama-80l.json", 1024, 512),
    ("longtail-256.json", "llama-80l.json", 1024, 512),
]


def plan(shardnode, fleet, model, seq, batch, extra=()):
    cmd = [shardnode, "plan", "--fleet", fleet, "--model", model, "--seq", str(seq),
           "--batch", str(batch), "--json", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), out.stderr.strip()))
    return json.loads(out.stdout)


def ratio(base, p):
    if "error" in base:
        return "does not fit"
    return "%.2fx" % (base["step_ns"] / p["step_ns"])


def examples(shardnode, rounds):
    print("fleet              model           seq batch stages tokens/s  vs uniform: all   "
          "plan's nodes  best count  model-sim  plan ms")
    for fleet, model, seq, batch in EXAMPLES:
        times, last = [], None
        for _ in range(rounds):
            last = plan(shardnode, os.path.join(FLEETS, fleet), os.path.join(FLEETS, "models", model),
                        seq, batch)
            times.append(last["plan"]["planning_ms"])
        p = last["plan"]
        sim = p.get("simulated", {}).get("model_vs_simulated", float("nan"))
        print("%-18s %-15s %4d %5d %6d %8.0f %17s %13s %11s %+9.2f%% %8.1f" % (
            fleet[:-5], model[:-5], seq, batch, len(p["stages"]), p["tokens_per_s"],
            ratio(last["uniform_all_nodes"], p), ratio(last["uniform_plan_nodes"], p),
            ratio(last["uniform_best_count"], p), 100 * sim, statistics.median(times)))
        for key in ("uniform_all_nodes", "uniform_plan_nodes", "uniform_best_count"):
            if "error" in last[key] and os.environ.get("PLAN_BENCH_VERBOSE"):
                print("    %s: %s" % (key, last[key]["error"]))


def random_fleet(rnd, n, devices):
    names = sorted(devices)
    nodes, sites = [], {}
    for i in range(n):
        site = "site-%d" % rnd.randrange(max(1, n // 2))
        sites.setdefault(site, {"latency_ms": rnd.choice([0.05, 0.2, 1]),
                                "bandwidth_gbps": rnd.choice([1, 10, 25]),
                                "wan": {"latency_ms": rnd.choice([1, 5, 15, 30]),
                                        "bandwidth_mbps": rnd.choice([100, 500, 1000, 10000])}})
        nodes.append({"name": "n%02d" % i, "device": rnd.choice(names), "site": site})
    return {"name": "random", "devices": os.path.join(ROOT, "configs", "devices.json"),
            "nodes": nodes, "sites": sites}


def heuristic_gap(shardnode, count):
    with open(os.path.join(ROOT, "configs", "devices.json")) as f:
        devices = json.load(f)["devices"]
    rnd = random.Random(9)
    gaps, ex_ms, h_ms = [], [], []
    model = os.path.join(FLEETS, "models", "llama-13b.json")
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(count):
            path = os.path.join(tmp, "fleet-%d.json" % k)
            with open(path, "w") as f:
                json.dump(random_fleet(rnd, 9, devices), f)
            try:
                out = plan(shardnode, path, model, 1024, 64, ["--exhaustive"])
            except RuntimeError:
                continue   # this random fleet cannot hold the model
            if "gap" not in out.get("exhaustive", {}):
                continue
            gaps.append(out["exhaustive"]["gap"])
            ex_ms.append(out["exhaustive"]["time_ms"])
            h_ms.append(out["plan"]["planning_ms"])
    if not gaps:
        print("\nheuristic vs exhaustive: no random fleet could hold the model")
        return
    exact = sum(1 for g in gaps if g == 0)
    print("\nheuristic vs exhaustive search, %d random 9-node fleets (13B model, 64 x 1024):" % len(gaps))
    print("  same step time on %d; gap mean %.3f%%, max %.3f%%; heuristic %.1f ms, exhaustive %.0f ms (medians)"
          % (exact, 100 * statistics.mean(gaps), 100 * max(gaps), statistics.median(h_ms),
             statistics.median(ex_ms)))


def write_fleets():
    """The long-tail fleets: homes with one to four cards behind their own
    uplink. Deterministic (fixed seeds)."""
    kinds = [("RTX 3060", 14), ("RTX 3090", 18), ("RTX 4090", 14), ("RTX 5090", 4),
             ("RX 7900 XTX", 8), ("T4", 8), ("V100", 8), ("V100-32GB", 6), ("M40", 6),
             ("MI100", 4), ("A100-40GB", 3), ("A100", 2), ("CPU", 5)]
    pool = [k for k, w in kinds for _ in range(w)]
    for n, seed in ((64, 64), (256, 256)):
        rnd = random.Random(seed)
        nodes, sites, i, s = [], {}, 0, 0
        while i < n:
            s += 1
            site = "home-%03d" % s
            size = min(n - i, rnd.choice([1, 1, 1, 2, 2, 3, 4]))
            up = rnd.choice([50, 100, 100, 250, 500, 1000, 1000])
            lat = rnd.choice([5, 8, 12, 20, 30, 45, 60])
            lan = rnd.choice([1, 1, 2.5, 10])
            sites[site] = {"latency_ms": 0.2, "bandwidth_gbps": lan,
                           "wan": {"latency_ms": lat / 2, "bandwidth_mbps": up}}
            for k in range(size):
                dev = rnd.choice(pool)
                node = {"name": "%s-%d" % (site, k + 1), "device": dev, "site": site}
                if dev == "CPU":
                    node["memory_gib"] = rnd.choice([32, 64, 128])
                nodes.append(node)
                i += 1
        doc = {"name": "long-tail-%d" % n,
               "notes": "A long tail of %d volunteer nodes in %d homes: consumer, old datacenter "
                        "and CPU nodes; inside a home the LAN, between homes latencies add and the "
                        "slower uplink limits. Generated by bench/plan_bench.py --write-fleets "
                        "(seed %d); plan with models/llama-80l.json." % (n, s, seed),
               "devices": "../devices.json", "nodes": nodes, "sites": sites}
        with open(os.path.join(FLEETS, "longtail-%d.json" % n), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardnode", default=os.path.join(ROOT, "build", "shardnode"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--random", type=int, default=20, help="random 9-node fleets (0: none)")
    ap.add_argument("--write-fleets", action="store_true")
    a = ap.parse_args()
    if a.write_fleets:
        write_fleets()
        return 0
    examples(a.shardnode, a.rounds)
    if a.random:
        heuristic_gap(a.shardnode, a.random)
    return 0


if __name__ == "__main__":
    sys.exit(main())
