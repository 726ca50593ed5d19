"""A grading batch, event-sourced: the stream "grading:NAME" in the store holds a GradingStarted
per invocation, an InstanceGradingStarted when an instance is handed to a worker and an
InstanceGraded when its result is in. Running the same command again reads the stream and grades
only the instances without a result for the same patch, so a batch cut off by kill -9 goes on
without grading a finished instance twice. Only the driver appends (workers return results)."""
from __future__ import annotations

import hashlib
import os
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable, Protocol

from magis_ray.events.codec import new_event
from magis_ray.events.schema import GradingStarted, InstanceGraded, InstanceGradingStarted

from magis_ray.actors.execution.environments import EnvironmentCache
from magis_ray.actors.execution.runner import TestRunner
from magis_ray.actors.execution.sandbox import Limits, Sandbox
from .grading import CustomSetup, GradeResult, grade, spec_for

STREAM_PREFIX = "grading:"
ACTOR = "grader"


def patch_sha(patch: str | None) -> str:
    return "" if patch is None else hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class GradeJob:
    record: dict  # the dataset's record
    patch: str | None  # None: the prediction has no patch
    model: str = ""

    @property
    def instance_id(self) -> str:
        return self.record["instance_id"]


@dataclass(frozen=True)
class GradeOptions:
    """Everything a worker needs besides the job; plain data, so it travels to any Ray node."""

    repos_dir: str
    cache_root: str
    sandbox: str = "bwrap"
    wall_seconds: float = 1800.0
    memory_bytes: int = 8 * 1024 ** 3
    pythons: dict = field(default_factory=dict)
    logs_dir: str | None = None
    custom: CustomSetup | None = None  # the user's --env-setup / --test-cmd instead of SWE-bench's specs


def grade_job(job: GradeJob, options: GradeOptions) -> GradeResult:
    """One instance, start to end, on whichever node runs it (its environment cache is that node's)."""
    cache = EnvironmentCache(options.cache_root, Sandbox(options.sandbox), dict(options.pythons))
    runner = TestRunner(Sandbox(options.sandbox), Limits(wall_seconds=options.wall_seconds, memory_bytes=options.memory_bytes))
    return grade(job.record, job.patch, options.repos_dir, cache, runner, job.model, options.logs_dir, options.custom)


def grade_after_build(job: GradeJob, options: GradeOptions, built: tuple[float, bool] | None) -> GradeResult:
    """The test-run task: grade on this node; the build task that ran just before gives the build time."""
    import socket

    result = grade_job(job, options)
    result.node = socket.gethostname()
    if built is not None and not result.env_built_now:
        result.env_build_seconds, result.env_built_now = built
    return result


def graded_event(result: GradeResult, sha: str) -> InstanceGraded:
    status = result.tests_status or {}
    f2p, p2p = status.get("FAIL_TO_PASS", {}), status.get("PASS_TO_PASS", {})
    return InstanceGraded(
        instance_id=result.instance_id, patch_sha=sha, resolved=result.resolved, model=result.model,
        patch_is_None=result.patch_is_None, patch_exists=result.patch_exists,
        patch_successfully_applied=result.patch_successfully_applied,
        fail_to_pass_success=list(f2p.get("success", [])), fail_to_pass_failure=list(f2p.get("failure", [])),
        pass_to_pass_success=list(p2p.get("success", [])), pass_to_pass_failure=list(p2p.get("failure", [])),
        error_step=result.error_step, error=result.error, env_key=result.env_key, env_label=result.env_label,
        env_build_seconds=result.env_build_seconds, env_built_now=result.env_built_now,
        test_seconds=result.test_seconds, test_exit_code=result.test_exit_code, timed_out=result.timed_out,
        tests_parsed=result.tests_parsed, output_tail=result.output_tail, node=result.node, warnings=list(result.warnings),
    )


class Executor(Protocol):
    def start(self, job: GradeJob) -> object: ...
    def next_done(self, handles: list) -> tuple[object, GradeResult]: ...
    def close(self) -> None: ...


class ThreadExecutor:
    """In-process workers (threads: the work is in subprocesses); for tests and `--workers` without Ray."""

    def __init__(self, options: GradeOptions, workers: int) -> None:
        self._options = options
        self._pool = ThreadPoolExecutor(max_workers=workers)

    def start(self, job: GradeJob):
        return self._pool.submit(grade_job, job, self._options)

    def next_done(self, handles: list):
        done, _ = wait(handles, return_when=FIRST_COMPLETED)
        handle = next(iter(done))
        return handle, handle.result()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class GradingLog:
    """The grading's stream: what is already graded, and the one writer that appends to it."""

    def __init__(self, store, name: str) -> None:
        self.store = store
        self.stream = STREAM_PREFIX + name
        self.version = store.version(self.stream)
        events = [r.event for r in store.read(self.stream)] if self.version else []
        self.graded: dict[str, InstanceGraded] = {e.instance_id: e for e in events if isinstance(e, InstanceGraded)}
        self.attempts = Counter(e.instance_id for e in events if isinstance(e, InstanceGradingStarted))

    def append(self, event) -> None:
        recorded = self.store.append(self.stream, self.version, [new_event(event, ACTOR)])
        self.version = recorded[-1].version
        if isinstance(event, InstanceGraded):
            self.graded[event.instance_id] = event
        elif isinstance(event, InstanceGradingStarted):
            self.attempts[event.instance_id] += 1


def grading_results(store) -> dict[tuple[str, str], InstanceGraded]:
    """Every grading's latest result in the store, by (instance id, patch sha)."""
    found: dict[tuple[str, str], InstanceGraded] = {}
    for info in store.list_runs():
        if info.run_id.startswith(STREAM_PREFIX):
            for rec in store.read(info.run_id):
                if isinstance(rec.event, InstanceGraded):
                    found[(rec.event.instance_id, rec.event.patch_sha)] = rec.event
    return found


def run_grading(store, name: str, jobs: list[GradeJob], executor: Executor, workers: int, started: GradingStarted,
                on_result: Callable[[InstanceGraded, bool], None] = lambda event, skipped: None) -> list[InstanceGraded]:
    """Grade `jobs` (up to `workers` at once), skipping those graded before with the same patch.
    `on_result(event, skipped)` is called once per job. Returns one result per job, in order."""
    log = GradingLog(store, name)
    log.append(started)
    todo = []
    for job in jobs:
        earlier = log.graded.get(job.instance_id)
        if earlier is not None and earlier.patch_sha == patch_sha(job.patch):
            on_result(earlier, True)
        else:
            todo.append(job)
    in_flight: dict[object, GradeJob] = {}
    try:
        while todo or in_flight:
            while todo and len(in_flight) < workers:
                job = todo.pop(0)
                log.append(InstanceGradingStarted(job.instance_id, patch_sha(job.patch), log.attempts[job.instance_id] + 1))
                in_flight[executor.start(job)] = job
            handle, result = executor.next_done(list(in_flight))
            job = in_flight.pop(handle)
            event = graded_event(result, patch_sha(job.patch))
            log.append(event)
            on_result(event, False)
    finally:
        executor.close()
    return [log.graded[job.instance_id] for job in jobs]


def official_report(results: list[InstanceGraded], total: int) -> dict:
    """The harness's run report (its summary keys) with every instance's report entry."""
    ids = lambda pred: sorted(r.instance_id for r in results if pred(r))  # noqa: E731
    completed = lambda r: r.patch_successfully_applied and r.error_step in ("", "tests") and r.tests_parsed > 0  # noqa: E731
    instances = {}
    for r in results:
        entry = {"patch_is_None": r.patch_is_None, "patch_exists": r.patch_exists,
                 "patch_successfully_applied": r.patch_successfully_applied, "resolved": r.resolved}
        if r.patch_successfully_applied and not r.error_step or r.tests_parsed:
            entry["tests_status"] = {
                "FAIL_TO_PASS": {"success": r.fail_to_pass_success, "failure": r.fail_to_pass_failure},
                "PASS_TO_PASS": {"success": r.pass_to_pass_success, "failure": r.pass_to_pass_failure},
            }
        if r.error_step:
            entry["error"] = {"step": r.error_step, "reason": r.error}
        if r.warnings:
            entry["warnings"] = r.warnings
        instances[r.instance_id] = entry
    return {
        "total_instances": total,
        "submitted_instances": len(results),
        "completed_instances": len(ids(completed)),
        "resolved_instances": len(ids(lambda r: r.resolved)),
        "unresolved_instances": len(ids(lambda r: completed(r) and not r.resolved)),
        "empty_patch_instances": len(ids(lambda r: not r.patch_exists)),
        "error_instances": len(ids(lambda r: not completed(r) and r.patch_exists)),
        "completed_ids": ids(completed),
        "resolved_ids": ids(lambda r: r.resolved),
        "unresolved_ids": ids(lambda r: completed(r) and not r.resolved),
        "empty_patch_ids": ids(lambda r: not r.patch_exists),
        "error_ids": ids(lambda r: not completed(r) and r.patch_exists),
        "schema_version": 2,
        "instances": instances,
    }


def default_workers() -> int:
    return max(1, (os.cpu_count() or 2) // 2)


def prepare_environment(job: GradeJob, options: GradeOptions) -> tuple[float, bool] | None:
    """Build the job's environment on this node unless it is cached: (build seconds, built now),
    or None when it cannot be built (the test run then reports why, in its own words)."""
    from pathlib import Path

    from magis_ray.actors.execution.environments import EnvironmentBuildError, EnvironmentUnsupported
    from magis_ray.actors.execution.interpreters import InterpreterMissing
    from magis_ray.actors.execution.specs import HarnessMissing

    repo_path = Path(options.repos_dir) / job.record["repo"].replace("/", "__")
    cache = EnvironmentCache(options.cache_root, Sandbox(options.sandbox), dict(options.pythons))
    try:
        env = cache.get(spec_for(job.record, repo_path, options.custom).recipe, repo_path)
    except (HarnessMissing, KeyError, EnvironmentUnsupported, InterpreterMissing, EnvironmentBuildError):
        return None
    return env.build_seconds, env.built_now
