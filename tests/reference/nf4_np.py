"""bitsandbytes' NF4 (quantize_4bit with nf4, blocksize 64, double
quantization) and dequantization in numpy, with its CUDA kernels' rounding:
the independent implementation reference.nf4 checks shardnode against bit
for bit, and the dequantized base reference.lora trains against.
Needs numpy and torch (torch.linspace for the dynamic map)."""

import numpy as np
import torch

f32 = np.float32

# QLoRA's NF4 values (appendix E), as bitsandbytes stores them (fp32).
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=f32)
# bnb's decision tree compares with the fp64 midpoints rounded to fp32:
# code = how many midpoints lie strictly below the scaled value.
MID = ((NF4[:-1].astype(np.float64) + NF4[1:].astype(np.float64)) * 0.5).astype(f32)



def dynamic_map():
    """create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8),
    with torch's linspace and fp32 arithmetic as torch does it."""
    data = []
    for i in range(7):
        b = torch.linspace(0.1, 1, 2 ** i + 1, dtype=torch.float32)
        means = (b[:-1] + b[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist()
        data += (-(10 ** (-6 + i)) * means).tolist()
    data += [0, 1.0]
    assert len(data) == 256
    return np.array(sorted(data), dtype=f32)


def quantize8(code, x):
    """bnb's dQuantize<0>: 7-step binary search from entry 127, then the
    midpoint test; vectorised."""
    x = x.astype(f32)
    pivot = np.full(x.shape, 127)
    up_p = np.full(x.shape, 255)
    lo_p = np.zeros(x.shape, dtype=np.int64)
    lower = np.full(x.shape, f32(-1.0))
    upper = np.full(x.shape, f32(1.0))
    val = code[pivot]
    for step in (64, 32, 16, 8, 4, 2, 1):
        gt = x > val
        lo_p = np.where(gt, pivot, lo_p)
        lower = np.where(gt, val, lower)
        up_p = np.where(gt, up_p, pivot)
        upper = np.where(gt, upper, val)
        pivot = np.where(gt, pivot + step, pivot - step)
        val = code[pivot]
    upper = np.where(up_p == 255, code[255], upper)
    lower = np.where(lo_p == 0, code[0], lower)
    gt = x > val
    mid_up = ((upper + val) * f32(0.5)).astype(f32)
    mid_lo = ((lower + val) * f32(0.5)).astype(f32)
    q = np.where(gt, np.where(x > mid_up, up_p, pivot), np.where(x < mid_lo, lo_p, pivot))
    return q.astype(np.uint8)


def quantize_nf4(w, code8):
    """bitsandbytes' quantize_4bit(nf4, blocksize 64, compress_statistics)."""
    flat = w.astype(f32).reshape(-1)
    n = flat.size
    nb = -(-n // 64)
    pad = np.zeros(nb * 64, dtype=f32)
    pad[:n] = flat
    blocks = pad.reshape(nb, 64)
    absmax = np.abs(blocks).max(axis=1).astype(f32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        recip = (f32(1.0) / absmax).astype(f32)
        scaled = (blocks * recip[:, None]).astype(f32).reshape(-1)
    codes = np.searchsorted(MID, scaled, side="left").astype(np.uint8)
    codes[np.isnan(scaled)] = 0
    if n % 2:
        codes = codes[:n + 1]   # the padding nibble: the code of 0.0 in its block
    else:
        codes = codes[:n]
    packed = (codes[0::2] << 4 | codes[1::2]).astype(np.uint8)
    offset = f32(absmax.astype(np.float64).mean())
    v = (absmax - offset).astype(f32)
    nb2 = -(-nb // 256)
    vpad = np.zeros(nb2 * 256, dtype=f32)
    vpad[:nb] = v
    nested = np.abs(vpad.reshape(nb2, 256)).max(axis=1).astype(f32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r2 = (f32(1.0) / nested).astype(f32)
        s2 = (v * np.repeat(r2, 256)[:nb]).astype(f32)
    absmax_q = quantize8(code8, s2)
    return dict(codes=packed, absmax=absmax, offset=offset, absmax_q=absmax_q, nested=nested)


def dequantize_nf4(q, n, code8):
    """bitsandbytes' dequantize_4bit: absmax = map8[q] * nested + offset,
    value = NF4[code] * absmax, fp32 throughout."""
    nb = q["absmax_q"].size
    a = (code8[q["absmax_q"]] * np.repeat(q["nested"], 256)[:nb]).astype(f32)
    a = (a + q["offset"]).astype(f32)
    codes = np.empty(q["codes"].size * 2, dtype=np.uint8)
    codes[0::2] = q["codes"] >> 4
    codes[1::2] = q["codes"] & 15
    codes = codes[:n]
    return (NF4[codes] * np.repeat(a, 64)[:n]).astype(f32)
