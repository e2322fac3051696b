#!/bin/sh
# The Quick start's first command: dependencies, build, then the main job.
# For now the main job is the compute core's proof: the gradient check of a
# shipped model against PyTorch, with and without a pipeline split, and the
# training-step benchmark against PyTorch on the same machine.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
sh scripts/build.sh
mkdir -p out/quickstart
echo "== gradient check of configs/tiny/config.json against PyTorch"
/usr/bin/python3 tests/reference/gradcheck_ref.py --shardnode build/shardnode \
    --workdir out/quickstart --config configs/tiny/config.json
echo "== one training step, shardnode against PyTorch (2 threads)"
/usr/bin/python3 bench/step_vs_torch.py --shardnode build/shardnode
