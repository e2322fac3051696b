#!/bin/sh
# The Quick start's second command: the whole test suite, from a fresh clone.
# Installs what is missing, builds the Release and the ASan+UBSan trees, and
# runs every ctest test in both.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
sh scripts/build.sh asan
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "== tests, ASan + UBSan build"
ctest --test-dir build-asan --output-on-failure -j2
echo "== tests, Release build"
ctest --test-dir build --output-on-failure -j2
