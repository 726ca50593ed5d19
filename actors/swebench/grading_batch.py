"""A grading batch, event-sourced: the stream "grading:NAME" in the store holds a GradingStarted
per invocation, an InstanceGradingStarted when an instance is handed to a worker and an
InstanceGraded when its result is in. Running the same command again reads the stream and grades
only the instances without a result for the same patch, so a batch cut off by kill -9 goes on
without grading a finished instance twice. Only the driver appends (workers return results)."""
from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from msgspec.structs import replace

from magis_ray.events.codec import new_event
from magis_ray.events.schema import GradingStarted, InstanceGraded, InstanceGradingStarted
from magis_ray.events.settings import GradeSettings, size_bytes
from magis_ray.events.streams import StreamKind

from magis_ray.actors.execution.sharing.artifacts import BUILT, CACHED, open_artifact_store
from magis_ray.actors.execution.environments import EnvironmentCache
from magis_ray.actors.execution.runner import TestRunner, limits_for_test_runs
from magis_ray.actors.execution.sandbox import open_sandbox
from magis_ray.actors.execution.testbeds import TestbedCache
from .grading import Unprepared, grade, patch_sha, prepare

ACTOR = "grader"


@dataclass(frozen=True)
class Job:
    """A record to work on (a validation's job): what placement and shipping read of any job."""

    record: dict  # the dataset's record

    @property
    def instance_id(self) -> str:
        return self.record["instance_id"]


@dataclass(frozen=True)
class GradeJob(Job):
    patch: str | None  # None: the prediction has no patch
    model: str = ""


@dataclass(frozen=True)
class WorkerOptions:
    """Everything a worker needs besides the job; plain data, so it travels to any Ray node."""

    repos_dir: str
    grade: GradeSettings  # the settings' grade section, whole: sandbox, limits, network, a user's own setup
    pythons: dict = field(default_factory=dict)
    logs_dir: str | None = None
    run_empty: bool = False  # --empty: run the tests without a patch (the grader's own check)
    # The cluster's artifact store ("": none), the same on every node; a node's own cache root is
    # not here: each node resolves its own (node_settings().env_cache)
    artifact_store: str = ""


def testbed_cache(options: WorkerOptions, cache_root: str | None = None, stop: threading.Event | None = None) -> TestbedCache:
    """This node's testbeds, in its own cache (`cache_root`, else the node's setting), sharing
    through the job's artifact store; `stop` ends its builds (Sandbox.stop)."""
    envs = EnvironmentCache(sandbox=open_sandbox(options.grade.sandbox, stop=stop), pythons=dict(options.pythons),
                            artifacts=open_artifact_store(options.artifact_store))
    if cache_root:
        envs.root = Path(cache_root)
    return TestbedCache(envs)


def test_runner(settings: GradeSettings, stop: threading.Event | None = None) -> TestRunner:
    """A grading's test runs: in the settings' sandbox, within their limits, with the network where
    they give it; `stop` ends them (SandboxStopped)."""
    return TestRunner(open_sandbox(settings.sandbox, stop=stop), limits_for_test_runs(settings.timeout, size_bytes(settings.memory)),
                      network=settings.network)


def grade_job(job: GradeJob, options: WorkerOptions, cache_root: str | None = None,
              stop: threading.Event | None = None) -> InstanceGraded:
    """One instance, start to end, on whichever node runs it (its environment cache is that node's);
    `stop` ends its builds and its test run (SandboxStopped)."""
    return grade(job.record, job.patch, options.repos_dir, testbed_cache(options, cache_root, stop),
                 test_runner(options.grade, stop), job.model, options.logs_dir, options.grade, run_empty=options.run_empty)


def grade_after_build(job: GradeJob, options: WorkerOptions, built: dict | None) -> InstanceGraded:
    """The test-run task: grade on this node (the build's); the build task gives the build time."""
    from magis_ray.actors.runtime.remote import this_node

    node, host = this_node()
    return with_build_times(replace(grade_job(job, options), node=node, host=host), built)


def with_build_times(result, built: dict | None):
    """`result` (its environment and testbed PartUse) with what the build task of its job
    reported (build_on_node), where the test-run task found them in the node's cache."""
    if built is None:
        return result
    for name, part in (("environment", "env"), ("testbed", "testbed")):
        use = getattr(result, name)
        if use.obtained == CACHED:
            seconds, built_now, obtained = built[part]
            result = replace(result, **{name: replace(use, build_seconds=seconds, built_now=built_now, obtained=obtained)})
    return result


class Executor(Protocol):
    def start(self, job: GradeJob) -> object: ...
    def next_done(self, handles: list) -> tuple[object, InstanceGraded]: ...
    def close(self) -> None: ...


class ThreadExecutor:
    """In-process workers (threads: the work is in subprocesses); for tests and `--workers` without
    Ray. `work(job, options, cache_root, stop)` does one job (a grading's by default)."""

    def __init__(self, options: WorkerOptions, workers: int, cache_root: str | None = None, work=None) -> None:
        self._options = options
        self._cache_root = cache_root  # this process's node's cache (None: its node setting)
        self._work = work or grade_job
        self._pool = ThreadPoolExecutor(max_workers=workers)
        self._stop = threading.Event()

    def start(self, job):
        return self._pool.submit(self._work, job, self._options, self._cache_root, self._stop)

    def next_done(self, handles: list):
        done, _ = wait(handles, return_when=FIRST_COMPLETED)
        handle = next(iter(done))
        return handle, handle.result()

    def close(self) -> None:
        # Jobs still running (the grading was interrupted) end now: their sandboxed builds and
        # tests are killed, so the process's exit, which waits for the threads, does not wait
        # for them. What they leave is graded again on resume.
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)


class StreamLog:
    """A stream of the store that one driver alone appends to (its workers return results): the
    events it holds, and the one writer."""

    def __init__(self, store, stream: str, actor: str) -> None:
        self.store, self.stream, self.actor = store, stream, actor
        self.version = store.version(stream)
        self.events = [r.event for r in store.read(stream)] if self.version else []

    def append(self, event) -> None:
        recorded = self.store.append(self.stream, self.version, [new_event(event, self.actor)])
        self.version = recorded[-1].version
        self.events.append(event)


class GradingLog(StreamLog):
    """The grading's stream: what is already graded, and how often each instance was handed out."""

    def __init__(self, store, name: str) -> None:
        super().__init__(store, StreamKind.GRADING.stream_id(name), ACTOR)
        self.graded: dict[str, InstanceGraded] = {e.instance_id: e for e in self.events if isinstance(e, InstanceGraded)}
        self.attempts = Counter(e.instance_id for e in self.events if isinstance(e, InstanceGradingStarted))

    def append(self, event) -> None:
        super().append(event)
        if isinstance(event, InstanceGraded):
            self.graded[event.instance_id] = event
        elif isinstance(event, InstanceGradingStarted):
            self.attempts[event.instance_id] += 1


def grading_results(store) -> dict[tuple[str, str], InstanceGraded]:
    """Every grading's latest result in the store, by (instance id, patch sha)."""
    found: dict[tuple[str, str], InstanceGraded] = {}
    for info in store.list_runs():
        if StreamKind.of(info.run_id) is StreamKind.GRADING:
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

    def handed_out(job: GradeJob) -> None:
        log.append(InstanceGradingStarted(job.instance_id, patch_sha(job.patch), log.attempts[job.instance_id] + 1))

    def done(_job: GradeJob, result: InstanceGraded) -> None:
        log.append(result)
        on_result(result, False)

    run_jobs(todo, executor, workers, handed_out, done)
    return [log.graded[job.instance_id] for job in jobs]


def run_jobs(todo: list, executor: Executor, workers: int, handed_out: Callable[[object], None],
             done: Callable[[object, object], None]) -> None:
    """Run the jobs of `todo` on `executor`, up to `workers` at once, each environment's first
    (next_job); `handed_out(job)` as a job starts, `done(job, result)` as it ends. The executor is
    closed at the end, or when this is cut off."""
    in_flight: dict[object, object] = {}
    try:
        while todo or in_flight:
            while todo and len(in_flight) < workers:
                job = todo.pop(next_job(todo, in_flight.values()))
                handed_out(job)
                in_flight[executor.start(job)] = job
            handle, result = executor.next_done(list(in_flight))
            done(in_flight.pop(handle), result)
    finally:
        executor.close()


def preparation_seconds(event: InstanceGraded) -> float:
    """What preparing the instance cost this grading: the builds and fetches it ran (its
    environment's and its testbed's); 0 when both came from the node's cache."""
    return sum(part.build_seconds for part in (event.environment, event.testbed) if part.obtained != CACHED)


def preparation_line(results: list[InstanceGraded]) -> str:
    """Preparation against the tests' own time, over the instances that ran."""
    ran = [r for r in results if r.ran]
    prepared, tested = sum(map(preparation_seconds, ran)), sum(r.run.seconds for r in ran)
    ratio = f"{(prepared + tested) / tested:.2f}" if tested else "-"
    return (f"preparation: {prepared:.0f} s, tests: {tested:.0f} s over {len(ran)} instances; "
            f"(preparation + tests) / tests = {ratio}")


def environment_of(job: GradeJob) -> tuple[str, str]:
    """The environment a job needs, as the dataset names it: (repo, version)."""
    return job.record.get("repo", ""), str(job.record.get("version", ""))


def repository_of(job: GradeJob) -> tuple[str, tuple[str, ...]]:
    """The repository a job needs and the commits its grading reads: (owner/name, commits)."""
    record = job.record
    return record["repo"], tuple(c for c in (record.get("base_commit"), record.get("environment_setup_commit")) if c)


def next_job(todo: list[GradeJob], in_flight) -> int:
    """Which waiting job to start: the first whose environment no running job needs, else the
    first. Builds of different environments then run at once, and the instances of one
    environment, which build one at a time (one waits for the other's environment, then reuses its
    testbed), do not hold the other workers while other environments wait."""
    busy = {environment_of(job) for job in in_flight}
    return next((index for index, job in enumerate(todo) if environment_of(job) not in busy), 0)


def official_report(results: list[InstanceGraded], dataset_ids: list[str], submitted_ids: list[str]) -> dict:
    """The harness's run report (swebench.harness.reporting.make_run_report, run without Docker),
    key for key: `dataset_ids` the instances graded (the dataset, or --instances), `submitted_ids`
    every prediction given. An instance without a result in `results` counts as incomplete."""
    by_id = {r.instance_id: r for r in results}
    submitted = set(submitted_ids)
    completed_ids, resolved_ids, unresolved_ids, error_ids, incomplete_ids, empty_ids = (set() for _ in range(6))
    for instance_id in dataset_ids:
        event = by_id.get(instance_id)
        if instance_id not in submitted or event is None:
            incomplete_ids.add(instance_id)
        elif not event.ran:
            empty_ids.add(instance_id)
        elif event.completed:
            completed_ids.add(instance_id)
            (resolved_ids if event.resolved else unresolved_ids).add(instance_id)
        else:
            error_ids.add(instance_id)
    return {
        "total_instances": len(dataset_ids),
        "submitted_instances": len(submitted),
        "completed_instances": len(completed_ids),
        "resolved_instances": len(resolved_ids),
        "unresolved_instances": len(unresolved_ids),
        "empty_patch_instances": len(empty_ids),
        "error_instances": len(error_ids),
        "completed_ids": sorted(completed_ids),
        "incomplete_ids": sorted(incomplete_ids),
        "empty_patch_ids": sorted(empty_ids),
        "submitted_ids": sorted(submitted),
        "resolved_ids": sorted(resolved_ids),
        "unresolved_ids": sorted(unresolved_ids),
        "error_ids": sorted(error_ids),
        "schema_version": 2,
        # What make_run_report adds when it has no Docker client to ask: no containers, no images.
        "unstopped_instances": 0,
        "unstopped_containers": [],
        "unremoved_images": [],
    }


def instance_details(results: list[InstanceGraded]) -> dict:
    """What the harness's report has no key for, per instance: why it failed, the limits it ran
    into, whether it needs the internet, and where the time went."""
    details = {}
    for r in results:
        entry = {"completed": r.completed, "resolved": r.resolved, "ran": r.ran}
        if r.error_step:
            entry["error"] = {"step": r.error_step, "reason": r.error}
        if r.needs_internet:
            entry["needs_internet"] = True
        for name in ("limits", "warnings"):
            if getattr(r, name):
                entry[name] = list(getattr(r, name))
        env, testbed = r.environment, r.testbed
        entry["environment"] = {"label": env.label, "key": env.key, "built_now": env.built_now,
                                "build_seconds": round(env.build_seconds, 1), "obtained": env.obtained,
                                "testbed": testbed.key, "testbed_built_now": testbed.built_now,
                                "testbed_build_seconds": round(testbed.build_seconds, 1), "testbed_obtained": testbed.obtained}
        entry["test_seconds"] = round(r.run.seconds, 1)
        if r.memory.control:
            entry["memory"] = {"control": r.memory.control, "peak_mb": r.memory.peak_mb}
        details[r.instance_id] = entry
    return details


def prepare_environment(job: GradeJob, options: WorkerOptions) -> dict | None:
    """The build task of a grading job: its environment and testbed on this node (build_on_node);
    None for a prediction that is not run."""
    if job.patch in ("", None) and not options.run_empty:
        return None  # not run at all
    return build_on_node(job.record, options)


def build_on_node(record: dict, options: WorkerOptions) -> dict | None:
    """Build the record's environment and testbed on this node unless they are cached: for each,
    (build seconds, built now, how this node obtained it); None when they cannot be built (the
    test run then says why)."""
    prepared = prepare(record, options.repos_dir, testbed_cache(options), options.grade)
    if isinstance(prepared, Unprepared):
        return None
    env, testbed = prepared.environment, prepared.testbed_use
    return {"env": (env.build_seconds, env.built_now, env.obtained),
            "testbed": (testbed.build_seconds, testbed.built_now, testbed.obtained)}
