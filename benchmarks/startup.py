"""How long `magis-ray submit` takes to start: the time from the command's start to the first role's
event in the store (the first event after RunStarted), for the calc issue with the scripted model
and tests off, idle and beside two busy loops. Three ways, alternating, in this one run:

- old: an earlier checkout's start (its interpreter, --old-python PATH; left out without it):
  there, a Ray of its own, started once, the run id printed before it;
- new: this checkout, a Ray of its own (MAGIS_RAY=own): the model checked first, Ray's start
  retried when it runs out of time;
- warm: this checkout beside a Ray left running by `ray start --head` (MAGIS_RAY=auto).

Reported as ratios to `new`, taken in this one run (the machines are shared and noisy), with how
many submits failed. `--series N` instead runs N `new` submits in a row beside the busy loops and
counts how many succeed.

    python benchmarks/startup.py [--rounds 2] [--loops 2] [--old-python PATH]
    python benchmarks/startup.py --series 13
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the calc project, the busy loops, a Ray head

def first_role_event(store: Path) -> bool:
    from magis_ray.events.schema import RunStarted
    from magis_ray.store import NotAStore, UnknownRun, open_store

    if not (store / "events.sqlite3").exists():
        return False
    try:
        with open_store(str(store)) as s:
            runs = s.list_runs()
            return bool(runs) and any(not isinstance(r.event, RunStarted) for r in s.read(runs[0].run_id))
    except (NotAStore, UnknownRun):
        return False


def one_submit(python: str, issue: Path, base_url: str, folder: Path, env: dict) -> tuple[float | None, bool, str]:
    """(seconds to the first role's event or None, whether the submit succeeded, its stderr's tail)."""
    store = Path(tempfile.mkdtemp(prefix="store-", dir=folder))
    started = time.monotonic()
    proc = subprocess.Popen([python, "-m", "magis_ray.cli.main", "submit", str(issue), "--store", str(store),
                             "--base-url", base_url, "--model", "m"], cwd=folder, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = None
    while proc.poll() is None and seen is None:
        if first_role_event(store):
            seen = time.monotonic() - started
        else:
            time.sleep(0.1)
    _, err = proc.communicate(timeout=1800)
    if seen is None and first_role_event(store):
        seen = time.monotonic() - started  # it ended between two looks: an upper bound
    return seen, proc.returncode == 0, err.strip().splitlines()[-1] if err.strip() else ""


def environment(**extra) -> dict:
    env = {**os.environ, "OPENAI_API_KEY": "k", "MAGIS_LOG_LEVEL": "warning", "MAGIS_TESTS": "off",
           "MAGIS_USER_CONFIG": os.devnull, "RAY_USAGE_STATS_ENABLED": "0", **extra}
    for name in ("OPENAI_BASE_URL", "RAY_ADDRESS"):
        env.pop(name, None)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternations of old, new and warm, idle and loaded")
    parser.add_argument("--loops", type=int, default=2, help="busy loops beside the loaded submits")
    parser.add_argument("--old-python", default="", help="an earlier checkout's interpreter, whose start is measured too")
    parser.add_argument("--series", type=int, default=0, help="instead: this many `new` submits in a row beside the loops")
    args = parser.parse_args()

    from processes import busy_loops
    from rayheads import recorded_head_started
    from scenarios import MEAN_FIX, calc_issue, make_calc_repo, write_issue

    from magis_ray.actors.model.scripted_server import ScriptedServer
    from magis_ray.actors.model.scripted_team import ScriptedTeam

    folder = Path(tempfile.mkdtemp(prefix="magis-startup-"))
    repo, base = make_calc_repo(folder / "calc")
    issue = write_issue(folder / "issue.json", calc_issue(folder / "calc", base))
    own_tmp = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # a Ray temp dir no `ray start --head` recorded itself in
    with ScriptedServer(ScriptedTeam({"calc/stats.py": [MEAN_FIX]})) as server:
        if args.series:
            results = []
            with busy_loops(args.loops):
                for number in range(1, args.series + 1):
                    seen, ok, last = one_submit(sys.executable, issue, server.base_url, folder,
                                                environment(MAGIS_RAY="own", RAY_TMPDIR=str(own_tmp)))
                    results.append(ok)
                    print(f"submit {number}: {'ok' if ok else 'FAILED: ' + last}, first role's event after "
                          f"{seen:.1f} s" if seen is not None else f"submit {number}: {'ok' if ok else 'FAILED: ' + last}",
                          flush=True)
            print(f"{sum(results)} of {len(results)} submits succeeded beside {args.loops} busy loops")
            return
        ways = ("old", "new", "warm") if args.old_python else ("new", "warm")
        times: dict[tuple[str, str], list[float]] = {}
        failures: dict[tuple[str, str], int] = {}
        for round_ in range(args.rounds):
            for load in ("idle", "loaded"):
                with busy_loops(args.loops) if load == "loaded" else nullcontext():
                    for way in ways:
                        with ExitStack() as stack:
                            if way == "warm":
                                head = stack.enter_context(recorded_head_started("magis-warm-"))
                                env = environment(**{k: v for k, v in head.env.items() if k.startswith("RAY_")},
                                                  RAY_TMPDIR=head.root, MAGIS_RAY="auto")
                            else:
                                env = environment(MAGIS_RAY="own", RAY_TMPDIR=str(own_tmp))
                            python = args.old_python if way == "old" else sys.executable
                            seen, ok, last = one_submit(python, issue, server.base_url, folder, env)
                        print(f"round {round_ + 1} {load:6} {way:4}: "
                              + (f"{seen:.1f} s" if seen is not None else "no role event") + ("" if ok else f" FAILED: {last}"),
                              flush=True)
                        if seen is not None and ok:
                            times.setdefault((way, load), []).append(seen)
                        else:
                            failures[(way, load)] = failures.get((way, load), 0) + 1
    print()
    for load in ("idle", "loaded"):
        new = statistics.median(times.get(("new", load), [float("nan")]))
        for way in ways:
            got = times.get((way, load), [])
            median = statistics.median(got) if got else float("nan")
            print(f"{load:6} {way:4}: median {median:6.1f} s over {len(got)}, {failures.get((way, load), 0)} failed; "
                  f"{way}/new = {median / new:.2f}")


if __name__ == "__main__":
    main()
