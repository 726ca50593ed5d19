"""Validation as a service: candidate tasks validated, from options to the tasks file, for any caller.

`plan_validation(options)` checks the input and says what will be validated: the records (a
`tasks make` candidates file, or any SWE-bench dataset; their own lists are ignored), one job a
candidate, the validation's name. `run_validation_plan(plan)` validates the jobs as grading grades
(a build task then a test task a job, Ray tasks placed by the environment they need, or threads),
records each candidate's outcome in the validation's stream of the store, "validation:NAME", so
that the same options after a crash validate only what has no outcome, and writes the kept
candidates as a tasks file with the dropped ones and their reasons beside it."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import msgspec
from msgspec.structs import replace

from magis_ray.events.schema import CandidateValidated, ValidationStarted
from magis_ray.events.settings import GradeSettings
from magis_ray.events.streams import StreamKind

from magis_ray.actors.code.commit_packs import folder_name
from .grading_batch import (Job, StreamLog, WorkerOptions, build_on_node, preparation_seconds, run_jobs, test_runner,
                            testbed_cache, with_build_times)
from .grading_service import GradingInputError, checked_setup, executor_for, ignore, load_records
from .task_records import Dropped, dropped_path, validated, write_jsonl
from .validation import record_sha, unusable, validate

ACTOR = "validator"


class ValidationOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What a validation is asked to do: which candidates, their repositories, where the tasks go
    (its own fields), and how their tests run (the settings' grade section, whole)."""

    records: str  # the candidates: a .jsonl (or .json) file of SWE-bench records
    out: str  # the tasks file written: the kept candidates, with their lists
    store: str  # the store's folder: the validation's stream, and its logs under validations/
    repos_dir: str = ""  # a folder of owner__name repositories
    repository: str = ""  # or the one repository every record is of (`--repo`)
    instances: tuple[str, ...] = ()  # only these instance ids (none: every one)
    name: str = ""  # the validation's name in the store ("": the records file's)
    grade: GradeSettings = GradeSettings()  # how the tests run: sandbox, timeout, memory, workers, a user's setup
    pythons: dict[str, str] = {}
    env_cache: str | None = None  # this machine's environment cache (None: its node setting)
    artifact_store: str = ""  # the cluster's shared store of built environments and testbeds ("": none)
    use_ray: bool = True  # Ray tasks; False: threads of this process


@dataclass(frozen=True)
class ValidationPlan:
    """A validation whose input is checked: what it validates, and where its outcomes go."""

    name: str
    jobs: list[Job]
    workers: int
    worker_options: WorkerOptions
    started: ValidationStarted
    out: Path
    store: str
    use_ray: bool
    cache_root: str | None = None


class ValidationOutcome(msgspec.Struct, frozen=True):
    """A validation done: an outcome a candidate, in the records' order, and what was written."""

    name: str
    results: list[CandidateValidated]
    out: str
    dropped_path: str
    logs_dir: str
    seconds: float  # this invocation's wall time


def plan_validation(options: ValidationOptions, notice: Callable[[str], None] = ignore) -> ValidationPlan:
    """The validation `options` ask for, checked: GradingInputError (one line) for input it cannot
    use, HarnessMissing without the swebench package, SandboxUnavailable when the sandbox cannot
    run here."""
    from magis_ray.actors.execution.specs import TESTS_PLACE

    out = Path(options.out)
    if not out.parent.is_dir():
        raise GradingInputError(f"--out {out}: the folder {out.parent} does not exist")
    if TESTS_PLACE in options.grade.test_cmd:
        raise GradingInputError(f"the test command names {TESTS_PLACE}, the lists validation makes: give it without",
                                "grade.test-cmd")
    records = read_records(Path(options.records))
    unknown = sorted(set(options.instances) - set(records))
    if unknown:
        raise GradingInputError(f"not in {Path(options.records).name}: {', '.join(unknown[:5])}")
    chosen = [r for i, r in records.items() if not options.instances or i in options.instances]
    name = options.name or Path(options.records).stem
    logs_root = Path(options.store) / "validations" / name
    repos_dir = repositories(options, chosen, logs_root)
    workers = checked_setup(options.grade, repos_dir, options.artifact_store, notice)
    grade = options.grade
    worker_options = WorkerOptions(repos_dir=repos_dir, grade=grade, artifact_store=options.artifact_store,
                                   pythons=dict(options.pythons), logs_dir=str((logs_root / "logs").resolve()))
    started = ValidationStarted(name=name, records=options.records, candidates=[r["instance_id"] for r in chosen],
                                workers=workers, grade=grade)
    return ValidationPlan(name=name, jobs=[Job(r) for r in chosen], workers=workers,
                          worker_options=worker_options, started=started, out=out, store=options.store,
                          use_ray=options.use_ray,
                          cache_root=str(Path(options.env_cache).expanduser().resolve()) if options.env_cache else None)


def read_records(path: Path) -> dict[str, dict]:
    """The records by instance id, as the file holds them; GradingInputError (one line) for a file
    that is not records, or one entry that is none."""
    from .instances import load_dataset

    try:
        _, errors = load_dataset(path)
    except (OSError, ValueError) as exc:
        raise GradingInputError(f"cannot read the records {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if errors:
        more = f" (and {len(errors) - 1} more entries that are no records)" if len(errors) > 1 else ""
        raise GradingInputError(f"{path.name} line {errors[0].line} is no record: {errors[0].reason}{more}")
    records = load_records(path)
    if not records:
        raise GradingInputError(f"{path} holds no records")
    return records


def repositories(options: ValidationOptions, records: list[dict], logs_root: Path) -> str:
    """The folder of owner__name repositories the records' validation reads: --repos-dir, checked
    to hold each record's repository; or, for --repo, one beside the validation's logs whose only
    entry is a link to it, named as the records name their repository (they must name one)."""
    from magis_ray.actors.code.workingcopy import open_working_copy

    names = sorted({r["repo"] for r in records})
    if not options.repository:
        missing = [n for n in names if not (Path(options.repos_dir) / folder_name(n)).is_dir()]
        if Path(options.repos_dir).is_dir() and missing:
            raise GradingInputError(f"no repository for {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} "
                                    f"(looked for OWNER__NAME); `magis-ray repos` fills it for the records", "repos-dir")
        return options.repos_dir
    copy = open_working_copy(options.repository, search=False)
    if len(names) > 1:
        raise GradingInputError(f"the records are of {len(names)} repositories ({', '.join(names[:3])}): "
                                f"give --repos-dir, a folder of OWNER__NAME repositories")
    folder = logs_root / "repository"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / folder_name(names[0])
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(Path(copy.path).resolve(), target_is_directory=True)
    return str(folder.resolve())


# --- the workers: a candidate on whichever node runs it ---------------------------------------

def validate_job(job: Job, options: WorkerOptions, cache_root: str | None = None,
                 stop: threading.Event | None = None) -> CandidateValidated:
    """One candidate, start to end, on this node (its environment cache is the node's); `stop`
    ends its builds and its test runs (SandboxStopped)."""
    return validate(job.record, options.repos_dir, testbed_cache(options, cache_root, stop), test_runner(options.grade, stop),
                    options.logs_dir, options.grade)


def prepare_candidate(job: Job, options: WorkerOptions) -> dict | None:
    """The build task: the candidate's environment and testbed on this node, unless the candidate
    cannot use them (no test patch, or one that does not apply)."""
    if unusable(job.record, Path(options.repos_dir) / folder_name(job.record["repo"])) is not None:
        return None
    return build_on_node(job.record, options)


def validate_after_build(job: Job, options: WorkerOptions, built: dict | None) -> CandidateValidated:
    """The test task: validate on this node (the build's); the build task gives the build's time,
    which counts in the candidate's seconds."""
    from magis_ray.actors.runtime.remote import this_node

    node, host = this_node()
    result = replace(validate_job(job, options), node=node, host=host)
    timed = with_build_times(result, built)
    return replace(timed, seconds=timed.seconds + preparation_seconds(timed) - preparation_seconds(result))


# --- the driver --------------------------------------------------------------------------------

class ValidationLog(StreamLog):
    """The validation's stream: the outcome of each candidate validated so far."""

    def __init__(self, store, name: str) -> None:
        super().__init__(store, StreamKind.VALIDATION.stream_id(name), ACTOR)
        self.validated = {e.instance_id: e for e in self.events if isinstance(e, CandidateValidated)}

    def append(self, event) -> None:
        super().append(event)
        if isinstance(event, CandidateValidated):
            self.validated[event.instance_id] = event


def run_validation(store, plan: ValidationPlan, executor,
                   on_result: Callable[[CandidateValidated, bool], None] = ignore) -> list[CandidateValidated]:
    """Validate the plan's jobs, skipping those validated before with the same record;
    `on_result(outcome, skipped)` once a job. One outcome a job, in order."""
    log = ValidationLog(store, plan.name)
    log.append(plan.started)
    todo = []
    for job in plan.jobs:
        earlier = log.validated.get(job.instance_id)
        if earlier is not None and earlier.record_sha == record_sha(job.record):
            on_result(earlier, True)
        else:
            todo.append(job)

    def done(_job: Job, result: CandidateValidated) -> None:
        log.append(result)
        on_result(result, False)

    run_jobs(todo, executor, plan.workers, ignore, done)
    return [log.validated[job.instance_id] for job in plan.jobs]


def run_validation_plan(plan: ValidationPlan,
                        on_result: Callable[[CandidateValidated, bool], None] = ignore) -> ValidationOutcome:
    """Validate the plan's candidates, `plan.workers` at once; then write the kept ones to the
    tasks file, and the dropped ones with their reasons beside it."""
    from magis_ray.store import open_store

    began = time.monotonic()
    executor = executor_for(plan, prepare_candidate, validate_after_build, validate_job)
    open_store(plan.store, create=True).close()
    with open_store(plan.store) as store:
        results = run_validation(store, plan, executor, on_result)
    records = [job.record for job in plan.jobs]
    write_jsonl(plan.out, [validated(record, r.fail_to_pass, r.pass_to_pass) for record, r in zip(records, results) if r.kept])
    dropped = dropped_path(plan.out)
    write_jsonl(dropped, [Dropped(r.instance_id, r.reason, r.detail, record.get("commit", ""))
                          for record, r in zip(records, results) if not r.kept])
    return ValidationOutcome(name=plan.name, results=results, out=str(plan.out), dropped_path=str(dropped),
                             logs_dir=plan.worker_options.logs_dir or "", seconds=time.monotonic() - began)
