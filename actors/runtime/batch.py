"""A batch of SWE-bench instances on Ray: up to N runs at once, one token budget for all of them,
and resume: a finished instance is skipped, a cut-off one goes on from its log, so running the
same command again after a crash never runs an instance twice."""
from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable

import msgspec
import ray

from magis_ray.events.history import effective
from magis_ray.events.schema import RunFinished, RunSettings, RunStarted
from magis_ray.store import EventLog

from magis_ray.actors.code.repository import RepoError, RepoSnapshot, find_repo
from magis_ray.actors.runtime.continuation import CannotResume, ResumePoint, resume_point
from magis_ray.actors.runtime.deployment import (INTERRUPTED, Deployment, RunningRun, batch_budget_key, new_run_id,
                                                 tokens_spent)
from magis_ray.actors.runtime.issue import IssueRecord
from magis_ray.actors.runtime.liveness import RunIsLive
from magis_ray.actors.runtime.replay import issue_of
from magis_ray.actors.runtime.team import one_line


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


class EarlierRuns:
    """The batch's runs in the store, per instance id (oldest first), re-read only where a run
    changed: another driver (a second batch of the same name, a resume) may be adding to them."""

    def __init__(self, store: EventLog, batch: str):
        self._store, self._batch = store, batch
        self._seen: dict[str, tuple[int, list]] = {}  # run id -> (version, events), for the batch's runs
        self._others: set[str] = set()  # runs of other batches, never read again

    def refresh(self) -> dict[str, list[tuple[str, list]]]:
        for info in self._store.list_runs():
            if info.run_id in self._others or self._seen.get(info.run_id, (-1,))[0] == info.version:
                continue
            events = self._store.read(info.run_id)
            first = events[0].event
            if isinstance(first, RunStarted) and first.settings.batch == self._batch:
                self._seen[info.run_id] = (info.version, events)
            else:
                self._others.add(info.run_id)
        found: dict[str, list[tuple[str, list]]] = {}
        for run_id, (_, events) in self._seen.items():
            found.setdefault(events[0].event.instance_id, []).append((run_id, events))
        return found


def instance_key(batch: str, instance_id: str) -> str:
    """The lease a batch driver holds while it decides on and drives one of its instances."""
    return f"batch:{batch}:{instance_id}"


class BatchRunner:
    def __init__(self, deployment: Deployment, store: EventLog, settings: RunSettings, repos_dir: str | None, workers: int,
                 on_result: Callable[[BatchResult], None] = lambda result: None, budget: int = 0):
        """`budget`: the most tokens all the batch's runs may spend, earlier ones included (0: no limit)."""
        self._deployment = deployment
        self._liveness = deployment.liveness
        self._budget = budget
        self._store = store  # read side, in the driver
        self._settings = settings
        self._repos_dir = repos_dir
        self._workers = max(1, workers)
        self._on_result = on_result
        self._earlier = EarlierRuns(store, settings.batch)

    def run(self, items: Iterable[BatchItem]) -> list[BatchResult]:
        earlier = self._earlier.refresh()
        if self._budget:
            # what is left after the tokens its earlier runs (before a crash, say) already spent
            spent = sum(tokens_spent(events) for runs in earlier.values() for _, events in runs)
            ray.get(self._deployment.gateway.set_budget.remote(batch_budget_key(self._settings.batch), max(self._budget - spent, 1)))
        queue: deque[BatchItem] = deque()
        results: dict[str, BatchResult] = {}
        order: list[str] = []
        for item in items:
            order.append(item.instance_id)
            if item.error:
                self._record(results, BatchResult(item.instance_id, status="error", outcome=item.error))
            else:
                queue.append(item)
        self._run_all(queue, results)
        return [results[i] for i in order if i in results]

    def _record(self, results: dict[str, BatchResult], result: BatchResult) -> None:
        results[result.instance_id] = result
        self._on_result(result)

    def _plan(self, item: BatchItem, runs: list[tuple[str, list]]):
        """A result now (finished before), or work: (run id, resume point or None)."""
        for run_id, events in reversed(runs):
            last = effective(events)[-1].event
            if isinstance(last, RunFinished):
                return BatchResult(item.instance_id, run_id, "skipped", last.outcome)
            try:
                return run_id, resume_point(events)
            except CannotResume:
                continue  # failed for good: a new run
        return new_run_id(), None

    def _claim(self, item: BatchItem) -> tuple[RunningRun, bool] | BatchResult | None:
        """Start the item's run, or its result, or None when another driver is at it (wait).
        The item is decided on only once its lease is held, from the store as it is then, so two
        drivers of one batch never run an instance twice."""
        key = instance_key(self._settings.batch, item.instance_id)
        if self._liveness.try_take(key).owner != self._liveness.owner:
            return None
        started: RunningRun | BatchResult | None = None
        try:
            verdict = self._plan(item, self._earlier.refresh().get(item.instance_id, []))
            if isinstance(verdict, BatchResult):
                started = verdict
            else:
                run_id, point = verdict
                started = self._start(item, run_id, point)
                if isinstance(started, RunningRun):
                    return started, point is not None
        except RunIsLive:  # `magis-ray resume` drives the run now
            started = None
        except Exception as exc:  # noqa: BLE001 - one instance's failure never stops the batch
            started = BatchResult(item.instance_id, status="error", outcome=one_line(exc))
        self._liveness.release(key)
        return started

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

    def _end(self, item: BatchItem, run: RunningRun, resumed: bool) -> BatchResult:
        try:
            end = self._deployment.finish(run)
        except Exception as exc:  # noqa: BLE001 - taken over, or its supervisor died: this instance only
            return BatchResult(item.instance_id, run.run_id, "failed", one_line(exc), resumed)
        finally:
            self._liveness.release(instance_key(self._settings.batch, item.instance_id))
        return BatchResult(
            item.instance_id, run.run_id, "finished" if isinstance(end, RunFinished) else "failed",
            end.outcome if isinstance(end, RunFinished) else end.reason, resumed,
        )

    def _run_all(self, queue: deque[BatchItem], results: dict[str, BatchResult]) -> None:
        in_flight: dict[object, tuple[BatchItem, RunningRun, bool]] = {}
        waiting: list[BatchItem] = []  # another driver has them: asked again each round
        poll = min(1.0, self._liveness.ttl_s / 3)
        try:
            while queue or waiting or in_flight:
                while queue and len(in_flight) < self._workers:
                    item = queue.popleft()
                    claimed = self._claim(item)
                    if claimed is None:
                        waiting.append(item)
                    elif isinstance(claimed, BatchResult):
                        self._record(results, claimed)
                    else:
                        run, resumed = claimed
                        in_flight[run.result] = (item, run, resumed)
                if in_flight:
                    ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=poll)
                    ready += [ref for ref, (_, run, _) in in_flight.items() if ref not in ready and self._deployment.lost(run)]
                    for ref in ready:
                        item, run, resumed = in_flight.pop(ref)
                        self._record(results, self._end(item, run, resumed))
                elif waiting:
                    time.sleep(poll)  # nothing of ours runs: the other drivers' runs are what we wait for
                queue.extend(waiting)
                waiting.clear()
        except KeyboardInterrupt:
            for item, run, resumed in in_flight.values():
                self._deployment.interrupt(run)
                results[item.instance_id] = BatchResult(item.instance_id, run.run_id, "failed", INTERRUPTED, resumed)
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
