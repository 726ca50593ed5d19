"""How fast the inspector answers: server time for the runs list of a store of 1,000 runs, and
for the page of a run of 5,000 events, against a goal of 1 s each (ratio = time / goal, < 1 meets it).

    python benchmarks/inspector.py [--runs 1000] [--events 5000] [--rounds 5]

The store is a real SQLite file: 1,000 copies of tests/runs.py's constructed run (58 events each,
one in five still running, spread over batches and models), plus one run of 5,000 events (313
tasks, each with exchanges, a rejected and an approved patch, and test runs). A real
`magis-ray serve` process answers plain HTTP GETs on loopback; each figure is the median of
--rounds requests, timed from the request to the last byte. Also printed: how long the server
takes to read the store at start, and the first and a later full-text search.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the calc fixture project and the constructed run

from inspecting import serve, with_settings  # noqa: E402
from runs import constructed_run, fixed_new_events, repo_for  # noqa: E402

from magis_ray.events import schema as ev  # noqa: E402
from magis_ray.events.codec import new_event  # noqa: E402
from magis_ray.store.sqlite import SQLiteStore  # noqa: E402

GOAL_S = 1.0
BIG_RUN = "big000000001"


def big_run(events: int) -> list[ev.NewEvent]:
    """A run of at least `events` events: RunStarted, a plan, then tasks of 16 events each."""
    out = [new_event(ev.RunStarted(instance_id="big__big-1", repo="big/big", base_commit="c" * 40, problem_statement="Many files."), "supervisor")]
    tasks = max(1, -(-(events - 3) // 16))
    ids = [f"T{i}" for i in range(1, tasks + 1)]
    out.append(new_event(ev.PlanMade(stages=[ids[i:i + 10] for i in range(0, tasks, 10)]), "manager"))

    def x(purpose: str, tid: str, answer: str) -> ev.NewEvent:
        return new_event(ev.LLMExchanged(purpose=purpose, model="gpt-4o-mini", messages=[ev.Message("system", "You are a developer."),
                         ev.Message("user", f"{purpose} for {tid}: " + "def f(x):\n    return x\n" * 40)], answer=answer,
                         prompt_tokens=900, completion_tokens=60, latency_s=1.1, cost_usd=0.0002, task_id=tid), f"developer:{tid}")

    diff = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n def f(x):\n-    return x\n+    return x + 1\n"
    for tid in ids:
        dev, qa = f"developer:{tid}", f"qa:{tid}"
        out.append(new_event(ev.TaskDefined(task_id=tid, path=f"pkg/{tid}.py", description=f"Fix {tid}."), "manager"))
        for attempt, approved in ((1, False), (2, True)):
            out += [x("locate_lines", tid, '{"ranges": [{"start": 1, "end": 2}]}'),
                    new_event(ev.LinesLocated(task_id=tid, attempt=attempt, ranges=[ev.LineRange(1, 2)]), dev),
                    x("write_code", tid, '{"edits": []}'),
                    new_event(ev.PatchProposed(task_id=tid, attempt=attempt, path=f"pkg/{tid}.py", base_blob_id="b" * 40, edits=[],
                                               new_text="def f(x):\n    return x + 1\n", diff=diff), dev),
                    new_event(ev.TestsRan(purpose="check", command="pytest -q", outcome="passed" if approved else "failed",
                                          task_id=tid, attempt=attempt, passed=["t::a"], failed=[] if approved else ["t::b"],
                                          output="1 passed" if approved else "1 failed, 1 passed", duration_s=0.8), "supervisor"),
                    x("review_patch", tid, '{"approved": true}'),
                    new_event(ev.ReviewIssued(task_id=tid, attempt=attempt, approved=approved, comment="ok" if approved else "not yet"), qa)]
        out += [new_event(ev.TaskFinished(task_id=tid, status="approved", attempts=2), dev)]
    out.append(new_event(ev.RunFinished(outcome="patched", files_changed=[f"pkg/{t}.py" for t in ids]), "supervisor"))
    return out


def make_store(root: Path, runs: int, events: int) -> Path:
    repo, base = repo_for(root)
    finished = fixed_new_events(constructed_run(repo, base))
    path = root / "store"
    with SQLiteStore.open(path, create=True) as store:
        for i in range(runs):
            pairs = with_settings(constructed_run(repo, base), batch=f"batch-{i % 10}", model=("gpt-4o-mini", "gpt-4o")[i % 2])
            stream = fixed_new_events(pairs, start=1_700_000_000.0 + 100 * i, id_prefix=f"{i:06x}")
            if i % 5 == 4:
                stream = stream[: len(finished) // 2]  # still running
            store.append(f"run{i:08d}", 0, stream)
        store.append(BIG_RUN, 0, big_run(events))
    return path


def timed(url: str) -> tuple[float, int]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read()
    return time.perf_counter() - start, len(body)


def median_of(url: str, rounds: int) -> tuple[float, int]:
    timed(url)  # one warm-up
    samples = [timed(url) for _ in range(rounds)]
    return statistics.median(s for s, _ in samples), samples[0][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = make_store(Path(tmp), args.runs, args.events)
        with SQLiteStore.open(path) as store:
            total = len(store.read_all())
            big = store.version(BIG_RUN)
        print(f"store: {args.runs} runs + one of {big} events, {total:,} events in all, "
              f"{(path / 'events.sqlite3').stat().st_size / 1e6:.0f} MB (made in {time.perf_counter() - t0:.1f} s)")
        t0 = time.perf_counter()
        with serve(path) as base:
            timed(base + "?limit=1")  # answered once the catalog is read
            started = time.perf_counter() - t0
            list_s, list_bytes = median_of(base + "?limit=100000", args.rounds)
            run_s, run_bytes = median_of(f"{base}runs/{BIG_RUN}", args.rounds)
            first_search, _ = timed(f"{base}search?q=rejected+mean")
            later_search, _ = median_of(f"{base}search?q=rejected+mean", args.rounds)
        print(f"server start to its first page (the process starts, reads the whole log into the catalog): {started:.2f} s")
        print(f"runs list of {args.runs + 1} runs: {list_s * 1000:.0f} ms ({list_bytes / 1e6:.1f} MB of HTML); "
              f"ratio to the {GOAL_S:.0f} s goal: {list_s / GOAL_S:.2f}" + ("" if list_s < GOAL_S else "  MISSED"))
        print(f"run page of {big} events: {run_s * 1000:.0f} ms ({run_bytes / 1e6:.1f} MB of HTML); "
              f"ratio to the {GOAL_S:.0f} s goal: {run_s / GOAL_S:.2f}" + ("" if run_s < GOAL_S else "  MISSED"))
        print(f"search: first {first_search:.2f} s (indexes all {total:,} events), later {later_search * 1000:.0f} ms")


if __name__ == "__main__":
    main()
