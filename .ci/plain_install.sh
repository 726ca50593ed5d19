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
"$work/venv/bin/python" - "$work/events.jsonl" "$work/terminal.txt" <<'EOF'
import json
import sys

events = [json.loads(line) for line in open(sys.argv[1])]
tests = [e["event"] for e in events if e["event"]["type"] == "TestsRan"]
by_purpose = {}
for t in tests:
    by_purpose.setdefault(t["purpose"], []).append(t)
terminal = open(sys.argv[2]).read()


def fail(why):
    sys.exit(f"plain install: {why}\n--- terminal ---\n{terminal}")


prepare = by_purpose.get("prepare", [{}])[0]
if prepare.get("outcome") != "passed":
    fail(f"no test environment: {prepare.get('output')}")
reproduction = [t for t in by_purpose.get("reproduce", []) if "test_magis_reproduction.py" in " ".join(t["failed"] + t["passed"])]
if not reproduction:
    fail("no run of the reproduction test")
regression = [t for t in by_purpose.get("baseline", []) + by_purpose.get("check", [])
              if any(name.startswith("tests/test_stats.py::") for name in t["passed"] + t["failed"])]
if not regression:
    fail("no run of the repository's regression tests (tests/test_stats.py)")
checks = by_purpose.get("check", [])
if not any(t["outcome"] == "passed" and any("test_magis_reproduction.py::" in n for n in t["passed"]) for t in checks):
    fail("the fix's check did not pass its reproduction test")
# The progress line shows the stage it finds when it looks, so a quick Custodian may go unseen: the
# decision must come before whichever role's step is shown first.
said = terminal.find("  tests on: ")
steps = [at for at in (terminal.find(word) for word in ("custodian", "manager", "kick-off", "stage ", "reproduction test")) if at >= 0]
if said < 0 or (steps and said > min(steps)):
    fail("the terminal did not say that tests run before the team's first step")
print(f"plain install: {len(tests)} test runs ({', '.join(f'{k} {len(v)}' for k, v in sorted(by_purpose.items()))}); "
      f"reproduction: {', '.join(reproduction[0]['failed'])} failed on the base commit; regression tests: "
      f"{', '.join(sorted({n for t in regression for n in t['passed']}))}")
EOF
echo "plain install: the scripted submit took $((submitted - installed)) s"
