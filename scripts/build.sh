#!/bin/sh
# Builds shardnode: build/ (Release) and, with "asan", build-asan/ (ASan + UBSan).
set -eu
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
if [ "${1:-}" = asan ]; then
    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSHARDNODE_SANITIZE=ON >/dev/null
    cmake --build build-asan -j"$jobs"
fi
