"""The gradings of .ci/rootless.sh, as the ordinary user: the tests' calc fixture (a SWE-bench-shaped
instance of a repository made with pygit2, graded with a custom --test-cmd) and its checks.

    rootless_grading.py fixture SRC OUT      OUT/repos/calc__calc, OUT/calc.jsonl (one instance),
                                             OUT/ballast.jsonl (a prediction that outgrows its memory)
    rootless_grading.py check STORE NAME EXPECT
                                             the grading NAME's report and details against EXPECT:
                                             "resolved", "unresolved" or "memory"

Every sandbox here must have held its memory budget with the watchdog: the user has no cgroup.
Prints one line; exits non-zero saying what is wrong."""
from __future__ import annotations

import json
import sys
from pathlib import Path

INSTANCE = "calc__calc-1"
# Neither alone is over the budget the script grades it with (--memory 512M): the file in the
# sandbox's /tmp (in memory for an ordinary user) and the process's own pages, counted together.
BALLAST_MB = {"tmp": 320, "process": 256}
BALLAST = f'''import time

with open("/tmp/ballast", "wb") as scratch:
    for _ in range({BALLAST_MB["tmp"]}):
        scratch.write(b"\\1" * (1 << 20))
held = b"\\1" * ({BALLAST_MB["process"]} << 20)
time.sleep(120)
'''


def fixture(src: Path, out: Path) -> None:
    sys.path.insert(0, str(src / "tests"))
    from execfixtures import GOLD, make_calc_repos, new_file_patch, record, write_dataset

    _, base = make_calc_repos(out / "repos")
    write_dataset(out / "calc.jsonl", [record(base)])
    ballast = GOLD + new_file_patch("conftest.py", BALLAST)
    (out / "ballast.jsonl").write_text(json.dumps({"instance_id": INSTANCE, "model_name_or_path": "ballast",
                                                   "model_patch": ballast}) + "\n")


def check(store: Path, name: str, expect: str) -> str:
    report = json.loads((store / "gradings" / f"{name}.json").read_text())
    details = json.loads((store / "gradings" / f"{name}.details.json").read_text())[INSTANCE]
    memory = details.get("memory", {})
    if memory.get("control") != "watchdog":
        sys.exit(f"{name}: the memory budget was held by {memory.get('control') or 'nothing'}, not the watchdog "
                 f"(this user has a cgroup, so this is no run without one): {json.dumps(details)}")
    resolved = INSTANCE in report["resolved_ids"]
    limits = details.get("limits", [])
    if expect == "resolved" and not resolved:
        sys.exit(f"{name}: {INSTANCE} is not resolved: {json.dumps(details)}")
    if expect == "unresolved" and (resolved or not details["completed"]):
        sys.exit(f"{name}: {INSTANCE} should have run its tests and stayed unresolved: {json.dumps(details)}")
    if expect == "memory":
        if resolved or not any(limit.startswith("memory limit reached") for limit in limits):
            sys.exit(f"{name}: the ballast was not stopped at its memory limit: {json.dumps(details)}")
        if memory.get("peak_mb", 0) < max(BALLAST_MB.values()):
            sys.exit(f"{name}: the watchdog saw a peak of {memory.get('peak_mb')} MiB, less than either part of the ballast")
        return (f"{name}: stopped at {memory['peak_mb']} MiB ({limits[0]}; /tmp {BALLAST_MB['tmp']} MiB + "
                f"process {BALLAST_MB['process']} MiB, held by the watchdog)")
    return f"{name}: {'resolved' if resolved else 'unresolved'} (memory held by the watchdog, peak {memory.get('peak_mb')} MiB)"


if __name__ == "__main__":
    if sys.argv[1:2] == ["fixture"] and len(sys.argv) == 4:
        fixture(Path(sys.argv[2]), Path(sys.argv[3]))
    elif sys.argv[1:2] == ["check"] and len(sys.argv) == 5:
        print(check(Path(sys.argv[2]), sys.argv[3], sys.argv[4]))
    else:
        sys.exit(__doc__.split("\n\n")[1])
