"""Progress while a run works: a line when its phase changes, and a heartbeat while a phase stays
quiet (an environment built for minutes, a slow model), so a long `submit` never looks hung. The
phase is the one the run lists and the inspector show (RunSummary.stage, folded from the log), read
from the store as the run appends: the driver needs no hook and the log no extra event. Plain
lines, no escape sequences, on stderr: stdout keeps the summary scripts read.

Whether the run's tests run, and if not why, is said as soon as the log decides it: at RunStarted
(`--tests off`) or at the test environment's preparation, which the team does before any role
acts."""
from __future__ import annotations

import sys
import threading
import time
from typing import Callable, TextIO

from magis_ray.events.projections.catalog import RunSummary

from .wording import count, duration

HEARTBEAT_S = 30.0  # a quiet phase is mentioned again this often
POLL_S = 1.0


class PhaseTicker:
    """What to print about a run's phase at `now`: its name when it changes, then every
    `heartbeat_s` the same name with how long it has lasted and the model calls so far. Pure: the
    caller folds the log and owns the clock. `waiting` names the time before the log's first event."""

    def __init__(self, heartbeat_s: float = HEARTBEAT_S, waiting: str = "") -> None:
        self.heartbeat_s, self.waiting = heartbeat_s, waiting
        self.stage, self.since, self.said = "", 0.0, 0.0
        self.tests = ""  # the tests decision said last

    def tick(self, summary: RunSummary, now: float) -> list[str]:
        lines = []
        if summary.tests_decision and summary.tests_decision != self.tests:
            self.tests = summary.tests_decision
            lines.append(tests_line(summary.tests_decision))
        if summary.ended:
            return lines  # the summary speaks now
        stage = summary.stage or (self.waiting if not summary.events else "")
        if stage and stage != self.stage:
            self.stage, self.since, self.said = stage, now, now
            return [*lines, f"  {stage}"]
        if lines:
            return lines
        if self.stage and now - self.said >= self.heartbeat_s:
            self.said = now
            calls = f"; {count(summary.calls, 'model call')} so far" if summary.calls else ""
            return [f"  {self.stage} ({duration(now - self.since)}{calls})"]
        return []


def tests_line(decision: str) -> str:
    """The terminal's line for a tests decision (events/projections/tests.tests_decision): a notice
    when tests are on by the settings but cannot run."""
    if decision.startswith("off for this run"):
        return f"magis-ray: notice: tests {decision}"
    return f"  tests {decision}"


class Progress:
    """Follows run `run_id` in the store at `store_path` on a thread of its own while the caller
    drives the run; a context manager, so the lines stop before the summary is printed."""

    def __init__(self, store_path: str, run_id: str, out: TextIO | None = None, *, waiting: str = "",
                 heartbeat_s: float = HEARTBEAT_S, poll_s: float = POLL_S,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.store_path, self.run_id, self.out = store_path, run_id, out or sys.stderr
        self.ticker, self.poll_s, self.now = PhaseTicker(heartbeat_s, waiting), poll_s, now
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"progress-{run_id}", daemon=True)

    def __enter__(self) -> "Progress":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _follow(self) -> None:
        from magis_ray.store import UnknownRun, open_store

        summary, version, stopping = RunSummary(self.run_id), 0, False
        store = open_store(self.store_path)
        try:
            while True:
                try:
                    for rec in store.read(self.run_id, version):
                        version = rec.version
                        summary.apply(rec)
                except UnknownRun:  # the team has not written its first event yet
                    pass
                lines = self.ticker.tick(summary, self.now())
                if lines:
                    self.out.write("\n".join(lines) + "\n")
                    self.out.flush()
                if stopping:
                    return
                self._stop.wait(self.poll_s)
                stopping = self._stop.is_set()  # one more read: what the run wrote last is said too
        finally:
            store.close()
