"""A batch of SWE-bench instances on Ray: up to N runs at once, one token budget for all of them,
and resume: a finished instance is skipped, a cut-off one goes on from its log, so running the
same command again after a crash never runs an instance twice."""
from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable

import msgspec
import ray

from magis_ray.events.history import effective
from magis_ray.events.schema import RunFinished, RunSettings, RunStarted

from magis_ray.actors.runtime.continuation import CannotResume, ResumePoint, resume_point
from magis_ray.actors.runtime.deployment import Deployment, RunningRun, batch_budget_key, new_run_id, tokens_spent
from magis_ray.actors.runtime.issue import IssueRecord
from magis_ray.actors.runtime.replay import issue_of
from magis_ray.actors.code.repository import RepoError, RepoSnapshot, find_repo


@dataclass(frozen=True)
class BatchItem:
    """One line of the dataset: an instance, or why it cannot be one."""

    instance_id: str
    issue: IssueRecord | None = None
    error: str = ""


@dataclass(frozen=True)
class BatchResult:
    instance_id: str
    run_id: str = ""
    status: str = ""  # finished, failed, skipped (finished before), error (never started)
    outcome: str = ""  # patched / no_patch, or why it failed
    resumed: bool = False


def runs_by_instance(store, batch: str) -> dict[str, list[tuple[str, list]]]:
    """The batch's earlier runs in the store, per instance id (oldest first)."""
    found: dict[str, list[tuple[str, list]]] = {}
    for info in store.list_runs():
        events = store.read(info.run_id)
        first = events[0].event
        if isinstance(first, RunStarted) and first.settings.batch == batch:
            found.setdefault(first.instance_id, []).append((info.run_id, events))
    return found


class BatchRunner:
    def __init__(self, deployment: Deployment, store, settings: RunSettings, repos_dir: str | None, workers: int,
                 on_result: Callable[[BatchResult], None] = lambda result: None, budget: int = 0):
        """`budget`: the most tokens all the batch's runs may spend, earlier ones included (0: no limit)."""
        self._deployment = deployment
        self._budget = budget
        self._store = store  # read side, in the driver
        self._settings = settings
        self._repos_dir = repos_dir
        self._workers = max(1, workers)
        self._on_result = on_result

    def run(self, items: Iterable[BatchItem]) -> list[BatchResult]:
        earlier = runs_by_instance(self._store, self._settings.batch)
        if self._budget:
            # what is left after the tokens its earlier runs (before a crash, say) already spent
            spent = sum(tokens_spent(events) for runs in earlier.values() for _, events in runs)
            ray.get(self._deployment.gateway.set_budget.remote(batch_budget_key(self._settings.batch), max(self._budget - spent, 1)))
        queue: deque[tuple[BatchItem, str, ResumePoint | None]] = deque()
        results: dict[str, BatchResult] = {}
        order: list[str] = []
        for item in items:
            order.append(item.instance_id)
            verdict = self._plan(item, earlier.get(item.instance_id, []))
            if isinstance(verdict, BatchResult):
                results[item.instance_id] = verdict
                self._on_result(verdict)
            else:
                queue.append(verdict)
        self._run_all(queue, results)
        return [results[i] for i in order if i in results]

    def _plan(self, item: BatchItem, runs: list[tuple[str, list]]):
        """A result now (error, or finished before), or work: (item, run id, resume point or None)."""
        if item.error:
            return BatchResult(item.instance_id, status="error", outcome=item.error)
        for run_id, events in reversed(runs):
            last = effective(events)[-1].event
            if isinstance(last, RunFinished):
                return BatchResult(item.instance_id, run_id, "skipped", last.outcome)
            try:
                return item, run_id, resume_point(events)
            except CannotResume:
                continue  # failed for good: a new run
        return item, new_run_id(), None

    def _start(self, item: BatchItem, run_id: str, point: ResumePoint | None) -> RunningRun | BatchResult:
        issue = issue_of(point.started) if point else item.issue
        try:
            path = find_repo(issue.repo, repo_path=issue.repo_path, repos_dir=self._repos_dir)
            RepoSnapshot.open(path, issue.base_commit)
        except RepoError as exc:
            return BatchResult(item.instance_id, status="error", outcome=str(exc))
        settings = point.started.settings if point else self._settings
        if point is None:
            issue = msgspec.structs.replace(issue, repo_path=os.path.abspath(path))
        return self._deployment.start(
            issue=issue, settings=settings, repo_path=str(path), run_id=run_id,
            recorded=point.recorded if point else None, resume=point,
        )

    def _run_all(self, queue, results: dict[str, BatchResult]) -> None:
        in_flight: dict[object, tuple[BatchItem, RunningRun, bool]] = {}
        try:
            while queue or in_flight:
                while queue and len(in_flight) < self._workers:
                    item, run_id, point = queue.popleft()
                    started = self._start(item, run_id, point)
                    if isinstance(started, BatchResult):
                        results[item.instance_id] = started
                        self._on_result(started)
                    else:
                        in_flight[started.result] = (item, started, point is not None)
                if not in_flight:
                    continue
                [done], _ = ray.wait(list(in_flight), num_returns=1)
                item, run, resumed = in_flight.pop(done)
                end = self._deployment.finish(run)
                result = BatchResult(
                    item.instance_id, run.run_id, "finished" if isinstance(end, RunFinished) else "failed",
                    end.outcome if isinstance(end, RunFinished) else end.reason, resumed,
                )
                results[item.instance_id] = result
                self._on_result(result)
        except KeyboardInterrupt:
            for item, run, resumed in in_flight.values():
                end = self._deployment.interrupt(run)
                results[item.instance_id] = BatchResult(item.instance_id, run.run_id, "failed", end.reason, resumed)
            raise


def batch_settings(settings: RunSettings, batch: str) -> RunSettings:
    """The runs' settings, marked as the batch's (resume finds them by it)."""
    return msgspec.structs.replace(settings, batch=batch)


def read_batch_items(lines: Iterable[bytes], where: str) -> list[BatchItem]:
    """The dataset's lines as items, in order; a line that is no valid issue record becomes an
    error item. (A batch needs no gold patch: evaluation checks for that, actors.swebench.)"""
    from magis_ray.actors.runtime.issue import BadIssue, parse_issue

    items = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            issue = parse_issue(line, f"{where}:{number}")
        except BadIssue as exc:
            items.append(BatchItem(_instance_id_of(line) or f"{where}:{number}", error=str(exc)))
            continue
        items.append(BatchItem(issue.instance_id, issue=issue))
    return items


def _instance_id_of(line: bytes) -> str:
    try:
        value = msgspec.json.decode(line)
    except msgspec.DecodeError:
        return ""
    return value.get("instance_id", "") if isinstance(value, dict) and isinstance(value.get("instance_id"), str) else ""
