"""The team's tests as the roles see them: what to run (a TestRequest), who runs it (a Bench, the
execution layer behind a port), and the rules that turn outcomes into verdicts.

Every run is an event (TestsRan) in the lane that asked for it. On resume and replay the
recorded outcome is reused, exactly as a recorded model answer is: a test never runs twice for
the same request, and replay runs none."""
from __future__ import annotations

import hashlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import msgspec

from magis_ray.events.schema import TestsRan

from magis_ray.actors.code.suites import TestSuite


@dataclass(frozen=True)
class TestRequest:
    """Run `targets` (test files, ids or labels, as the suite addresses them) on the base commit
    with `patches` (diffs) applied and `files` (path -> text, e.g. the reproduction test) written
    into the workspace."""

    purpose: str  # "reproduce", "baseline" or "check"
    targets: tuple[str, ...]
    patches: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()

    def digest(self) -> str:
        """What was tested, as a short hash: the same request has the same digest on re-execution."""
        h = hashlib.sha256()
        for part in (self.purpose, *self.targets, "\0patches", *self.patches, "\0files", *(p + "\0" + t for p, t in self.files)):
            h.update(part.encode("utf-8", "surrogateescape") + b"\0")
        return h.hexdigest()[:16]


class Bench(Protocol):
    """The execution layer: runs a request in the sandbox and says what happened (task ids are
    filled in by the Tester)."""

    def prepare(self) -> TestsRan:
        """The run's test environment, made ready: outcome "passed" (the output names it), or
        "error" with the reason none can be had here."""

    def run(self, request: TestRequest) -> TestsRan: ...


class TestJournal(Protocol):
    @property
    def live(self) -> bool: ...

    def emit(self, event, caused_by: str = "") -> str: ...

    def recorded_tests(self, probe: TestsRan) -> TestsRan | None: ...


class Tester:
    """One lane's way to run tests: reuse the logged outcome of this very request, or run it and
    log it. A run may start early, in the background (`start`), while the lane goes on with other
    work; its event is still logged where the lane asks for its outcome, so the lane's events keep
    their order."""

    def __init__(self, journal: TestJournal, bench: Bench | None):
        self._journal = journal
        self._bench = bench
        self._started: dict[tuple, Future] = {}
        self._background: ThreadPoolExecutor | None = None

    def start(self, request: TestRequest, *, task_id: str = "", attempt: int = 0, candidate: int = 0) -> None:
        """Start `request` now, beside the lane's other work; `run` of the same request later takes
        its outcome instead of running it. Only a live lane starts one: a lane that resumes or
        replays has the outcome in its log, and replay runs no test."""
        if self._bench is None or not self._journal.live:
            return
        key = (request.digest(), task_id, attempt, candidate)
        if key not in self._started:
            if self._background is None:
                self._background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="early-test")
            self._started[key] = self._background.submit(self._bench.run, request)

    def prepare(self) -> TestsRan:
        """The environment's readiness, as the log has it or the bench says now."""
        probe = TestsRan(purpose="prepare", command="", outcome="error")
        recorded = self._journal.recorded_tests(probe)
        if recorded is not None:
            return recorded
        ready = self._bench.prepare() if self._bench is not None else msgspec.structs.replace(
            probe, output="this run has no test bench")
        ready = msgspec.structs.replace(ready, purpose="prepare")
        self._journal.emit(ready)
        return ready

    def run(self, request: TestRequest, *, task_id: str = "", attempt: int = 0, candidate: int = 0) -> TestsRan:
        probe = TestsRan(purpose=request.purpose, command="", outcome="error", task_id=task_id, attempt=attempt,
                         candidate=candidate, patch_digest=request.digest())
        recorded = self._journal.recorded_tests(probe)
        if recorded is not None:
            return recorded
        if self._bench is None:
            raise RuntimeError("tests were asked for, but this run has no test bench")
        started = self._started.pop((probe.patch_digest, task_id, attempt, candidate), None)
        if self._background is not None and not self._started:
            self._background.shutdown(wait=False)  # its thread ends once the run it holds is done
            self._background = None
        outcome = started.result() if started is not None else self._bench.run(request)
        ran = msgspec.structs.replace(outcome, purpose=request.purpose, task_id=task_id, attempt=attempt,
                                      candidate=candidate, patch_digest=probe.patch_digest)
        self._journal.emit(ran)
        return ran


@dataclass(frozen=True)
class Reproduction:
    """The reproduction test: a file of the repository's suite (it never enters the diff), how
    the runner is told to run it, and its tests as the runner named them on the base commit."""

    path: str
    content: str
    target: str
    tests: tuple[str, ...]


@dataclass(frozen=True)
class Evidence:
    """What the tests said of one patch, and whether that patch may be approved."""

    run: TestsRan
    reproduction: tuple[str, ...]  # the reproduction's tests, as its run on the base commit named them: all must pass now
    regressions: tuple[str, ...]  # the regression tests that passed on the base commit

    @property
    def reproduction_fails(self) -> bool:
        return any(not passed(self.run, test) for test in self.reproduction)

    @property
    def broken(self) -> list[str]:
        """Regression tests that passed on the base commit and do not now."""
        return [t for t in self.regressions if not passed(self.run, t)]

    @property
    def blocks_approval(self) -> bool:
        return self.run.outcome in ("timeout", "error") or self.reproduction_fails or bool(self.broken)

    def summary(self) -> str:
        """One paragraph for the QA Engineer and the Developer: the verdict, the failures, the output."""
        lines = []
        if self.run.outcome == "timeout":
            lines.append("The tests did not finish within the time limit.")
        elif self.run.outcome == "error" and not (self.run.passed or self.run.failed):
            lines.append("The tests could not run (the output says why).")
        if self.reproduction:
            lines.append("The reproduction test " + ("still FAILS with this patch." if self.reproduction_fails else "passes with this patch."))
        if self.regressions:
            broken = self.broken
            lines.append(f"Regression tests that passed before and FAIL now: {', '.join(broken)}." if broken
                         else f"All {len(self.regressions)} regression tests that passed before still pass.")
        if self.run.failed:
            lines.append(f"Failing tests: {', '.join(self.run.failed[:10])}.")
        if self.blocks_approval or self.run.failed:
            lines.append(f"Output of `{self.run.command}` (cut):\n{self.run.output[-OUTPUT_FOR_MODEL:]}")
        return "\n".join(lines) or "No test ran."


OUTPUT_FOR_MODEL = 3000  # characters of a test run's output a prompt shows (its end: where pytest says why)


def passed(run: TestsRan, test: str) -> bool:
    """The test `test` (as the runner names it) passed: a result names it and it did not fail."""
    return test in run.passed and test not in run.failed


def reproduces(run: TestsRan, target: str, suite: TestSuite) -> tuple[str, tuple[str, ...]]:
    """("", its tests) when `run` (the reproduction test `target` alone, on the base commit) shows
    the issue; else (why not, ())."""
    if run.outcome == "timeout":
        return "it did not finish within the time limit on the unfixed code", ()
    tests = suite.tests_of(run, target)
    if tests is None:
        return (f"it does not even run: {suite.load_error} (a syntax or import error, or no test in it), "
                f"so it shows nothing of the issue; the output says why:\n{run.output[-OUTPUT_FOR_MODEL:]}"), ()
    if all(passed(run, t) for t in tests):
        return "it PASSES on the unfixed code, so it does not reproduce the issue", ()
    return "", tests


@dataclass(frozen=True)
class TestPlan:
    """What a task's patches are checked against: the reproduction test, and the repository's
    tests nearest the task's file (those that pass on the base commit become its regression tests)."""

    reproduction: Reproduction | None
    regression_targets: tuple[str, ...] = ()
    earlier_patches: tuple[str, ...] = ()  # approved diffs of earlier stages, applied first

    @property
    def empty(self) -> bool:
        return self.reproduction is None and not self.regression_targets


class PatchChecker:
    """A task's checks: the regression tests' baseline on first use, then each patch against the
    reproduction test and the regression tests that passed on the base commit."""

    def __init__(self, tester: Tester, plan: TestPlan, task_id: str):
        self._tester, self._plan, self._task_id = tester, plan, task_id
        self._regressions: tuple[str, ...] | None = None

    def _baseline_request(self) -> TestRequest:
        return TestRequest("baseline", self._plan.regression_targets, self._plan.earlier_patches)

    def start_baseline(self) -> None:
        """Start the regression tests' baseline now, while the Developer asks the model for its first
        patch: the first check then waits only for what is left of it."""
        if self._regressions is None and self._plan.regression_targets:
            self._tester.start(self._baseline_request(), task_id=self._task_id)

    def _baseline(self) -> tuple[str, ...]:
        if self._regressions is None:
            self._regressions = ()
            if self._plan.regression_targets:
                base = self._tester.run(self._baseline_request(), task_id=self._task_id)
                self._regressions = tuple(base.passed)
        return self._regressions

    def check(self, diff: str, attempt: int, candidate: int = 0) -> Evidence:
        plan = self._plan
        regressions = self._baseline()
        repro = plan.reproduction
        # Whole files (or modules' labels) run, not the test ids that passed before: a parsed id is
        # not always one the runner takes back (pytest's parameters with spaces, a Django test
        # named by its docstring). The verdict goes by ids (Evidence), so a test of those files
        # that failed on the base commit already says nothing of the patch.
        request = TestRequest(
            "check", ((repro.target,) if repro else ()) + plan.regression_targets, (*plan.earlier_patches, diff),
            ((repro.path, repro.content),) if repro else (),
        )
        run = self._tester.run(request, task_id=self._task_id, attempt=attempt, candidate=candidate)
        return Evidence(run, repro.tests if repro else (), regressions)
