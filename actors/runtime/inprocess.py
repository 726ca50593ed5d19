"""The team without Ray: every role in this process, a stage's tasks on threads. Used by unit
tests, and the reference the Ray deployment must match."""
from __future__ import annotations

import asyncio
import threading
from typing import Protocol

from magis_ray.store import EventLog, SummaryMemory

from magis_ray.actors.runtime.lanes import Lanes
from magis_ray.actors.roles.developer import Assignment, Developer, TaskResult, candidate_numbers, candidate_temperature, lane_suffix
from magis_ray.actors.roles.manager import parallel
from magis_ray.actors.roles.qa import QAEngineer
from magis_ray.actors.roles.testing import Bench, Tester


def run_task(lanes: Lanes, work: Assignment, reviewer=None, bench: Bench | None = None, candidate: int = 0) -> TaskResult:
    tid, suffix = work.task.task_id, lane_suffix(candidate)
    if reviewer is None:
        reviewer = QAEngineer(lanes(f"qa:{tid}{suffix}"), work.issue_text, work.task.description)
    asker = lanes(f"developer:{tid}{suffix}", candidate_temperature(candidate))
    return Developer(work, asker, reviewer, Tester(asker.journal, bench), candidate).run()


class ThreadWorkforce:
    def __init__(self, lanes: Lanes, bench: Bench | None = None):
        self._lanes = lanes
        self._bench = bench

    def prepare(self, tasks) -> None:
        pass  # roles in this process are made when their stage comes

    def run_stage(self, assignments: list[Assignment]) -> list[TaskResult]:
        jobs = [(work, candidate) for work in assignments for candidate in candidate_numbers(work)]
        return parallel(jobs, lambda job: run_task(self._lanes, job[0], bench=self._bench, candidate=job[1]))


class LocalLLM:
    """The async Gateway behind a synchronous port, on an event loop of its own thread."""

    def __init__(self, gateway):
        self._gateway = gateway
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="gateway-loop", daemon=True).start()

    def exchange(self, **request):
        return asyncio.run_coroutine_threadsafe(self._gateway.exchange(**request), self._loop).result()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


class LogAndMemory(EventLog, SummaryMemory, Protocol):
    """What a run in this process uses of a store: its log, and the Custodian's memory."""


def run_in_process(*, store: LogAndMemory, issue, settings, repo_path: str, llm, run_id: str, recorded=None, bench: Bench | None = None):
    """One run with every role in this process; returns the terminal event."""
    from magis_ray.actors.runtime.journal import RunWriter, lanes_of
    from magis_ray.actors.code.repository import RepoSnapshot
    from magis_ray.actors.roles.custodian import Custodian
    from magis_ray.actors.runtime.team import Team
    from magis_ray.events.projections import final_diff, fold

    snapshot = RepoSnapshot.open(repo_path, issue.base_commit)
    lanes = Lanes(run_id, RunWriter(store, run_id), llm, lanes_of(recorded or []))
    custodian = Custodian(snapshot, store, lanes, issue.repo, settings)
    team = Team(issue=issue, settings=settings, snapshot=snapshot, asker_for=lanes, custodian=custodian,
                workforce=ThreadWorkforce(lanes, bench), bench=bench,
                projected_diff=lambda: final_diff(fold(store.read(run_id))))
    return team.run()
