"""Golden test of shardnode's loss and every parameter gradient against
PyTorch autograd in float64 (tests/reference/llama_ref.py).

    /usr/bin/python3 tests/reference/gradcheck_ref.py --shardnode build/shardnode \
        --workdir /tmp/gradcheck [--config CONFIG.json] [--seed S] [--quick]
        [--device cpu|cuda:N|hip:N]

Without --config it runs a fixed set of small, awkward configurations
(grouped-query and multi-head attention, odd vocabularies, intermediate sizes
that are not multiples of the hidden size, tied and untied heads, 1 to 4
layers, T = 1, non-default rope_theta and rms_norm_eps), each whole and cut
into pipeline stages with --split (including a cut at 0: an embedding-only
first stage, and a cut at num_hidden_layers: a head-only last stage).
With --config it checks the given config.json with random weights and a
random batch, whole and split, and prints a table of every tensor.

For each run it writes config.json, W.safetensors (F32) and B.safetensors
(I32 input_ids and labels, [B, T]), runs

    shardnode gradcheck --config C.json --weights W.safetensors \
        --batch B.safetensors --out G.safetensors [--split L1,L2,...]

and asserts on G.safetensors: loss relative error <= 1e-5; for every
parameter max|g - g_ref| / max|g_ref| <= 1e-4; the gradient names are exactly
the parameter names (no lm_head.weight with tied embeddings), F32, HF shapes.
Exits non-zero on any failure, naming the configuration and the tensor.
--device runs every gradcheck on that device (the same tolerances: the GPU
backends compute in fp32); a device that `shardnode devices --json` does
not list as usable skips the test (exit 77) with its reason.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref  # noqa: E402

LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4
# A reference gradient that is exactly zero (q/k projections when T = 1: a
# softmax over one key has no gradient) is compared against this fraction of
# the largest reference gradient of the model instead.
ZERO_REF_FLOOR = 1e-6
PROCESS_TIMEOUT_S = 300
DEVICE = "cpu"

# Fixed configurations. std: matrices; larger values make attention far from
# uniform so the q/k gradients carry weight. splits: None = one stage.
CONFIGS = [
    dict(name="gqa6x2-untied",
         cfg=dict(hidden_size=48, intermediate_size=136, num_hidden_layers=2,
                  num_attention_heads=6, num_key_value_heads=2, vocab_size=97,
                  rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                  max_position_embeddings=64),
         std=0.2, embed_std=None, B=2, T=17, splits=[None, "1"]),
    dict(name="gqa4x1-tied-4layers",
         cfg=dict(hidden_size=64, intermediate_size=176, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=1, vocab_size=131,
                  rms_norm_eps=3e-6, rope_theta=10000.0, tie_word_embeddings=True,
                  max_position_embeddings=64),
         std=0.15, embed_std=None, B=3, T=9, splits=[None, "1,3", "2", "0,4"]),
    dict(name="mha4-untied-T1",
         cfg=dict(hidden_size=48, intermediate_size=100, num_hidden_layers=1,
                  num_attention_heads=4, num_key_value_heads=4, vocab_size=131,
                  rms_norm_eps=1e-6, rope_theta=1000.0, tie_word_embeddings=False,
                  max_position_embeddings=32),
         std=0.02, embed_std=None, B=3, T=1, splits=[None, "0", "1"]),
    dict(name="gqa3x1-tied-3layers",
         cfg=dict(hidden_size=36, intermediate_size=92, num_hidden_layers=3,
                  num_attention_heads=3, num_key_value_heads=1, vocab_size=97,
                  rms_norm_eps=1e-5, rope_theta=250000.0, tie_word_embeddings=True,
                  max_position_embeddings=64),
         std=0.3, embed_std=0.5, B=1, T=13, splits=[None, "0", "3", "1,2"]),
]


def run_shardnode(shardnode, cfg_path, w_path, b_path, g_path, split):
    """Runs shardnode gradcheck; returns (ok, message)."""
    cmd = [shardnode, "gradcheck", "--config", cfg_path, "--weights", w_path,
           "--batch", b_path, "--out", g_path]
    if split is not None:
        cmd += ["--split", split]
    if DEVICE != "cpu":
        cmd += ["--device", DEVICE]
    if os.path.exists(g_path):
        os.remove(g_path)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, "timed out after %d s: %s" % (PROCESS_TIMEOUT_S, " ".join(cmd))
    except OSError as e:
        return False, "cannot run %s: %s" % (shardnode, e)
    if p.returncode != 0:
        return False, "exit status %d: %s\n--- stderr ---\n%s" % (
            p.returncode, " ".join(cmd), p.stderr.decode(errors="replace").rstrip())
    if not os.path.exists(g_path):
        return False, "exit status 0 but no %s was written: %s" % (g_path, " ".join(cmd))
    return True, ""


def compare(g_path, cfg, loss_ref, grads_ref):
    """Checks G.safetensors against the reference.
    Returns (rows, loss, loss_rel, failures): rows are
    (name, shape, max_abs_err, rel_err) per parameter."""
    failures = []
    with open(g_path, "rb") as f:
        header, _ = ref.parse_safetensors(f.read())
    header.pop("__metadata__", None)
    got = ref.read_safetensors(g_path)

    loss = None
    loss_rel = float("inf")
    if "loss" not in got:
        failures.append("no tensor 'loss' in %s" % g_path)
    elif header["loss"]["dtype"] != "F32" or list(got["loss"].shape) != [1]:
        failures.append("tensor 'loss' is %s %s, expected F32 [1]"
                        % (header["loss"]["dtype"], list(got["loss"].shape)))
    else:
        loss = float(got["loss"][0])
        loss_rel = abs(loss - loss_ref) / abs(loss_ref)
        if not loss_rel <= LOSS_RTOL:
            failures.append("loss %.9g, reference %.9g: relative error %.3g > %g"
                            % (loss, loss_ref, loss_rel, LOSS_RTOL))

    expected = set(grads_ref)
    names = set(got) - {"loss"}
    for name in sorted(names - expected):
        failures.append("unexpected gradient tensor %s" % name)
    for name in sorted(expected - names):
        failures.append("missing gradient of %s" % name)

    global_max = max(float(np.abs(g).max()) for g in grads_ref.values())
    rows = []
    for name, g_ref in grads_ref.items():
        if name not in got:
            continue
        g = got[name]
        if header[name]["dtype"] != "F32":
            failures.append("gradient %s has dtype %s, expected F32" % (name, header[name]["dtype"]))
        if tuple(g.shape) != tuple(g_ref.shape):
            failures.append("gradient %s has shape %s, expected %s"
                            % (name, list(g.shape), list(g_ref.shape)))
            continue
        g = g.astype(np.float64)
        err = float(np.abs(g - g_ref).max()) if g.size else 0.0
        ref_max = float(np.abs(g_ref).max()) if g.size else 0.0
        if ref_max > 0:
            rel = err / ref_max if np.isfinite(g).all() else float("inf")
            bad = not rel <= GRAD_RTOL
            why = "max |g_ref| %.3g, relative %.3g > %g" % (ref_max, rel, GRAD_RTOL)
        else:  # reference exactly zero: compare with the model's largest gradient
            rel = err / global_max if np.isfinite(g).all() else float("inf")
            bad = not rel <= ZERO_REF_FLOOR
            why = ("reference is exactly zero; error / largest gradient of the model %.3g > %g"
                   % (rel, ZERO_REF_FLOOR))
        rows.append((name, list(g.shape), err, rel))
        if bad:
            failures.append("gradient %s: max abs error %.3g, %s" % (name, err, why))
    return rows, loss, loss_rel, failures


def write_inputs(dirpath, cfg, params, ids, labels):
    os.makedirs(dirpath, exist_ok=True)
    cfg_path = os.path.join(dirpath, "config.json")
    w_path = os.path.join(dirpath, "W.safetensors")
    b_path = os.path.join(dirpath, "B.safetensors")
    ref.save_config(cfg, cfg_path)
    ref.write_safetensors(w_path, params)
    ref.write_safetensors(b_path, {"input_ids": ids, "labels": labels})
    return cfg_path, w_path, b_path


def print_table(rows):
    width = max([len("tensor")] + [len(r[0]) for r in rows])
    print("  %-*s  %-12s  %12s  %10s" % (width, "tensor", "shape", "max abs err", "rel err"))
    for name, shape, err, rel in rows:
        shape_s = "[" + ", ".join(str(s) for s in shape) + "]"
        print("  %-*s  %-12s  %12.3e  %10.3e" % (width, name, shape_s, err, rel))


def check_config(shardnode, workdir, name, cfg, params, ids, labels, splits, table):
    """Runs one configuration for each split; returns a list of failure lines."""
    cfg_path, w_path, b_path = write_inputs(os.path.join(workdir, name), cfg, params, ids, labels)
    loss_ref, grads_ref = ref.loss_and_grads(params, cfg, ids, labels)
    failures = []
    for split in splits:
        label = "%s [%s]" % (name, "one stage" if split is None else "--split " + split)
        g_path = os.path.join(workdir, name, "G%s.safetensors"
                              % ("" if split is None else "-split-" + split.replace(",", "-")))
        ok, msg = run_shardnode(shardnode, cfg_path, w_path, b_path, g_path, split)
        if not ok:
            print("FAIL %s: shardnode failed, %s" % (label, msg), flush=True)
            failures.append("%s: shardnode failed (%s)" % (label, msg.splitlines()[0]))
            continue
        try:
            rows, loss, loss_rel, errs = compare(g_path, cfg, loss_ref, grads_ref)
        except (ValueError, KeyError, OSError) as e:
            print("FAIL %s: cannot read %s: %s" % (label, g_path, e), flush=True)
            failures.append("%s: cannot read %s: %s" % (label, g_path, e))
            continue
        worst = max(rows, key=lambda r: r[3]) if rows else ("-", [], 0.0, 0.0)
        status = "ok  " if not errs else "FAIL"
        loss_s = "missing" if loss is None else "%.6f (ref %.6f, rel %.1e)" % (loss, loss_ref, loss_rel)
        print("%s %-46s loss %s  worst %s rel %.1e" % (status, label, loss_s, worst[0], worst[3]),
              flush=True)
        if table:
            print_table(rows)
        for e in errs:
            print("     %s: %s" % (label, e), flush=True)
            failures.append("%s: %s" % (label, e))
    return failures


def fixed_runs(shardnode, workdir, seed, quick):
    failures = []
    for i, spec in enumerate(CONFIGS):
        rng = np.random.default_rng([seed, i])
        cfg = ref.make_config(**spec["cfg"])
        params = ref.random_params(cfg, rng, std=spec["std"], embed_std=spec["embed_std"])
        ids, labels = ref.random_batch(cfg, rng, spec["B"], spec["T"])
        splits = spec["splits"][:2] if quick else spec["splits"]
        failures += check_config(shardnode, workdir, spec["name"], cfg, params, ids, labels,
                                 splits, table=False)
    return failures


def given_config_runs(shardnode, workdir, config_path, seed):
    with open(config_path) as f:
        cfg = json.load(f)
    full = ref.full_config(cfg)
    rng = np.random.default_rng(seed)
    T = min(16, int(full["max_position_embeddings"]))
    params = ref.random_params(cfg, rng, std=0.02)
    ids, labels = ref.random_batch(cfg, rng, 2, T)
    L = int(full["num_hidden_layers"])
    split = str(L // 2) if L >= 2 else "1"
    name = os.path.splitext(os.path.basename(os.path.dirname(os.path.abspath(config_path))))[0]
    print("config %s: hidden %d, layers %d, heads %d/%d, vocab %d, batch [2, %d]"
          % (config_path, full["hidden_size"], L, full["num_attention_heads"],
             full["num_key_value_heads"], full["vocab_size"], T))
    return check_config(shardnode, workdir, name or "config", cfg, params, ids, labels,
                        [None, split], table=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardnode", required=True, help="path of the shardnode binary")
    ap.add_argument("--workdir", required=True, help="directory for the generated files")
    ap.add_argument("--config", help="check only this config.json (random weights and batch)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--quick", action="store_true", help="fewer splits per configuration")
    ap.add_argument("--device", default="cpu", help="cpu, cuda:N or hip:N")
    args = ap.parse_args()

    shardnode = os.path.abspath(args.shardnode)
    if not os.access(shardnode, os.X_OK):
        sys.exit("gradcheck_ref: %s is not an executable file" % shardnode)
    global DEVICE
    DEVICE = args.device
    if DEVICE != "cpu":
        listed = json.loads(subprocess.run([shardnode, "devices", "--json"], check=True,
                                           stdout=subprocess.PIPE).stdout)
        vendor = DEVICE.split(":")[0]
        mine = [d for d in listed if d["device"] == DEVICE and d["status"] == "ok"]
        if not mine:
            why = "; ".join(d.get("why", d["status"]) for d in listed
                            if d["device"].split(":")[0] == vendor)
            print("skip: %s is not usable here (%s)" % (DEVICE, why or "not listed"))
            sys.exit(77)
    os.makedirs(args.workdir, exist_ok=True)
    t0 = time.time()
    if args.config:
        failures = given_config_runs(shardnode, args.workdir, args.config, args.seed)
    else:
        failures = fixed_runs(shardnode, args.workdir, args.seed, args.quick)
    if failures:
        print("\ngradcheck_ref: %d failure(s):" % len(failures))
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print("gradcheck_ref: all runs match PyTorch (%.1f s)" % (time.time() - t0))


if __name__ == "__main__":
    main()
