"""shardnode must refuse bad input files with one clear line, and no crash.

    /usr/bin/python3 tests/reference/bad_input.py --shardnode build/shardnode --workdir DIR

Writes a small valid config/weights/batch and checks that `shardnode
gradcheck` accepts it. Then, for each broken input (truncated or overlapping
safetensors data, offsets past the end, a missing tensor, a wrong shape, an
unknown dtype, heads that do not divide, token ids or labels outside the
vocabulary, a bad --split, a missing file, a config.json that is not JSON),
it runs gradcheck again and asserts:
  - the exit status is non-zero;
  - stderr is exactly one non-empty line (sanitizer reports, which span many
    lines, fail the test), with no "runtime error" or "Sanitizer" in it;
  - that line names the offending file and the tensor or key at fault (for
    token ids: input_ids and the position);
  - the file already at the --out path is left untouched.
Then other commands' bad input: a config of absurd sizes (a million layers;
sequences of 65536 in micro-batches of 64) is refused with the memory it
would need, before allocating it; a 100 KB token in the wrong place is
echoed cut short; `plan` with a profile of another model names the profile
and the model.
"""

import argparse
import copy
import json
import os
import re
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref  # noqa: E402

PROCESS_TIMEOUT_S = 120
SENTINEL = b"sentinel: a failing run must leave this file alone\n"

# The valid model: 3 layers, grouped-query heads, odd vocabulary.
CFG = ref.make_config(hidden_size=32, intermediate_size=72, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=61,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                      max_position_embeddings=64)
B, T = 2, 7


def run(shardnode, cfg, weights, batch, out, split=None):
    cmd = [shardnode, "gradcheck", "--config", cfg, "--weights", weights,
           "--batch", batch, "--out", out]
    if split is not None:
        cmd += ["--split", split]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return cmd, None, "", "timed out after %d s" % PROCESS_TIMEOUT_S
    return cmd, p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def mentions_position(line, paths, b, t):
    """True if line names position (b, t) of a [B, T] tensor: "[1, 5]",
    "(1,5)", "batch 1 position 5" or the flat index b*T + t. File paths are
    removed first so digits in them do not count."""
    for p in paths:
        line = line.replace(p, " ").replace(os.path.basename(p), " ")
    pair = r"(?<![\d.])%d\D{1,24}(?<![\d.])%d(?![\d.])" % (b, t)
    flat = r"(?<![\d.-])%d(?![\d.])" % (b * T + t)
    return re.search(pair, line) is not None or re.search(flat, line) is not None


# ----------------------------------------------------------- the inputs ---

def valid_inputs(workdir):
    rng = np.random.default_rng(7)
    params = ref.random_params(CFG, rng, std=0.1)
    ids, labels = ref.random_batch(CFG, rng, B, T)
    labels[0, 0] = ref.IGNORE_INDEX
    labels[1, 1] = 3
    cfg_path = os.path.join(workdir, "config.json")
    ref.save_config(CFG, cfg_path)
    w_path = os.path.join(workdir, "W.safetensors")
    ref.write_safetensors(w_path, params)
    b_path = os.path.join(workdir, "B.safetensors")
    ref.write_safetensors(b_path, {"input_ids": ids, "labels": labels})
    return cfg_path, w_path, b_path, params, ids, labels


def weights_header(params):
    """(header, data) of the valid weights, for editing."""
    return ref.parse_safetensors(ref.encode_safetensors(params))


def by_offset(header):
    names = [n for n in header if n != "__metadata__"]
    return sorted(names, key=lambda n: header[n]["data_offsets"][0])


def write_raw(path, header, data):
    with open(path, "wb") as f:
        f.write(ref.encode_raw_safetensors(header, data))
    return path


def make_cases(workdir, cfg_path, w_path, b_path, params, ids, labels):
    """List of dicts: name, cfg, weights, batch, split, expect (a list of
    requirements: a string that must appear, a tuple of which one must
    appear, or a callable on the line), what (for messages)."""
    cases = []
    d = workdir

    def case(name, expect, cfg=cfg_path, weights=w_path, batch=b_path, split=None):
        cases.append(dict(name=name, cfg=cfg, weights=weights, batch=batch, split=split,
                          expect=expect))

    header, data = weights_header(params)
    order = by_offset(header)
    last = order[-1]

    # Weights cut short inside the last tensor's data.
    size = header[last]["data_offsets"][1] - header[last]["data_offsets"][0]
    blob = ref.encode_raw_safetensors(header, data)
    p = os.path.join(d, "truncated.safetensors")
    with open(p, "wb") as f:
        f.write(blob[:len(blob) - size // 2])
    case("truncated safetensors body", ["truncated.safetensors", last], weights=p)

    # The last two tensors overlap by 4 bytes; the data is 4 bytes shorter so
    # it is still covered with no hole: only the overlap is wrong.
    h = copy.deepcopy(header)
    a, b = order[-2], order[-1]
    h[b]["data_offsets"] = [x - 4 for x in h[b]["data_offsets"]]
    p = write_raw(os.path.join(d, "overlap.safetensors"), h, data[:-4])
    case("overlapping offsets", ["overlap.safetensors", (a, b)], weights=p)

    # The last tensor shifted 8 bytes: its end runs past the end of the data.
    h = copy.deepcopy(header)
    h[last]["data_offsets"] = [x + 8 for x in h[last]["data_offsets"]]
    p = write_raw(os.path.join(d, "past_end.safetensors"), h, data)
    case("offsets past the end", ["past_end.safetensors", last], weights=p)

    missing = "model.layers.1.mlp.up_proj.weight"
    p = os.path.join(d, "missing_tensor.safetensors")
    ref.write_safetensors(p, {k: v for k, v in params.items() if k != missing})
    case("missing tensor", ["missing_tensor.safetensors", missing], weights=p)

    wrong = "model.layers.2.self_attn.k_proj.weight"
    p = os.path.join(d, "wrong_shape.safetensors")
    ref.write_safetensors(p, {k: (v.T.copy() if k == wrong else v) for k, v in params.items()})
    case("wrong shape", ["wrong_shape.safetensors", wrong], weights=p)

    # F64 with a consistent byte count, and a made-up dtype.
    f64 = "model.norm.weight"
    p = os.path.join(d, "dtype_f64.safetensors")
    ref.write_safetensors(p, {k: (v.astype(np.float64) if k == f64 else v)
                              for k, v in params.items()})
    case("unsupported dtype F64", ["dtype_f64.safetensors", f64], weights=p)

    q7 = "model.layers.0.input_layernorm.weight"
    h = copy.deepcopy(header)
    h[q7]["dtype"] = "Q7"
    p = write_raw(os.path.join(d, "dtype_q7.safetensors"), h, data)
    case("unknown dtype Q7", ["dtype_q7.safetensors", q7], weights=p)

    def bad_config(sub, **changes):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
        c = dict(CFG)
        c.update(changes)
        path = os.path.join(d, sub, "config.json")
        ref.save_config(c, path)
        return path

    p = bad_config("heads_not_dividing", num_attention_heads=5, num_key_value_heads=5)
    case("heads do not divide hidden_size",
         ["config.json", ("num_attention_heads", "hidden_size")], cfg=p)
    p = bad_config("kv_heads_not_dividing", num_key_value_heads=3)
    case("KV heads do not divide heads", ["config.json", "num_key_value_heads"], cfg=p)

    def bad_batch(fname, ids_, labels_):
        path = os.path.join(d, fname)
        ref.write_safetensors(path, {"input_ids": ids_, "labels": labels_})
        return path

    V = CFG["vocab_size"]
    bad = ids.copy()
    bad[1, 5] = V
    p = bad_batch("ids_too_big.safetensors", bad, labels)
    case("token id >= vocab_size", ["ids_too_big.safetensors", "input_ids",
                                    lambda s, p=p: mentions_position(s, [p], 1, 5)], batch=p)
    bad = ids.copy()
    bad[0, 3] = -7
    p = bad_batch("ids_negative.safetensors", bad, labels)
    case("negative token id", ["ids_negative.safetensors", "input_ids",
                               lambda s, p=p: mentions_position(s, [p], 0, 3)], batch=p)
    bad = labels.copy()
    bad[1, 3] = V + 5
    p = bad_batch("labels_too_big.safetensors", ids, bad)
    case("label >= vocab_size", ["labels_too_big.safetensors", "labels"], batch=p)
    bad = labels.copy()
    bad[0, 6] = -1
    p = bad_batch("labels_negative.safetensors", ids, bad)
    case("negative label other than -100", ["labels_negative.safetensors", "labels"], batch=p)

    L = CFG["num_hidden_layers"]
    for split, why in [("2,1", "decreasing"), ("1,1", "repeated cut"),
                       (str(L + 1), "past num_hidden_layers"), ("-1", "negative")]:
        case("--split %s (%s)" % (split, why), ["--split"], split=split)

    p = os.path.join(d, "does_not_exist.safetensors")
    case("missing weights file", ["does_not_exist.safetensors"], weights=p)
    p = os.path.join(d, "no_such_dir", "missing_config.json")
    case("missing config file", ["missing_config.json"], cfg=p)

    os.makedirs(os.path.join(d, "json_syntax"), exist_ok=True)
    p = os.path.join(d, "json_syntax", "config.json")
    text = json.dumps(CFG, indent=2).replace(",", ",,", 1)
    with open(p, "w") as f:
        f.write(text)
    case("config.json with a JSON syntax error", ["config.json"], cfg=p)
    return cases


# ------------------------------------------------------------- checking ---

def check_requirement(line, req):
    if callable(req):
        return req(line), "the position"
    if isinstance(req, tuple):
        return any(r in line for r in req), " or ".join(repr(r) for r in req)
    return req in line, repr(req)


def check_case(shardnode, out_path, c):
    """Returns (ok, stderr line or report)."""
    with open(out_path, "wb") as f:
        f.write(SENTINEL)
    cmd, rc, _, err = run(shardnode, c["cfg"], c["weights"], c["batch"], out_path, c["split"])
    problems = []
    if rc is None:
        problems.append(err)
    elif rc == 0:
        problems.append("exit status 0, expected a failure")
    elif rc < 0:
        problems.append("killed by signal %d" % -rc)
    lines = err.splitlines()
    if "runtime error" in err or "Sanitizer" in err:
        problems.append("sanitizer report on stderr")
    if len(lines) != 1 or not lines[0].strip():
        problems.append("stderr has %d lines, expected exactly one non-empty line" % len(lines))
    line = lines[0] if len(lines) == 1 else err
    for req in c["expect"]:
        ok, what = check_requirement(line, req)
        if not ok:
            problems.append("message does not name %s" % what)
    with open(out_path, "rb") as f:
        if f.read() != SENTINEL:
            problems.append("the existing --out file %s was changed" % out_path)
    if problems:
        report = "; ".join(problems) + "\n     command: " + " ".join(cmd)
        report += "\n     stderr: " + ("\n             ".join(err.splitlines()) or "(empty)")
        return False, report
    return True, line.strip()


# ------------------------------------------------- other commands' input ---

def command_cases(workdir, cfg_path, w_path, b_path):
    """Bad input to other commands: (name, argv, substrings the one stderr
    line must hold, the longest it may be)."""
    cases = []
    with open(cfg_path) as f:
        cfg = json.load(f)
    # Absurd sizes are refused with the memory figure before anything is
    # allocated (without the check: a table for a million layers, then out
    # of memory or, under ASan, an abort on the activations).
    huge = dict(cfg, num_hidden_layers=1000000, hidden_size=4096, num_attention_heads=32,
                num_key_value_heads=32, intermediate_size=11008)
    huge_path = os.path.join(workdir, "huge-config.json")
    with open(huge_path, "w") as f:
        json.dump(huge, f)
    cases.append(("a million layers", ["gradcheck", "--config", huge_path, "--weights", w_path,
                                       "--batch", b_path,
                                       "--out", os.path.join(workdir, "huge-out.safetensors")],
                  ["[0, 1000000)", "needs", "PiB", "memory"], 400))
    long_cfg = dict(cfg, max_position_embeddings=65536)
    long_path = os.path.join(workdir, "long-config.json")
    with open(long_path, "w") as f:
        json.dump(long_cfg, f)
    cases.append(("sequence 65536 x batch 64", ["bench", "--config", long_path, "--seq", "65536",
                                                "--batch", "64", "--steps", "1"],
                  ["[64, 65536]", "needs", "TiB", "memory"], 400))
    # A 100 KB token pasted where it does not belong is echoed cut short.
    token = "snj1." + "A" * 100000
    state = os.path.join(workdir, "no-state")
    cases.append(("a 100 KB token as a stray argument of up", ["up", "--state", state, token],
                  ["unknown argument", "snj1.AAAA", "(cut)"], 200))
    cases.append(("a 100 KB token as a stray argument of invite",
                  ["invite", "--state", state, token], ["unknown argument", "(cut)"], 200))
    cases.append(("a 100 KB token to join", ["join", token, "--state", state], ["token"], 200))
    cases.append(("a 100 KB --threads value", ["bench", "--config", cfg_path, "--threads", token],
                  ["--threads", "..."], 200))
    # plan: a profile measured for another model names the profile file and
    # the model, not only the fleet file that points to it.
    fleets = os.path.join(workdir, "fleets")
    os.makedirs(fleets, exist_ok=True)
    profile = {"format": "shardnode-profile", "version": 1, "device": "cpu",
               "model": {"hidden_size": 96, "intermediate_size": 260, "num_hidden_layers": 4,
                         "num_attention_heads": 6, "num_key_value_heads": 2, "vocab_size": 259,
                         "tie_word_embeddings": False},
               "micro_batch": 1, "seq": 64, "memory_bytes": 8 << 30, "scratch_slots": 1}
    for unit in ("embedding", "layer", "head"):
        profile[unit] = {"forward_ns": 1000, "backward_ns": 2000, "optimizer_ns": 500}
    prof_path = os.path.join(fleets, "other-model.json")
    with open(prof_path, "w") as f:
        json.dump(profile, f)
    fleet_path = os.path.join(fleets, "fleet.json")
    with open(fleet_path, "w") as f:
        json.dump({"name": "t", "nodes": [{"name": "a", "profile": "other-model.json"}]}, f)
    cases.append(("plan with a profile of another model",
                  ["plan", "--fleet", fleet_path, "--model", cfg_path, "--seq", "64"],
                  [prof_path, cfg_path, "hidden_size"], 1000))
    return cases


def check_command(shardnode, name, argv, must, longest):
    cmd = [shardnode] + argv
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=PROCESS_TIMEOUT_S)
        rc, err = p.returncode, p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        rc, err = None, "timed out after %d s" % PROCESS_TIMEOUT_S
    problems = []
    if rc is None:
        problems.append(err)
    elif rc == 0:
        problems.append("exit status 0, expected a failure")
    elif rc < 0:
        problems.append("killed by signal %d" % -rc)
    if "runtime error" in err or "Sanitizer" in err:
        problems.append("sanitizer report on stderr")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    # usage lines may follow a refusal of the command line; the first is the error
    if not lines:
        problems.append("nothing on stderr")
    if len(line) > longest:
        problems.append("the line is %d characters, expected at most %d" % (len(line), longest))
    for m in must:
        if m not in line:
            problems.append("message does not name %r" % m)
    short = " ".join(a if len(a) < 80 else a[:40] + "...(%d)" % len(a) for a in argv)
    if problems:
        return False, "; ".join(problems) + "\n     command: shardnode " + short + \
            "\n     stderr: " + line[:600]
    return True, line.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardnode", required=True, help="path of the shardnode binary")
    ap.add_argument("--workdir", required=True, help="directory for the generated files")
    args = ap.parse_args()
    shardnode = os.path.abspath(args.shardnode)
    if not os.access(shardnode, os.X_OK):
        sys.exit("bad_input: %s is not an executable file" % shardnode)
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)

    cfg_path, w_path, b_path, params, ids, labels = valid_inputs(workdir)
    out_path = os.path.join(workdir, "G.safetensors")

    with open(out_path, "wb") as f:
        f.write(SENTINEL)
    cmd, rc, _, err = run(shardnode, cfg_path, w_path, b_path, out_path)
    if rc != 0 or "runtime error" in err or "Sanitizer" in err:
        print("FAIL valid input: exit status %s\n     command: %s\n     stderr: %s"
              % (rc, " ".join(cmd), err.rstrip() or "(empty)"))
        sys.exit(1)
    with open(out_path, "rb") as f:
        if f.read() == SENTINEL:
            print("FAIL valid input: exit status 0 but %s was not written" % out_path)
            sys.exit(1)
    print("ok   valid input accepted")

    failures = []
    for c in make_cases(workdir, cfg_path, w_path, b_path, params, ids, labels):
        ok, msg = check_case(shardnode, out_path, c)
        print("%s %-38s %s" % ("ok  " if ok else "FAIL", c["name"], msg), flush=True)
        if not ok:
            failures.append(c["name"])
    for name, argv, must, longest in command_cases(workdir, cfg_path, w_path, b_path):
        ok, msg = check_command(shardnode, name, argv, must, longest)
        print("%s %-38s %s" % ("ok  " if ok else "FAIL", name, msg), flush=True)
        if not ok:
            failures.append(name)
    if failures:
        print("\nbad_input: %d case(s) failed: %s" % (len(failures), ", ".join(failures)))
        sys.exit(1)
    print("bad_input: all cases refused cleanly")


if __name__ == "__main__":
    main()
