#!/bin/sh
# The Quick start's first command: dependencies, build, then the main job on
# its embedded default: a small LLaMA trained on the King James Bible (from
# Debian's bible-kjv package) on this machine, then a sample generation.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
sh scripts/build.sh
out=out/kjv
mkdir -p "$out"
echo "== corpus: the King James Bible (Debian package bible-kjv)"
bible 'Gen1:1-Rev22:21' > "$out/kjv.txt"
wc -c "$out/kjv.txt"
echo "== tokenizer: byte-level BPE, 2048 tokens"
build/shardnode tokenizer train --input "$out/kjv.txt" --vocab-size 2048 --out "$out/tokenizer.json"
echo "== training configs/kjv/config.json (job configs/kjv/job.json)"
build/shardnode train --job configs/kjv/job.json --metrics "$out/metrics.jsonl"
echo "== sample from the trained model"
build/shardnode generate --model "$out" --prompt "And God said" --tokens 80 --temperature 0.8 --seed 7
