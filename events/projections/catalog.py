"""What a list of runs shows: one summary per run, batch and grading, folded event by event from
the whole store's log (read_all), so a long-lived reader keeps it current by applying only the
events appended since it last looked. Pure: no store, no clock."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from magis_ray.events import schema as ev
from magis_ray.events.streams import StreamKind

from .tests import Tally, tests_decision


@dataclass
class RunSummary:
    run_id: str
    instance_id: str = ""
    repo: str = ""
    model: str = ""  # the run's settings
    models: set[str] = field(default_factory=set)  # every model its exchanges name
    batch: str = ""
    status: str = "empty"  # empty, running, finished, failed
    outcome: str = ""  # patched / no_patch, or why it failed
    stage: str = ""  # where the run is, in words
    events: int = 0
    first_time: float = 0.0
    last_time: float = 0.0
    calls: int = 0
    failed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    tasks: dict[str, str] = field(default_factory=dict)  # task id -> status ("" while it works)
    stages: list[list[str]] = field(default_factory=list)
    approvals: int = 0
    rejections: int = 0
    tests: Tally = field(default_factory=Tally)
    tests_decision: str = ""  # whether the run's tests run, and if not why (tests.tests_decision)
    resumed: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def seconds(self) -> float:
        return max(0.0, self.last_time - self.first_time)

    @property
    def ended(self) -> bool:
        return self.status in ("finished", "failed")

    def apply(self, rec: ev.Recorded) -> None:
        e = rec.event
        self.events += 1
        self.first_time = self.first_time or rec.time
        self.last_time = rec.time
        match e:
            case ev.RunStarted():
                self.instance_id, self.repo, self.model, self.batch = e.instance_id, e.repo, e.settings.model, e.settings.batch
                # the test environment is prepared before anything else (minutes, the first time)
                self.status, self.stage = "running", "preparing the test environment" if e.settings.tests else "ranking files"
                self.tests_decision = tests_decision(e.settings.tests, None)
            case ev.FilesRanked() | ev.FileSummarized() | ev.FileJudged():
                self.stage = "custodian: summarizing and judging the ranked files"
            case ev.FilesLocated():
                self.stage = "manager: defining tasks"
            case ev.TaskDefined():
                self.tasks[e.task_id] = ""
                self.stage = "manager: defining tasks and recruiting developers"
            case ev.MeetingUtterance():
                self.stage = "kick-off meeting"
            case ev.PlanMade():
                self.stages = [list(s) for s in e.stages]
                self.stage = self._stage_now()
            case ev.ReproductionWritten():
                self.stage = "reproduction test"
            case ev.ReviewIssued():
                if e.approved:
                    self.approvals += 1
                else:
                    self.rejections += 1
            case ev.TestsRan() if e.purpose == "prepare":
                self.tests.add(e)
                self.stage = "custodian: ranking files"
                self.tests_decision = tests_decision(True, e)  # prepared: tests are on
            case ev.TestsRan():
                self.tests.add(e)
            case ev.TaskFinished():
                self.tasks[e.task_id] = e.status
                self.stage = self._stage_now()
            case ev.LLMExchanged():
                self.calls += 1
                self.failed_calls += bool(e.error)
                self.prompt_tokens += e.prompt_tokens
                self.completion_tokens += e.completion_tokens
                self.cost_usd += e.cost_usd
                if e.model:
                    self.models.add(e.model)
            case ev.RunResumed():
                self.resumed += 1
                self.status, self.outcome, self.stage = "running", "", "resumed"
            case ev.RunFinished():
                self.status, self.outcome, self.stage = "finished", e.outcome, "finished"
            case ev.RunFailed():
                self.status, self.outcome, self.stage = "failed", e.reason, "failed"

    def _stage_now(self) -> str:
        for number, stage in enumerate(self.stages, 1):
            if any(not self.tasks.get(t) for t in stage):
                return f"stage {number} of {len(self.stages)}: " + ", ".join(stage)
        return "checking the final diff" if self.stages else self.stage


@dataclass
class GradingSummary:
    """A grading batch (`magis-ray grade`): how many of its instances are graded, and resolved."""

    name: str
    dataset: str = ""
    predictions: str = ""
    instances: list[str] = field(default_factory=list)  # of the latest GradingStarted
    resolved: dict[str, bool] = field(default_factory=dict)  # instance -> its latest grade
    errors: dict[str, str] = field(default_factory=dict)  # instance -> the step that failed
    started: int = 0
    first_time: float = 0.0
    last_time: float = 0.0

    @property
    def graded(self) -> int:
        return len(self.resolved)

    @property
    def resolved_count(self) -> int:
        return sum(self.resolved.values())

    @property
    def status(self) -> str:
        return "finished" if self.instances and self.graded >= len(self.instances) else "running"

    def apply(self, rec: ev.Recorded) -> None:
        e = rec.event
        self.first_time = self.first_time or rec.time
        self.last_time = rec.time
        match e:
            case ev.GradingStarted():
                self.dataset, self.predictions, self.instances = e.dataset, e.predictions, list(e.instances)
                self.started += 1
            case ev.InstanceGraded():
                self.resolved[e.instance_id] = e.resolved
                if e.error_step:
                    self.errors[e.instance_id] = e.error_step
                else:
                    self.errors.pop(e.instance_id, None)


@dataclass
class BatchSummary:
    """A batch of runs (`magis-ray submit DATASET.jsonl`), from its runs' summaries."""

    name: str
    runs: list[RunSummary]

    @property
    def instances(self) -> int:
        return len({r.instance_id for r in self.runs})

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.runs)

    @property
    def patched(self) -> int:
        return sum(r.outcome == "patched" for r in self.runs)

    @property
    def ended(self) -> int:
        return sum(r.ended for r in self.runs)

    @property
    def tokens(self) -> int:
        return sum(r.tokens for r in self.runs)

    @property
    def cost_usd(self) -> float:
        return sum(r.cost_usd for r in self.runs)

    @property
    def last_time(self) -> float:
        return max((r.last_time for r in self.runs), default=0.0)


class Catalog:
    """Every run's and grading's summary (a validation's stream is neither); `apply` the store's events in position order."""

    def __init__(self) -> None:
        self.runs: dict[str, RunSummary] = {}
        self.gradings: dict[str, GradingSummary] = {}
        self.position = 0  # the last global position applied

    def apply(self, rec: ev.Recorded) -> str:
        """Fold one event in; the id of the stream it changed."""
        self.position = max(self.position, rec.position)
        kind = StreamKind.of(rec.run_id)
        if kind is StreamKind.GRADING:
            name = StreamKind.GRADING.name_in(rec.run_id)
            self.gradings.setdefault(name, GradingSummary(name)).apply(rec)
        elif kind is StreamKind.RUN:
            self.runs.setdefault(rec.run_id, RunSummary(rec.run_id)).apply(rec)
        return rec.run_id

    def apply_all(self, events: Iterable[ev.Recorded]) -> set[str]:
        return {self.apply(rec) for rec in events}

    def batches(self) -> list[BatchSummary]:
        grouped: dict[str, list[RunSummary]] = {}
        for run in self.runs.values():
            if run.batch:
                grouped.setdefault(run.batch, []).append(run)
        return sorted((BatchSummary(name, runs) for name, runs in grouped.items()), key=lambda b: -b.last_time)

    def batch(self, name: str) -> BatchSummary:
        return BatchSummary(name, [r for r in self.runs.values() if r.batch == name])
