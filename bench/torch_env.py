"""Import this before torch: it gives the PyTorch baseline its best settings
on these machines, the same for every benchmark in bench/.

- OMP_WAIT_POLICY=PASSIVE: without it torch's OpenMP workers spin against
  OpenBLAS threads (notes: 130-270 instead of 360-390 tokens/s). The
  shardnode subprocess gets an environment without it (child_env()).
- OPENBLAS_CORETYPE: Debian's OpenBLAS 0.3.21 does not recognise newer Xeons
  and falls back to its generic "Prescott" kernels, 4-8x slower; torch's
  matmuls go through the same library. shardnode corrects this itself
  (kernels.h, kernels_blas_coretype_hint); the baseline gets the same
  correction by the same rule, so both sides run the same sgemm kernels.
"""

import os


def blas_coretype():
    if os.environ.get("OPENBLAS_CORETYPE"):
        return os.environ["OPENBLAS_CORETYPE"]
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    except OSError:
        flags = []
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags and "fma" in flags:
        return "Haswell"
    return ""


def child_env():
    """The environment for shardnode subprocesses: without torch's setting."""
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    return env


os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
if blas_coretype():
    os.environ["OPENBLAS_CORETYPE"] = blas_coretype()
