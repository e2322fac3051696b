#!/bin/sh
# The Quick start's first command: dependencies, build, then the main job on
# its embedded default: `shardnode demo` starts a pool of 3 nodes on this
# machine (as root: each in its own network namespace, joined over WireGuard
# by invite tokens; otherwise processes on loopback, unencrypted), trains a
# small LLaMA on the King James Bible (Debian's bible-kjv package) on the
# plan they elect, gathers the model and samples from it.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
sh scripts/build.sh
build/shardnode demo
