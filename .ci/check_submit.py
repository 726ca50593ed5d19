"""The calc example's scripted `submit --tests on`, checked from its log and its terminal: the test
environment was made, the reproduction test ran (and failed on the base commit), the repository's
regression tests ran, the fix's check passed the reproduction test, and the terminal said tests were
on before the team's first step. Prints one line; exits non-zero saying what is missing.

Usage: check_submit.py LABEL EVENTS.jsonl TERMINAL.txt (LABEL starts each line it prints)."""
import json
import sys

label = sys.argv[1]
events = [json.loads(line) for line in open(sys.argv[2])]
tests = [e["event"] for e in events if e["event"]["type"] == "TestsRan"]
by_purpose = {}
for t in tests:
    by_purpose.setdefault(t["purpose"], []).append(t)
terminal = open(sys.argv[3]).read()


def fail(why):
    sys.exit(f"{label}: {why}\n--- terminal ---\n{terminal}")


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
print(f"{label}: {len(tests)} test runs ({', '.join(f'{k} {len(v)}' for k, v in sorted(by_purpose.items()))}); "
      f"reproduction: {', '.join(reproduction[0]['failed'])} failed on the base commit; regression tests: "
      f"{', '.join(sorted({n for t in regression for n in t['passed']}))}")
