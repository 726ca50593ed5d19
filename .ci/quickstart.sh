#!/usr/bin/env bash
# The README's first command as written (examples/quickstart.sh): the example issue on the embedded
# defaults, the bundled SmolLM2-135M model included. The tiny model proves the machinery, not the
# intelligence, so a run it ends without a patch, or fails in one line, is fine; what is checked is
# that a real model answered, the log is whole (check_local_run.py) and `replay` finds no divergence.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
status=0
bash examples/quickstart.sh >"$work/summary.txt" 2>"$work/terminal.txt" || status=$?
run=$(sed -n 's/^run: *//p' "$work/summary.txt")
if [ -z "$run" ]; then  # a failed run names itself on its error line
    run=$(sed -n 's/.*error: run \([0-9a-f]\{12\}\) failed.*/\1/p' "$work/terminal.txt" | tail -1)
fi
if [ -z "$run" ] || { [ "$status" != 0 ] && [ "$status" != 2 ]; }; then
    echo "quick start: exit $status, no run named" >&2
    cat "$work/terminal.txt" "$work/summary.txt" >&2
    exit 1
fi
.venv/bin/magis-ray events "$run" --store .magis >"$work/events.jsonl"
.venv/bin/python .ci/check_local_run.py "$work/events.jsonl" "$status" "$work/terminal.txt"
.venv/bin/magis-ray replay "$run" --store .magis >"$work/replay.txt" 2>&1 || { cat "$work/replay.txt" >&2; exit 1; }
grep -q "no divergence" "$work/replay.txt" || { echo "quick start: replay of run $run diverged" >&2; cat "$work/replay.txt" >&2; exit 1; }
echo "quick start: run $run replays with no divergence; the whole command took $(( $(date +%s) - start )) s"
