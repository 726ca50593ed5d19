"""The run of one issue, as the supervisor drives it: Custodian, Manager, then the plan's stages
(tasks of a stage in parallel, stages in order). Independent of Ray: a Workforce runs the tasks."""
from __future__ import annotations

import traceback
from typing import Callable, Protocol

import structlog

from magis_ray.events.schema import RunFailed, RunFinished, RunSettings, RunStarted, TaskDefined, TaskFinished
from magis_ray.store import Fenced

from magis_ray.actors.code.applying import diff_applies

from magis_ray.actors.model.asking import Asker, BudgetExceeded, ModelUnavailable, NoScriptedAnswer
from magis_ray.actors.runtime.issue import IssueRecord
from magis_ray.actors.runtime.journal import Divergence
from magis_ray.actors.code.repository import RepoSnapshot
from magis_ray.actors.roles.custodian import LocatedFile
from magis_ray.actors.roles.developer import Assignment, TaskResult
from magis_ray.actors.roles.manager import Manager
from magis_ray.actors.roles.qa import write_reproduction
from magis_ray.actors.roles.selection import choose
from magis_ray.actors.roles.testing import Bench, Reproduction, Tester, TestPlan
from magis_ray.actors.code.regression import nearest_tests
from magis_ray.actors.code.suites import TestSuite, suite_for

# Tries at a reproduction test that fails on the base commit: the first and two corrections, as
# for any invalid answer.
REPRODUCTION_TRIES = 3

log = structlog.get_logger()


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300]


class Workforce(Protocol):
    def prepare(self, tasks: list[TaskDefined]) -> None:
        """The tasks are known: get their Developers and QA Engineers ready."""

    def run_stage(self, assignments: list[Assignment]) -> list[TaskResult]:
        """Run the tasks of one stage in parallel, each by its own Developer and QA Engineer (one
        pair per candidate when a task has several). A role's exception is raised as itself, not
        wrapped by whatever carried it (services.result_of)."""


class Locator(Protocol):
    def locate(self, issue_text: str, memory_before: int | None = None) -> list[LocatedFile]:
        """The Repository Custodian's answer: the relevant files, described."""


class Team:
    def __init__(
        self,
        *,
        issue: IssueRecord,
        settings: RunSettings,
        snapshot: RepoSnapshot,
        asker_for: Callable[[str], Asker],
        custodian: Locator,
        workforce: Workforce,
        projected_diff: Callable[[], str] | None = None,
        bench: Bench | None = None,
    ):
        """`projected_diff`: the repository diff the log holds now (the final_diff projection);
        a run ends `patched` only if it applies to the base commit."""
        self.issue = issue
        self.settings = settings
        self._snapshot = snapshot
        self._asker_for = asker_for
        self._custodian = custodian
        self._workforce = workforce
        self._projected_diff = projected_diff
        self._bench = bench  # runs the tests when settings.tests is on; replay has none and runs none

    def started_event(self) -> RunStarted:
        i = self.issue
        return RunStarted(
            instance_id=i.instance_id, repo=i.repo, base_commit=self._snapshot.commit_id,
            problem_statement=i.problem_statement, hints_text=i.hints_text, settings=self.settings,
            repo_path=i.repo_path or "", version=i.version, environment_setup_commit=i.environment_setup_commit,
            issue_url=i.issue_url,
        )

    def run(self) -> RunFinished | RunFailed:
        """Always ends the log with RunFinished or RunFailed (a Divergence propagates: the log
        holds a different history, so nothing may be written)."""
        journal = self._asker_for("supervisor").journal
        journal.emit(self.started_event())
        try:
            end: RunFinished | RunFailed = self._collaborate(memory_before=journal.last_position)
        except Exception as exc:  # noqa: BLE001 - the log must end consistently whatever broke
            if isinstance(exc, (Divergence, Fenced)):  # the log is another's now: nothing may be written
                raise
            if isinstance(exc, NoScriptedAnswer):
                end = RunFailed(reason=one_line(exc), error_type="ModelUnavailable")  # resumed like one, once the rule is there
            elif isinstance(exc, ModelUnavailable):
                end = RunFailed(reason=f"no reachable model ({one_line(exc)})", error_type="ModelUnavailable")
            elif isinstance(exc, BudgetExceeded):
                end = RunFailed(reason=one_line(exc), error_type="BudgetExceeded", resumable=False)
            else:
                log.error("run failed", error=repr(exc), traceback=traceback.format_exc())
                end = RunFailed(reason=f"internal error: {type(exc).__name__}: {one_line(exc)}", error_type=type(exc).__name__)
        journal.emit(end)
        return end

    def _base_text(self, task) -> str:
        """The file as the base commit has it; "" for a file the task creates."""
        return self._snapshot.read_text(task.path) if task.base_blob_id else ""

    def _reproduce(self, issue_text: str, tasks: list[TaskDefined], suite: TestSuite) -> Reproduction | None:
        """The QA side's reproduction test, before the Developers start, in the suite's framework
        and in the place it has for a change to these files."""
        asker = self._asker_for("qa:reproduction")
        files = "\n".join(f"- `{t.path}`: {t.description}" for t in tasks)
        place = suite.reproduction_place(self._snapshot, [t.path for t in tasks if t.base_blob_id])
        return write_reproduction(asker, Tester(asker.journal, self._bench), issue_text, files, REPRODUCTION_TRIES, suite, place)

    def _test_plan(self, task: TaskDefined, reproduction: Reproduction | None, earlier_patches: tuple[str, ...],
                   suite: TestSuite) -> TestPlan:
        """The reproduction test, and the repository's tests nearest the task's file (a new file has
        none), run with the patches of earlier stages applied: a later stage builds on them."""
        targets = nearest_tests(self._snapshot, task.path, suite) if task.base_blob_id else ()
        return TestPlan(reproduction, targets, earlier_patches)

    def _settle(self, results: list[TaskResult], issue_text: str) -> list[TaskResult]:
        """Each task's outcome: its one Developer's, or its chosen candidate's."""
        by_task: dict[str, list[TaskResult]] = {}
        for result in results:
            by_task.setdefault(result.finished.task_id, []).append(result)
        settled = []
        for task_id, candidates in by_task.items():
            if len(candidates) == 1:
                settled.append(candidates[0])
                continue
            asker = self._asker_for(f"selection:{task_id}")
            choice = choose(candidates, asker, issue_text)
            if choice is None:  # no candidate has a patch: the task failed
                settled.append(min(candidates, key=lambda r: r.finished.candidate))
                continue
            winner, chosen = choice
            asker.journal.emit(chosen)
            settled.append(winner)
        return settled

    def _tests_ready(self) -> TestSuite | None:
        """The suite the run's tests run in, when tests are on and its environment is ready (the
        bench names its command); otherwise None, and the log says why not."""
        if not self.settings.tests:
            return None
        ready = Tester(self._asker_for("supervisor").journal, self._bench).prepare()
        return suite_for(ready.command) if ready.outcome == "passed" else None

    def _collaborate(self, memory_before: int) -> RunFinished:
        suite = self._tests_ready()  # None: no tests in this run
        issue_text = self.issue.brief(self.settings.use_hints)
        located = self._custodian.locate(issue_text, memory_before)
        manager = Manager(self._asker_for, issue_text, self._snapshot.read_text, self._snapshot.blob_id)
        tasks = manager.define_tasks(located)
        if not tasks:
            return RunFinished(outcome="no_patch", summary="no file needs a change")
        self._workforce.prepare(tasks)
        team = manager.recruit(tasks)
        transcript = manager.hold_meeting(tasks, team)
        plan = manager.make_plan(tasks, transcript)
        reproduction = self._reproduce(issue_text, tasks, suite) if suite is not None else None
        by_id = {t.task_id: (t, d) for t, d in zip(tasks, team)}
        finished: list[TaskFinished] = []
        kept_patches: list[str] = []  # the diffs of earlier stages' tasks that did not fail
        for stage in plan.stages:
            assignments = [
                Assignment(
                    issue_text=issue_text, task=by_id[tid][0], developer=by_id[tid][1],
                    base_text=self._base_text(by_id[tid][0]),
                    max_review_rounds=self.settings.max_review_rounds, use_qa=self.settings.use_qa,
                    tests=self._test_plan(by_id[tid][0], reproduction, tuple(kept_patches), suite) if suite is not None else None,
                    candidates=self.settings.candidates,
                )
                for tid in stage
            ]
            settled = self._settle(self._workforce.run_stage(assignments), issue_text)
            finished.extend(r.finished for r in settled)
            kept_patches.extend(r.patch.diff for r in settled if r.finished.status != "failed" and r.patch is not None)
        patched = sorted(by_id[f.task_id][0].path for f in finished if f.status != "failed")
        summary = ", ".join(f"{f.task_id} {f.status}" for f in finished)
        if not patched:
            return RunFinished(outcome="no_patch", summary=summary)
        if self._projected_diff is not None:
            problem = diff_applies(self._snapshot.path, self._snapshot.commit_id, self._projected_diff())
            if problem is not None:
                return RunFinished(outcome="no_patch", summary=f"{summary}; the combined diff does not apply: {problem}")
        return RunFinished(outcome="patched", files_changed=patched, summary=summary)
