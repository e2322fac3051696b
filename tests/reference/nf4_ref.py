"""shardnode's NF4 (kernels/cpu/nf4.c) and bitsandbytes 4-bit checkpoint
reader (model/bnb_import.c) against an independent numpy implementation of
bitsandbytes' algorithm (its CUDA kernels' rounding: bitsandbytes itself
needs CUDA and is not installed here).

    /usr/bin/python3 tests/reference/nf4_ref.py --tool build/tests/test_nf4 --workdir DIR

Re-runs itself with .venv/bin/python (safetensors); without the venv it
exits 77 (skipped). Every random choice is seeded. It checks, bit for bit:
  - quantization of seeded matrices (normal, odd sizes, several nested
    blocks, zeros, negative zeros, denormals, huge values, blocks of equal
    values, all absmax equal): packed codes, fp32 absmax, the offset, the
    8-bit absmax codes, nested absmax and the dequantized values;
  - the dynamic 8-bit map against create_dynamic_map's recipe run on
    torch.linspace (the torch here);
  - a LLaMA directory saved as bitsandbytes' Linear4bit state dict
    (safetensors, the quant_state JSON as QuantState.as_dict(packed=True)
    writes it) read back through hf_read_f32 equals the numpy
    dequantization; hf_check accepts it and refuses fp4, blocksize 128 and
    a single-quantized checkpoint naming the tensor and field.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import refvenv  # noqa: E402

refvenv.enter("safetensors")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nf4_np import MID, NF4, dequantize_nf4, dynamic_map, quantize8, quantize_nf4  # noqa: E402,F401

f32 = np.float32
failures = []
compared = {"values": 0}

def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


def same_bits(a, b, what):
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    if a.shape != b.shape:
        check(False, "%s: shape %s vs %s" % (what, a.shape, b.shape))
        return
    if a.dtype == f32:
        a, b = a.view(np.uint32), b.view(np.uint32)
    bad = np.nonzero(a != b)[0]
    compared["values"] += a.size
    check(bad.size == 0, "%s: %d of %d differ (first at %s: %r vs %r)" % (
        what, bad.size, a.size, bad[:1], a[bad[:1]], b[bad[:1]]))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def matrices(rng):
    out = []
    out.append(("normal 37x300", rng.standard_normal((37, 300)).astype(f32)))
    out.append(("normal*0.02 256x1024", (rng.standard_normal((256, 1024)) * 0.02).astype(f32)))
    out.append(("odd 7x9", rng.standard_normal((7, 9)).astype(f32)))
    out.append(("3 nested blocks 300x129", rng.standard_normal((300, 129)).astype(f32)))
    m = rng.standard_normal((40, 96)).astype(f32)
    flat = m.reshape(-1)
    flat[0:64] = 0.0                       # a zero block
    flat[64:128] = -0.0                    # a negative-zero block
    flat[128:160] = -0.0                   # negative zeros among values
    flat[200:264] = f32(0.5)               # a block of equal values
    flat[264:328] = f32(-3.25)             # equal negative values
    flat[328:392] = rng.standard_normal(64).astype(f32) * f32(1e-41)  # denormals only
    flat[392] = f32(1e-45)                 # smallest denormal among normals
    flat[456] = f32(3.0e38)                # huge
    flat[520] = f32(-3.4028235e38)         # -FLT_MAX
    flat[584:648] = np.linspace(-1, 1, 64, dtype=f32) * f32(2.0)
    flat[650:660] = MID[:10] * f32(2.0)    # midpoints times the block's absmax
    flat[660] = f32(2.0)
    out.append(("special values 40x96", m))
    out.append(("all absmax equal 4x128", np.tile(np.array([1.0, -1.0], dtype=f32), 256)
                .reshape(4, 128)))
    out.append(("single value 1x1", np.array([[f32(-0.75)]])))
    return out


def test_quantize(tool, workdir, code8):
    rng = np.random.default_rng(17)
    for name, w in matrices(rng):
        d = os.path.join(workdir, "q")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        w.astype(f32).tofile(os.path.join(d, "in.f32"))
        rc, out = run([tool, "quantize", os.path.join(d, "in.f32"), str(w.shape[0]),
                       str(w.shape[1]), d])
        check(rc == 0, "%s: test_nf4 quantize failed: %s" % (name, out))
        if rc:
            continue
        ref = quantize_nf4(w, code8)
        rd = lambda f, t: np.fromfile(os.path.join(d, f), dtype=t)  # noqa: E731
        same_bits(rd("codes.u8", np.uint8), ref["codes"], name + ": packed codes")
        same_bits(rd("absmax.f32", f32), ref["absmax"], name + ": absmax")
        same_bits(rd("offset.f32", f32), np.array([ref["offset"]]), name + ": offset")
        same_bits(rd("absmax_q.u8", np.uint8), ref["absmax_q"], name + ": 8-bit absmax")
        same_bits(rd("nested.f32", f32), ref["nested"], name + ": nested absmax")
        deq = dequantize_nf4(ref, w.size, code8)
        ours = rd("deq.f32", f32)
        same_bits(ours, deq, name + ": dequantized")
        fin = np.isfinite(w.reshape(-1)) & (np.abs(w.reshape(-1)) < 1e37)
        err = np.abs(ours[fin].astype(np.float64) - w.reshape(-1)[fin])
        print("  %-26s %7d values bit-identical; max |deq - w| %.3g" % (
            name, w.size, err.max()))


# ---- a checkpoint as bitsandbytes saves a 4-bit LLaMA ----------------------

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 128,
          "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False,
          "hidden_act": "silu", "torch_dtype": "bfloat16"}


def linear_names(cfg):
    C, F, KV = cfg["hidden_size"], cfg["intermediate_size"], \
        cfg["hidden_size"] // cfg["num_attention_heads"] * cfg["num_key_value_heads"]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        yield p + "self_attn.q_proj.weight", (C, C)
        yield p + "self_attn.k_proj.weight", (KV, C)
        yield p + "self_attn.v_proj.weight", (KV, C)
        yield p + "self_attn.o_proj.weight", (C, C)
        yield p + "mlp.gate_proj.weight", (F, C)
        yield p + "mlp.up_proj.weight", (F, C)
        yield p + "mlp.down_proj.weight", (C, F)


def bnb_state(name, w, code8, qs_extra=None, nested=True):
    """Linear4bit._save_to_state_dict: weight + quant_state.as_dict(packed=True)."""
    q = quantize_nf4(w, code8)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    sd = {name: t(q["codes"].reshape(-1, 1)),
          name + ".absmax": t(q["absmax_q"] if nested else q["absmax"]),
          name + ".quant_map": t(NF4.copy())}
    qs = {"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": list(w.shape)}
    if nested:
        sd[name + ".nested_absmax"] = t(q["nested"])
        sd[name + ".nested_quant_map"] = t(code8.copy())
        qs.update({"nested_blocksize": 256, "nested_dtype": "float32",
                   "nested_offset": float(q["offset"])})
    qs.update(qs_extra or {})
    js = json.dumps(qs).encode("utf-8")
    sd[name + ".quant_state.bitsandbytes__nf4"] = torch.tensor(list(js), dtype=torch.uint8)
    return sd, dequantize_nf4(q, w.size, code8).reshape(w.shape)


def write_checkpoint(d, code8, rng, broken=None):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(CONFIG, f)
    C, V = CONFIG["hidden_size"], CONFIG["vocab_size"]
    sd, want = {}, {}
    for name, shape in linear_names(CONFIG):
        w = (rng.standard_normal(shape) * 0.05).astype(f32)
        extra, nested = None, True
        if broken and name == "model.layers.1.mlp.up_proj.weight":
            extra, nested = broken
        part, deq = bnb_state(name, w, code8, extra, nested)
        sd.update(part)
        want[name] = deq
    bf = lambda a: torch.from_numpy(a).to(torch.bfloat16)  # noqa: E731
    for name, shape in [("model.embed_tokens.weight", (V, C)), ("lm_head.weight", (V, C)),
                        ("model.norm.weight", (C,))] + \
            [("model.layers.%d.%s.weight" % (l, n), (C,)) for l in range(2)
             for n in ("input_layernorm", "post_attention_layernorm")]:
        t = bf(rng.standard_normal(shape).astype(f32))
        sd[name] = t
        want[name] = t.float().numpy()
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    return want


def test_checkpoint(tool, workdir, code8):
    rng = np.random.default_rng(1717)
    d = os.path.join(workdir, "bnb")
    shutil.rmtree(d, ignore_errors=True)
    want = write_checkpoint(d, code8, rng)
    rc, out = run([tool, "hfcheck", d])
    check(rc == 0, "hf_check refuses bitsandbytes' checkpoint: " + out)
    n = 0
    for name, w in want.items():
        path = os.path.join(workdir, "t.f32")
        rc, out = run([tool, "hfread", d, name, path])
        check(rc == 0, "hf_read_f32 %s: %s" % (name, out))
        if rc == 0:
            same_bits(np.fromfile(path, dtype=f32), w.reshape(-1), "checkpoint " + name)
            n += w.size
    print("  bitsandbytes checkpoint: %d tensors, %d values bit-identical" % (len(want), n))
    for label, broken, words in [
            ("fp4", ({"quant_type": "fp4"}, True), ["up_proj", "quant_type"]),
            ("blocksize 128", ({"blocksize": 128}, True), ["up_proj", "blocksize"]),
            ("not double-quantized", (None, False), ["up_proj", "nested"])]:
        bd = os.path.join(workdir, "bnb_bad")
        shutil.rmtree(bd, ignore_errors=True)
        write_checkpoint(bd, code8, np.random.default_rng(5), broken)
        rc, out = run([tool, "hfcheck", bd])
        check(rc != 0 and all(w in out for w in words),
              "%s checkpoint: rc %d, message %r" % (label, rc, out.strip()))
        print("  refused (%s): %s" % (label, out.strip()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    code8 = dynamic_map()
    d = os.path.join(a.workdir, "map")
    os.makedirs(d, exist_ok=True)
    np.ones((1, 1), dtype=f32).tofile(os.path.join(d, "in.f32"))
    rc, out = run([a.tool, "quantize", os.path.join(d, "in.f32"), "1", "1", d])
    check(rc == 0, "test_nf4 quantize: " + out)
    if rc == 0:
        same_bits(np.fromfile(os.path.join(d, "map8.f32"), dtype=f32), code8,
                  "dynamic map vs create_dynamic_map on torch %s" % torch.__version__)
    test_quantize(a.tool, a.workdir, code8)
    test_checkpoint(a.tool, a.workdir, code8)
    print("nf4_ref: %d values compared bit for bit, %d failures" % (
        compared["values"], len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
