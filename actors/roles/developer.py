"""Developer (Algorithm 3): designs its QA Engineer, then loops: locate the lines, write the new
code, make the diff, get it reviewed; the QA's comment feeds the next attempt."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from magis_ray.events.schema import (
    DeveloperRecruited, Edit, LinesLocated, LineRange, PatchProposed, QAAssigned, ReviewIssued, TaskDefined, TaskFinished,
)
from magis_ray.events.schema import StepFailed as StepFailedEvent

from magis_ray.actors.model.answers import CodeAnswer, LinesAnswer, PersonaAnswer
from magis_ray.actors.model.asking import Asker, NoUsableAnswer
from magis_ray.actors.code.diffs import file_diff
from magis_ray.actors.code.edits import apply_edits, check_ranges, numbered
from magis_ray.actors.roles.testing import Evidence, PatchChecker, Tester, TestPlan


class Reviewer(Protocol):
    def review(self, qa: QAAssigned, patch: PatchProposed, evidence: Evidence | None = None) -> ReviewIssued | None:
        """None when the QA Engineer could not give a usable review."""


@dataclass(frozen=True)
class Assignment:
    """Everything a Developer needs, so it can run on any node: the file travels with the task."""

    issue_text: str
    task: TaskDefined
    developer: DeveloperRecruited
    base_text: str
    max_review_rounds: int
    use_qa: bool
    tests: TestPlan | None = None  # None: the paper's MAGIS, no test runs
    candidates: int = 1  # candidate patches written for the task, each by its own Developer


# Candidates sample their answers, so that they differ; a single Developer answers as the model's
# default (0) makes it most likely.
CANDIDATE_TEMPERATURE = 0.8


def candidate_numbers(work: Assignment) -> list[int]:
    """0 for a task with one Developer; 1..N for N candidates."""
    return [0] if work.candidates <= 1 else list(range(1, work.candidates + 1))


def lane_suffix(candidate: int) -> str:
    """Candidate 1 (or the only one) keeps the task's lanes; candidate k writes in "<lane>/k"."""
    return f"/{candidate}" if candidate > 1 else ""


def candidate_temperature(candidate: int) -> float | None:
    return CANDIDATE_TEMPERATURE if candidate else None


def line_count(text: str) -> int:
    return len(text.splitlines())


def old_parts(text: str, ranges: list[LineRange]) -> str:
    lines = text.splitlines(keepends=True)
    parts = []
    for r in ranges:
        body = "".join(lines[r.start - 1 : r.end]) if r.end >= r.start else "(nothing: new lines are inserted here)\n"
        parts.append(f"Lines {r.start}-{r.end}:\n```\n{body}```")
    return "\n".join(parts)


@dataclass(frozen=True)
class TaskResult:
    """How a Developer's work on a task ended: the event, and what candidate selection weighs."""

    finished: TaskFinished
    patch: PatchProposed | None  # the last patch (None when the task failed)
    evidence: Evidence | None  # what the tests said of it (None without tests)


class Developer:
    def __init__(self, work: Assignment, asker: Asker, reviewer: Reviewer | None, tester: Tester | None = None,
                 candidate: int = 0):
        """`candidate`: which of the task's candidates this Developer writes (0: the only one)."""
        self._candidate = candidate
        self._evidence: Evidence | None = None
        self._patch: PatchProposed | None = None
        self._work = work
        self._asker = asker
        self._reviewer = reviewer if work.use_qa else None
        self._persona = dict(name=work.developer.name, profile=work.developer.profile)
        plan = work.tests
        self._checker = PatchChecker(tester, plan, work.task.task_id) if tester is not None and plan and not plan.empty else None

    def run(self) -> TaskResult:
        work = self._work
        if self._checker is not None:
            self._checker.start_baseline()  # beside the model calls below, off the task's critical path
        qa = self._design_qa() if self._reviewer is not None else None
        feedback = ""
        patch: PatchProposed | None = None
        for attempt in range(1, work.max_review_rounds + 1):
            try:
                patch = self._patch = self._attempt(attempt, feedback)
            except NoUsableAnswer as exc:
                status = "unapproved" if patch is not None else "failed"
                return self._finish(status, attempt - 1, f"attempt {attempt}: {exc}")
            evidence = self._evidence = self._checker.check(patch.diff, attempt, self._candidate) if self._checker is not None else None
            if qa is None:
                if evidence is None or not evidence.blocks_approval or attempt == work.max_review_rounds:
                    return self._finish("unreviewed", attempt)
                feedback = (f"\nYour previous attempt was tested and sent back:\n```diff\n{patch.diff}```\n"
                            f"{evidence.summary()}\nTake this into account.\n")
                continue
            review = self._reviewer.review(qa, patch, evidence)
            if review is None:
                return self._finish("unapproved", attempt, "the QA engineer gave no usable review")
            if review.approved:
                return self._finish("approved", attempt)
            tested = f"\n{evidence.summary()}" if evidence is not None and evidence.summary() not in review.comment else ""
            feedback = (
                f"\nYour previous attempt was reviewed and sent back:\n```diff\n{patch.diff}```\n"
                f"The QA engineer said: {review.comment.strip()}{tested}\nTake this into account.\n"
            )
        return self._finish("unapproved", work.max_review_rounds, f"not approved after {work.max_review_rounds} rounds")

    def _finish(self, status: str, attempts: int, reason: str = "") -> TaskResult:
        finished = TaskFinished(task_id=self._work.task.task_id, status=status, attempts=attempts, reason=reason,
                                candidate=self._candidate)
        self._asker.journal.emit(finished)
        patch = None if status == "failed" else self._patch
        return TaskResult(finished, patch, self._evidence if patch is not None else None)

    def _design_qa(self) -> QAAssigned:
        task = self._work.task
        try:
            persona = self._asker.ask(
                "design_qa", PersonaAnswer, task_id=task.task_id, path=task.path, task=task.description, **self._persona
            )
            qa = QAAssigned(task_id=task.task_id, name=persona.name.strip() or f"QA {task.task_id}", profile=persona.profile,
                            candidate=self._candidate)
        except NoUsableAnswer as exc:
            qa = QAAssigned(task_id=task.task_id, name=f"QA {task.task_id}", profile="A meticulous reviewer of Python changes.",
                            candidate=self._candidate)
            self._asker.journal.emit(StepFailedEvent(purpose="design_qa", reason=str(exc), task_id=task.task_id, fallback="a generic QA engineer"))
        self._asker.journal.emit(qa)
        return qa

    def _attempt(self, attempt: int, feedback: str) -> PatchProposed:
        work, task = self._work, self._work.task
        text = work.base_text
        count = line_count(text)
        context = dict(issue=work.issue_text, task=task.description, path=task.path, feedback=feedback, **self._persona)

        def ranges_fit(answer: LinesAnswer) -> None:
            if not answer.ranges:
                raise ValueError("no line range was given")
            check_ranges([LineRange(r.start, r.end) for r in answer.ranges], count)

        located = self._asker.ask(
            "locate_lines", LinesAnswer, task_id=task.task_id, check=ranges_fit,
            line_count=count, after_last=count + 1, numbered=numbered(text), **context,
        )
        ranges = [LineRange(r.start, r.end) for r in located.ranges]
        self._asker.journal.emit(LinesLocated(task_id=task.task_id, attempt=attempt, ranges=ranges, candidate=self._candidate))

        def edits_apply(answer: CodeAnswer) -> None:
            edits = [Edit(LineRange(e.start, e.end), e.new_code) for e in answer.edits]
            check_ranges([e.range for e in edits], count)
            if apply_edits(text, edits) == text:
                raise ValueError("the edits change nothing in the file")

        code = self._asker.ask(
            "write_code", CodeAnswer, task_id=task.task_id, check=edits_apply, old_parts=old_parts(text, ranges), **context,
        )
        edits = [Edit(LineRange(e.start, e.end), e.new_code) for e in code.edits]
        new_text = apply_edits(text, edits)
        patch = PatchProposed(
            task_id=task.task_id, attempt=attempt, path=task.path, base_blob_id=task.base_blob_id,
            edits=edits, new_text=new_text, diff=file_diff(task.path, text if task.base_blob_id else None, new_text),
            candidate=self._candidate,
        )
        self._asker.journal.emit(patch)
        return patch
