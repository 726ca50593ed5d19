#!/usr/bin/env bash
# A plain install tests a user's repository: a fresh venv with `pip install .` and no extras (so no
# SWE-bench harness), then the calc example's scripted `submit` with tests on (the default), and a
# check that its log holds the reproduction test's runs and the regression tests' runs, and that the
# terminal said tests were on before the team's first step. Prints what each part took.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if ! command -v bwrap >/dev/null; then
    echo "plain install: skipped (bubblewrap is not installed: the team's tests run only in its sandbox)"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet .
installed=$(date +%s)
echo "plain install: pip install . took $((installed - start)) s"
if "$work/venv/bin/python" -c "import swebench" 2>/dev/null; then
    echo "plain install: swebench is installed, so this is no plain install" >&2
    exit 1
fi
"$work/venv/bin/python" examples/calc/make_repo.py "$work/calc" >/dev/null
cd "$work/calc"
"$work/venv/bin/magis-ray" submit "$root/examples/calc/issue.json" --repo . --store "$work/store" \
    --llm "scripted:$root/examples/calc/script.json" --tests on >"$work/summary.txt" 2>"$work/terminal.txt" ||
    { cat "$work/terminal.txt" "$work/summary.txt" >&2; exit 1; }
submitted=$(date +%s)
run=$(sed -n 's/^run: *//p' "$work/summary.txt")
"$work/venv/bin/magis-ray" events "$run" --store "$work/store" >"$work/events.jsonl"
"$work/venv/bin/python" "$root/.ci/check_submit.py" "plain install" "$work/events.jsonl" "$work/terminal.txt"
echo "plain install: the scripted submit took $((submitted - installed)) s"
