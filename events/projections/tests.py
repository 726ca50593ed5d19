"""What a run's tests say, in one wording and one count, for every place that shows them (the
audit in Markdown, JSON and HTML, `watch`, the inspector and the pull-request text).

A test run is a TestsRan of purpose "reproduce", "baseline" or "check"; the test environment's
preparation ("prepare") is not one. On the base commit failures are expected (the reproduction
must fail; the regression baseline records which tests fail before the change), so only a
check's failure counts as "not passing". A test file pytest could not collect (a syntax or
import error) is named as such, never as a failed test."""
from __future__ import annotations

import re
from dataclasses import dataclass

from magis_ray.events import schema as ev

ON_THE_BASE = ("reproduce", "baseline")  # runs on the unchanged code, where failures are expected
_COLLECTING = re.compile(r"^ERROR collecting (\S+)", re.MULTILINE)
UNIMPORTED = "(unittest.loader._FailedTest"


def counted(run: ev.TestsRan) -> bool:
    """Whether `run` is one of the run's test runs (the environment's preparation is not)."""
    return run.purpose != "prepare"


def uncollected(run: ev.TestsRan) -> list[str]:
    """The test files pytest could not collect: reported as an error of the file itself (a result
    named by the file, with no "::test"), or as "ERROR collecting FILE" in the output; and the
    modules unittest could not import (Django's runner: `name (unittest.loader._FailedTest)`),
    whose other results name no file at all (`test_x (app.tests.Class)`)."""
    files = [name for name in run.failed if ("::" not in name and name.endswith(".py")) or UNIMPORTED in name]
    files += [m.group(1) for m in _COLLECTING.finditer(run.output) if m.group(1) not in files]
    return files if run.outcome != "passed" else []


def verdict(run: ev.TestsRan) -> str:
    """The run's outcome in words: "passed", "could not be collected", "timed out", "error",
    "failed as expected" (on the base commit) or "failed"."""
    if run.outcome == "passed":
        return "passed"
    if uncollected(run):
        return "could not be collected"
    if run.outcome == "timeout":
        return "timed out"
    if run.outcome == "error":
        return "error"
    return "failed as expected" if run.purpose in ON_THE_BASE else "failed"


def kind(run: ev.TestsRan) -> str:
    """The verdict's class for colours: ok, expected or bad."""
    said = verdict(run)
    return "ok" if said == "passed" else "expected" if said == "failed as expected" else "bad"


def counts(run: ev.TestsRan) -> str:
    """Its per-test results in words ("2 passed, 1 failed"), or why there are none."""
    if verdict(run) == "could not be collected":
        return ", ".join(uncollected(run)) + " could not be collected"
    return f"{len(run.passed)} passed, {len(run.failed)} failed" if run.passed or run.failed else "no test result"


@dataclass
class Tally:
    """How many test runs, and of them how many passed, failed as expected on the base commit,
    could not be collected, and did not pass (checks only). `add` folds one run in."""

    runs: int = 0
    passed: int = 0
    expected: int = 0
    uncollectable: int = 0
    not_passing: int = 0
    seconds: float = 0.0

    def add(self, run: ev.TestsRan) -> None:
        if not counted(run):
            return
        said = verdict(run)
        self.runs += 1
        self.seconds = round(self.seconds + run.duration_s, 3)
        self.passed += said == "passed"
        self.expected += said == "failed as expected"
        self.uncollectable += said == "could not be collected"
        self.not_passing += said not in ("passed", "failed as expected")

    def words(self) -> str:
        """One line: "3 test runs: 1 passed, 2 failed as expected on the base commit"."""
        if not self.runs:
            return "no test runs"
        parts = [f"{self.passed} passed"]
        if self.expected:
            parts.append(f"{self.expected} failed as expected on the base commit")
        if self.uncollectable:
            parts.append(f"{self.uncollectable} could not be collected")
        other = self.not_passing - self.uncollectable
        if other:
            parts.append(f"{other} not passing")
        return f"{self.runs} test run{'s' if self.runs != 1 else ''}: " + ", ".join(parts)

    def as_json(self) -> dict:
        return {"runs": self.runs, "passed": self.passed, "expected": self.expected, "uncollectable": self.uncollectable,
                "not_passing": self.not_passing, "seconds": self.seconds, "words": self.words()}


def tests_decision(tests_on: bool, prepared: ev.TestsRan | None) -> str:
    """Whether the run's tests run, and if not why, in one line: what the terminal says before the
    team starts, and the run page's tests line. Decided by the run's settings (`tests_on`) and by
    the test environment's preparation (`prepared`), the first event after RunStarted, before any
    role acts; "" while that is under way."""
    if not tests_on:
        return "off (--tests off): the patches are judged from their diffs, as in the MAGIS paper"
    if prepared is None:
        return ""
    said = " ".join(prepared.output.split())
    if prepared.suite is not None:  # a declared environment's preparation says what its suite gave
        return said if prepared.outcome == "passed" else f"off for this run: {said.removeprefix('off: ')[:400]}"
    if prepared.outcome == "passed":
        command = f": {prepared.command}" if prepared.command else ""  # logs before v3 name no command
        return f"on{command} ({said})"
    return f"off for this run: {said[:400]}"


def tally(runs) -> Tally:
    out = Tally()
    for run in runs:
        out.add(run)
    return out


def view_tally(view) -> Tally:
    """The tally of a RunView's test runs: those of its current state (a resume's superseded ones not)."""
    return tally([*view.reproduction_runs, *(r for t in view.tasks.values() for r in t.test_runs)])
