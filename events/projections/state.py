"""The run's state, folded event by event; every other projection reads from it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from magis_ray.events import schema as ev


@dataclass
class TaskView:
    task_id: str
    path: str
    description: str
    base_blob_id: str
    developer: ev.DeveloperRecruited | None = None
    qa: ev.QAAssigned | None = None
    locations: list[ev.LinesLocated] = field(default_factory=list)
    patches: list[ev.PatchProposed] = field(default_factory=list)
    reviews: list[ev.ReviewIssued] = field(default_factory=list)
    test_runs: list[ev.TestsRan] = field(default_factory=list)  # its regression baseline, then each patch's check
    finished: ev.TaskFinished | None = None  # with candidates: the chosen one's (until then, the latest)
    finishes: dict[int, ev.TaskFinished] = field(default_factory=dict)  # candidate -> how it ended
    chosen: ev.CandidateChosen | None = None

    @property
    def final_patch(self) -> ev.PatchProposed | None:
        """The patch the task ends with: its (chosen candidate's) last attempt, unless the task failed."""
        if self.finished is not None and self.finished.status == "failed":
            return None
        patches = [p for p in self.patches if p.candidate == self.chosen.chosen] if self.chosen else self.patches
        return patches[-1] if patches else None


@dataclass
class RunView:
    run_id: str = ""
    started: ev.RunStarted | None = None
    ranked: ev.FilesRanked | None = None
    summaries: list[ev.FileSummarized] = field(default_factory=list)
    judgements: list[ev.FileJudged] = field(default_factory=list)
    located: ev.FilesLocated | None = None
    tasks: dict[str, TaskView] = field(default_factory=dict)
    meeting: list[ev.MeetingUtterance] = field(default_factory=list)
    plan: ev.PlanMade | None = None
    environment: ev.TestsRan | None = None  # the test environment's readiness (tests on)
    reproductions: list[ev.ReproductionWritten] = field(default_factory=list)
    reproduction_runs: list[ev.TestsRan] = field(default_factory=list)
    exchanges: list[ev.Recorded] = field(default_factory=list)
    timeline: list[ev.Recorded] = field(default_factory=list)
    finished: ev.RunFinished | None = None
    failed: ev.RunFailed | None = None

    @property
    def status(self) -> str:
        if self.finished is not None:
            return "finished"
        if self.failed is not None:
            return "failed"
        return "running" if self.started is not None else "empty"

    def apply(self, rec: ev.Recorded) -> None:
        e = rec.event
        if isinstance(e, ev.RunResumed):
            self._supersede_after(e.kept_version)
        self.run_id = rec.run_id
        self.timeline.append(rec)
        match e:
            case ev.RunStarted():
                self.started = e
            case ev.FilesRanked():
                self.ranked = e
            case ev.FileSummarized():
                self.summaries.append(e)
            case ev.FileJudged():
                self.judgements.append(e)
            case ev.FilesLocated():
                self.located = e
            case ev.TaskDefined():
                self.tasks[e.task_id] = TaskView(e.task_id, e.path, e.description, e.base_blob_id)
            case ev.DeveloperRecruited():
                self.tasks[e.task_id].developer = e
            case ev.MeetingUtterance():
                self.meeting.append(e)
            case ev.PlanMade():
                self.plan = e
            case ev.QAAssigned():
                self.tasks[e.task_id].qa = e
            case ev.LinesLocated():
                self.tasks[e.task_id].locations.append(e)
            case ev.PatchProposed():
                self.tasks[e.task_id].patches.append(e)
            case ev.ReviewIssued():
                self.tasks[e.task_id].reviews.append(e)
            case ev.TaskFinished():
                self.tasks[e.task_id].finished = self.tasks[e.task_id].finishes[e.candidate] = e
            case ev.CandidateChosen():
                task = self.tasks[e.task_id]
                task.chosen, task.finished = e, task.finishes.get(e.chosen, task.finished)
            case ev.LLMExchanged():
                self.exchanges.append(rec)
            case ev.ReproductionWritten():
                self.reproductions.append(e)
            case ev.TestsRan() if e.purpose == "prepare":
                self.environment = e
            case ev.TestsRan() if e.task_id:
                self.tasks[e.task_id].test_runs.append(e)
            case ev.TestsRan():
                self.reproduction_runs.append(e)
            case ev.RunFinished():
                self.finished = e
            case ev.RunFailed():
                self.failed = e
            case ev.RunResumed():
                self.failed = None

    def _supersede_after(self, kept_version: int) -> None:
        """Forget the state that followed the failure a resumed run retries. The timeline and the
        exchanges stay whole: what happened and what was paid for are still history."""
        timeline, exchanges = self.timeline, self.exchanges
        kept = [r for r in timeline if r.version <= kept_version and not isinstance(r.event, ev.RunResumed)]
        self.__init__()  # type: ignore[misc]
        for r in kept:
            self.apply(r)
        self.timeline, self.exchanges = timeline, exchanges


def fold(events: Iterable[ev.Recorded]) -> RunView:
    view = RunView()
    for rec in events:
        view.apply(rec)
    return view
