#!/bin/sh
# The fresh-machine check: clone the repository (its committed HEAD, nothing
# uncommitted) into a temporary directory and run the README's Quick start
# commands there exactly as the README writes them, one after the other.
#
#   sh scripts/fresh-check.sh            # both commands, environment as it is
#   sh scripts/fresh-check.sh --keep     # keep the clone (its path is printed)
#
# Run it before resolving an issue, once with the environment as it is and
# once with OPENBLAS_CORETYPE unset or set otherwise, e.g.
#   env -u OPENBLAS_CORETYPE sh scripts/fresh-check.sh
#   OPENBLAS_CORETYPE=Haswell sh scripts/fresh-check.sh
# The commands are read from the README's "Quick start" code block, so the
# check can never drift from what a new user is told to type.
set -eu
cd "$(dirname "$0")/.."
keep=0
[ "${1:-}" = --keep ] && keep=1
src=$(pwd)
cmds=$(awk '/^## Quick start/{q=1} q&&/^```sh/{c=1;next} q&&c&&/^```/{exit} q&&c{print}' README.md |
       sed 's/[[:space:]]*#.*$//' | grep -v '^[[:space:]]*$' || true)
n=$(printf '%s\n' "$cmds" | grep -c . || true)
if [ "$n" -ne 2 ]; then
    echo "fresh-check: README.md's Quick start must hold exactly two commands, found $n:" >&2
    printf '%s\n' "$cmds" >&2
    exit 1
fi
dir=$(mktemp -d /tmp/shardnode-fresh.XXXXXX)
cleanup() { [ "$keep" -eq 1 ] && echo "fresh-check: clone kept in $dir/repo" || rm -rf "$dir"; }
trap cleanup EXIT
git clone -q "$src" "$dir/repo"
echo "fresh-check: $(git -C "$dir/repo" log -1 --format='%h %s' | cut -c1-72)"
echo "fresh-check: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}"
cd "$dir/repo"
printf '%s\n' "$cmds" > "$dir/commands"
i=0
while IFS= read -r c; do
    i=$((i + 1))
    echo "fresh-check: [$i/2] $c"
    t0=$(date +%s)
    if ! sh -c "$c" > "$dir/cmd$i.log" 2>&1; then
        tail -40 "$dir/cmd$i.log"
        echo "fresh-check: FAILED: '$c' (log above; full log in $dir/cmd$i.log)"
        keep=1
        exit 1
    fi
    tail -3 "$dir/cmd$i.log"
    echo "fresh-check: [$i/2] passed in $(( $(date +%s) - t0 )) s"
done < "$dir/commands"
echo "fresh-check: both Quick start commands passed in a fresh clone"
