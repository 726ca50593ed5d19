"""Grading as a service: SWE-bench grading without Docker, from options to report, for any caller.

`plan_grading(options)` checks the input and says what will be graded: the dataset's records, the
predictions (a file of magis-ray's or any other system's, or the dataset's own patches with `gold`,
or none with `empty`), one job an instance, the grading's name. `run_grading_plan(plan)` grades the
jobs as Ray tasks (or threads), records every result in the grading's stream of the store (so the
same options after a crash grade only what was not finished), and writes the harness's report and
our details beside the instances' logs. Presentation stays with the caller: it is told of notices
and of each result as it comes, and gets a typed outcome back."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

import msgspec

from magis_ray.events.errors import BadInput
from magis_ray.events.schema import GradingStarted, InstanceGraded
from magis_ray.events.settings import GradeSettings, set_node_setting, size_bytes

from .grading import custom_setup
from .grading_batch import GradeJob, ThreadExecutor, WorkerOptions, instance_details, official_report, run_grading


class GradingInputError(BadInput):
    """Input a grading cannot use, said in one line. `setting` names the setting at fault when the
    line is about its value (a key of the settings: "grade.memory", "artifact-store", "repos-dir"),
    so that the command can say it as the user gave it; "" when the line says it all."""

    def __init__(self, message: str, setting: str = "") -> None:
        super().__init__(message)
        self.setting = setting


class GradingOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What a grading is asked to do: what is graded and where (its own fields), and how (the
    settings' grade section, whole)."""

    dataset: str  # the SWE-bench dataset (.jsonl or .json)
    repos_dir: str  # a folder of owner__name repositories
    store: str  # the store's folder: the grading's stream, and its report and logs under gradings/
    # What is graded: the predictions file's patches, the dataset's own (gold: the grader's fidelity
    # check), or none at all (empty: the grader's check that nothing resolves without a fix).
    patches: Literal["predictions", "gold", "empty"] = "predictions"
    predictions: str = ""  # the predictions file, for patches="predictions"
    instances: tuple[str, ...] = ()  # only these instance ids (none: every one)
    name: str = ""  # the grading's name in the store ("": from the predictions and the dataset)
    grade: GradeSettings = GradeSettings()  # how: sandbox, timeout, memory, workers, network, a user's setup
    pythons: dict[str, str] = {}  # interpreters to use: version ("" for any) -> path
    # this machine's environment cache, for the workers this process runs (threads, or a Ray it
    # starts of its own); a cluster's nodes each use their own (MAGIS_ENV_CACHE). None: the node's.
    env_cache: str | None = None
    artifact_store: str = ""  # the cluster's shared store of built environments and testbeds ("": none)
    report: str | None = None  # where the report goes (None: STORE/gradings/NAME.json)
    use_ray: bool = True  # Ray tasks; False: threads of this process


@dataclass(frozen=True)
class GradingPlan:
    """A grading whose input is checked: what it grades, and where its records go."""

    name: str
    jobs: list[GradeJob]
    workers: int  # as many as the machine's memory holds at the budget
    worker_options: WorkerOptions
    started: GradingStarted
    dataset_ids: list[str]  # the instances graded (the dataset, or the chosen ones)
    submitted_ids: list[str]  # every instance with a prediction
    logs_dir: Path
    report_path: Path
    store: str
    use_ray: bool
    cache_root: str | None = None  # this machine's environment cache (None: its node setting)


class GradingOutcome(msgspec.Struct, frozen=True):
    """A grading done: a result an instance, in the dataset's order, and what was written."""

    name: str
    results: list[InstanceGraded]
    report: dict  # the harness's run report, key for key
    report_path: str
    details_path: str  # what the harness's report has no key for (instance_details)
    logs_dir: str  # the instances' logs, laid out as the harness lays them out


def ignore(*_args) -> None:
    """The default listener: told nothing."""


def plan_grading(options: GradingOptions, notice: Callable[[str], None] = ignore) -> GradingPlan:
    """The grading `options` ask for, checked: GradingInputError (one line) for input it cannot
    use, HarnessMissing when SWE-bench's specs are needed and the swebench package is absent,
    SandboxUnavailable when the sandbox cannot run here. `notice` hears what was decided for the
    caller (fewer workers than asked, dataset lines passed over)."""
    grade = options.grade
    if options.patches == "predictions" and not options.predictions:
        raise GradingInputError("no predictions file given")
    workers = checked_setup(grade, options.repos_dir, options.artifact_store, notice, needs_harness=not custom_setup(grade))
    repos = Path(options.repos_dir)
    dataset = Path(options.dataset)
    records = load_records(dataset, notice)
    if options.instances:
        unknown = sorted(set(options.instances) - set(records))
        if unknown:
            raise GradingInputError(f"not in {dataset.name}: {', '.join(unknown)}")
    chosen = [records[i] for i in records if not options.instances or i in options.instances]
    if options.patches != "predictions":
        source = options.patches
        jobs = [GradeJob(r, r["patch"] if source == "gold" else "", source) for r in chosen]
        submitted = list(records)
        name = options.name or f"{source}@{dataset.stem}"
    else:
        predictions = Path(options.predictions)
        preds = load_predictions(predictions)
        unknown = sorted(set(preds) - set(records))
        if unknown:
            raise GradingInputError(f"{predictions.name}: instances not in {dataset.name}: {', '.join(unknown[:5])}")
        source = str(predictions)
        jobs = [GradeJob(records[i], preds[i].get("model_patch"), str(preds[i].get("model_name_or_path", "")))
                for i in records if i in preds and (not options.instances or i in options.instances)]
        submitted = list(preds)
        name = options.name or f"{predictions.stem}@{dataset.stem}"
    logs_root = Path(options.store) / "gradings" / name
    worker_options = WorkerOptions(repos_dir=str(repos.resolve()), grade=grade, artifact_store=options.artifact_store,
                                   pythons=dict(options.pythons), logs_dir=str((logs_root / "logs").resolve()),
                                   run_empty=options.patches == "empty")
    started = GradingStarted(name=name, dataset=str(dataset), predictions=source, instances=[j.instance_id for j in jobs],
                             sandbox=grade.sandbox, workers=workers, timeout_s=grade.timeout,
                             memory_mb=size_bytes(grade.memory) // 2 ** 20, network=grade.network)
    return GradingPlan(name=name, jobs=jobs, workers=workers, worker_options=worker_options, started=started,
                       dataset_ids=[r["instance_id"] for r in chosen], submitted_ids=submitted,
                       logs_dir=logs_root / "logs", report_path=Path(options.report or logs_root.parent / f"{name}.json"),
                       store=options.store, use_ray=options.use_ray,
                       cache_root=str(Path(options.env_cache).expanduser().resolve()) if options.env_cache else None)


def checked_setup(grade: GradeSettings, repos_dir: str, artifact_store: str, notice: Callable[[str], None] = ignore,
                  needs_harness: bool = True) -> int:
    """What every grading's test runs need, checked (GradingInputError, HarnessMissing,
    SandboxUnavailable): the memory for at least one worker at the budget, the repositories'
    folder, the artifact store, the harness, the sandbox. How many workers the memory holds."""
    from magis_ray.actors.execution.sharing.artifacts import ArtifactStoreUnusable, open_artifact_store
    from magis_ray.actors.execution.sandbox.memory_budget import workers_within_memory
    from magis_ray.actors.execution.sandbox import open_sandbox
    from magis_ray.actors.code.swebench_harness import harness

    workers, note = workers_within_memory(grade.workers, size_bytes(grade.memory))
    if not workers:
        raise GradingInputError(note, "grade.memory")
    if note:
        notice(note)
    if not Path(repos_dir).is_dir():
        raise GradingInputError("not a folder", "repos-dir")
    try:
        open_artifact_store(artifact_store)
    except ArtifactStoreUnusable as exc:
        raise GradingInputError(exc.reason, "artifact-store") from None
    if needs_harness:
        harness()
    open_sandbox(grade.sandbox).check()
    return workers


def start_ray(plan) -> None:
    """The Ray that runs the plan (a grading's, or a validation's): the cluster RAY_ADDRESS names
    (under `ray job submit`), else a Ray of our own; nothing when the plan runs in this process's
    threads or Ray is up already."""
    if not plan.use_ray:
        return
    from magis_ray.actors.runtime.deployment import ensure_ray

    if plan.cache_root:
        # A Ray of our own inherits this process's environment: its workers take this node's
        # cache from there. A cluster's nodes keep their own.
        set_node_setting("env_cache", plan.cache_root)
    ensure_ray()


def executor_for(plan, build, run_after_build, work):
    """The plan's workers (a grading's, or a validation's): Ray tasks, a build task
    (`build(job, options)`) then a test task (`run_after_build(job, options, built)`) on its node,
    placed by the environment they need; else this process's threads, each doing `work`."""
    from .grading_batch import environment_of, repository_of

    if plan.use_ray:
        from magis_ray.actors.runtime.remote import RayExecutor

        start_ray(plan)
        return RayExecutor(plan.worker_options, build, run_after_build, environment_of, repository_of)
    return ThreadExecutor(plan.worker_options, plan.workers, plan.cache_root, work)


def run_grading_plan(plan: GradingPlan,
                     on_result: Callable[[InstanceGraded, bool], None] = ignore) -> GradingOutcome:
    """Grade the plan's jobs, `plan.workers` at once, skipping those its stream holds a result of for
    the same patch; `on_result(result, skipped)` once a job. Writes the report and the details."""
    from magis_ray.store import open_store

    from .grading_batch import grade_after_build, grade_job, prepare_environment

    executor = executor_for(plan, prepare_environment, grade_after_build, grade_job)
    open_store(plan.store, create=True).close()
    with open_store(plan.store) as store:
        results = run_grading(store, plan.name, plan.jobs, executor, plan.workers, plan.started, on_result)
    report = official_report(results, plan.dataset_ids, plan.submitted_ids)
    plan.report_path.parent.mkdir(parents=True, exist_ok=True)
    plan.report_path.write_text(json.dumps(report, indent=4))
    details = plan.report_path.with_suffix(".details.json")
    details.write_text(json.dumps(instance_details(results), indent=2))
    return GradingOutcome(name=plan.name, results=results, report=report, report_path=str(plan.report_path),
                          details_path=str(details), logs_dir=str(plan.logs_dir))


def load_records(dataset: Path, notice: Callable[[str], None] = ignore) -> dict[str, dict]:
    """The dataset's records by instance id, as the dataset holds them; each entry that is no
    instance is passed over and said to `notice`."""
    from .instances import load_dataset

    try:
        instances, errors = load_dataset(dataset)
    except (OSError, ValueError) as exc:
        raise GradingInputError(f"cannot read the dataset {dataset}: {exc}") from None
    for error in errors:
        notice(f"{dataset.name} line {error.line} passed over: {error.reason}")
    wanted = {i.instance_id for i in instances}
    records: dict[str, dict] = {}
    text = dataset.read_text(encoding="utf-8")
    raw = json.loads(text) if dataset.suffix == ".json" else [json.loads(l) for l in text.splitlines() if l.strip()]
    for record in raw:
        if isinstance(record, dict) and record.get("instance_id") in wanted and record["instance_id"] not in records:
            records[record["instance_id"]] = record
    return records


def load_predictions(path: Path) -> dict[str, dict]:
    """instance id -> prediction (SWE-bench's predictions format: instance_id, model_name_or_path,
    model_patch; a .jsonl file, a .json list or a dict by instance id); GradingInputError (one
    line, with the file's line number) for a file that is not predictions."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise GradingInputError(f"cannot read {path}: {exc.strerror}") from None
    stripped = text.strip()
    numbered: list[tuple[int, object]] = []  # (line number, item)
    if stripped.startswith("[") or (stripped.startswith("{") and path.suffix == ".json"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise GradingInputError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
        items = list(data.values()) if isinstance(data, dict) else data
        numbered = [(0, item) for item in items]
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                numbered.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise GradingInputError(f"{path} line {number}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    found: dict[str, dict] = {}
    for index, (number, item) in enumerate(numbered, 1):
        where = f"{path} line {number}" if number else f"{path}: prediction {index}"
        if not isinstance(item, dict) or not isinstance(item.get("instance_id"), str):
            raise GradingInputError(f"{where}: no instance_id")
        patch = item.get("model_patch")
        if patch is not None and not isinstance(patch, str):
            raise GradingInputError(f"{where} ({item['instance_id']}): model_patch is not a string")
        found[item["instance_id"]] = item
    return found
