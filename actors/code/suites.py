"""How a repository's tests are addressed, run and read: the one place that knows.

Two kinds of suite:
- pytest's: a test is a file or a `file::test` id, run from the repository's root and read from
  pytest's -rA summary (pytest_log.py: the core's own reader, so a plain install tests a
  repository). Every repository pytest can run (sympy's `bin/test` and sphinx's tox run tests
  pytest collects as well), and a user's own repository by default.
- Django's own runner (`tests/runtests.py`): pytest cannot run Django's suite (its settings module,
  its test apps installed per label). A test is a dotted label under the runner's folder
  (`APP.tests`, `APP.tests.Class.test_method`), and the output is read by the SWE-bench harness's
  Django parser (the `grade` extra, through actors/code/swebench_harness.py), as grading
  reads it, so a test has the same name in the team's events and in grading's report.

Which one a repository needs is read from its test command (the SWE-bench spec's, or the user's
`test-cmd`): `suite_for`. Pure logic; the bench runs what it says."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol, Sequence

from magis_ray.actors.code.pytest_log import parse_pytest_log
from magis_ray.actors.code.regression import PytestLayout, TestLayout, nearest_tests
from magis_ray.actors.code.repository import RepoSnapshot

# pytest names every test's outcome, never asks (no cache folder in a read-only tree). The outcomes
# are `-rA`'s letters in its order, spelt out: pytest learnt `A` in 4.5 and an older one ignores it,
# printing no line per test, while a commit before May 2019 gets the pytest of its date.
PYTEST_COMMAND = "python -m pytest -rPpsxXEf -p no:cacheprovider"
# Where the reproduction test lives in a pytest workspace: a scratch file at the repository's root
# (so the root conftest applies and the package imports as the repository's own tests import it),
# which the final diff never contains: it is written into workspaces only, never proposed as a patch.
REPRODUCTION_PATH = "test_magis_reproduction.py"
REPRODUCTION_MODULE = "test_magis_reproduction"  # its module name in a Django test app
# A command that runs a `runtests.py` inside a tests folder is Django's runner (Django's own layout).
# pytest 3 (which a commit of 2018 and before gets) names a failure FAIL, a word the harness's
# rules do not read: the team reads it as FAILED, or its failing reproduction would seem not to run
PYTEST3_FAILURE = re.compile(r"^FAIL (\S+::\S+)", re.M)
DJANGO_RUNNER = re.compile(r"(?:^|\s)(?:\./)?((?:[\w.-]+/)*tests)/runtests\.py(?:\s|$)")
# How unittest reports a test module it could not import (Python 3.5+, and older).
IMPORT_FAILURES = ("unittest.loader._FailedTest", "unittest.loader.ModuleImportFailure")


@dataclass(frozen=True)
class ReproductionPlace:
    path: str  # the test file, in the repository
    target: str  # what the runner is given to run it: the file, or its label
    folder: str = ""  # Django: the test app it belongs to


class RanTests(Protocol):
    """What a suite reads of a test run (a TestsRan event)."""

    passed: list[str]
    failed: list[str]
    output: str


class TestSuite(TestLayout, Protocol):
    name: str  # "pytest" or "django": which prompt guides the QA Engineer
    command: str  # the command that runs tests, before their targets
    load_error: str  # what the runner failing to load a test file is called, for the model

    def command_for(self, targets: Sequence[str]) -> str:
        """The shell command that runs `targets` (files, ids or labels)."""

    def parse(self, log: str, targets: Sequence[str] = ()) -> dict[str, str]:
        """Each test's status in `log`, named as the SWE-bench harness's parser for this runner names it."""

    def reproduction_place(self, snapshot: RepoSnapshot, changed: Sequence[str]) -> ReproductionPlace:
        """Where a reproduction test of a change to the files `changed` goes, and how it is run."""

    def tests_of(self, run: RanTests, target: str) -> tuple[str, ...] | None:
        """The tests of `target` in a run of it alone; None when the runner could not load it
        (a syntax or import error, or no test in it)."""


@dataclass(frozen=True)
class PytestSuite(PytestLayout):
    command: str = PYTEST_COMMAND
    name: str = "pytest"
    load_error: str = "pytest could not collect it"

    def command_for(self, targets: Sequence[str]) -> str:
        return " ".join([self.command, *(shlex.quote(t) for t in targets)])

    def parse(self, log: str, targets: Sequence[str] = ()) -> dict[str, str]:
        """Each test's status from pytest's -rA summary (and pytest 3's FAIL), for tests in
        `targets` (files, folders or test ids; none: any)."""
        files = {target.split("::")[0].rstrip("/") for target in targets}

        def ran_here(test: str) -> bool:
            # pytest's own suite prints its inner runs' summaries ("PASSED [100%]", "FAILED
            # test_foo.py::test1"), which the parser takes for this run's tests
            path = test.split("::")[0]
            return ("::" in test or path.endswith(".py")) and (not files or any(path == f or path.startswith(f + "/") for f in files))

        statuses = {**{test: "FAILED" for test in PYTEST3_FAILURE.findall(log)}, **parse_pytest_log(log)}
        return {test: status for test, status in statuses.items() if ran_here(test)}

    def reproduction_place(self, snapshot: RepoSnapshot, changed: Sequence[str]) -> ReproductionPlace:
        return ReproductionPlace(REPRODUCTION_PATH, REPRODUCTION_PATH)

    def tests_of(self, run: RanTests, target: str) -> tuple[str, ...] | None:
        # A file that fails to import or to parse is reported as an error of the file itself
        # (`ERROR path`), not of a test in it.
        if "::" in target:
            return (target,) if target in run.passed or target in run.failed else None
        if target in run.failed or f"ERROR collecting {target}" in run.output:
            return None
        return tuple(t for t in (*run.passed, *run.failed) if t.startswith(target + "::")) or None


@dataclass(frozen=True)
class DjangoSuite:
    command: str  # e.g. "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
    root: str = "tests"  # the runner's folder: labels are module paths below it
    name: str = "django"
    load_error: str = "Django's test runner could not load it"

    def command_for(self, targets: Sequence[str]) -> str:
        return " ".join([self.command, *(shlex.quote(t) for t in targets)])

    def parse(self, log: str, targets: Sequence[str] = ()) -> dict[str, str]:
        """The harness's Django parser, as grading uses it: a test is `test_method (APP.module.Class)`
        (Python 3.11: `... (APP.module.Class.test_method)`), or its docstring's first line. The
        parser also takes the first word of a failure's heading (`ERROR: test_method (...)`) for
        a test of its own: that echo is left out where the test's whole name is there."""
        from magis_ray.actors.code.swebench_harness import parse_django_log

        results = parse_django_log(log)
        return {test: status for test, status in results.items()
                if " " in test or not any(other.startswith(test + " (") for other in results)}

    def is_test_file(self, path: str) -> bool:
        """A module of a test app below the runner's folder (`tests/APP/tests.py`,
        `tests/APP/test_x.py`), as the runner discovers them (test*.py); the folder's own modules
        (runtests.py, the settings) are none."""
        parts = PurePosixPath(path).parts
        return (path.startswith(self.root + "/") and len(parts) >= len(PurePosixPath(self.root).parts) + 2
                and parts[-1].startswith("test") and parts[-1].endswith(".py"))

    def target_of(self, path: str) -> str:
        """The label of a test module: `tests/APP/test_x.py` -> `APP.test_x`."""
        return str(PurePosixPath(path).relative_to(self.root).with_suffix("")).replace("/", ".")

    def name_of(self, path: str) -> str:
        """Its label: the test app's folder says what it tests (`admin_checks.tests`)."""
        return self.target_of(path)

    def reproduction_place(self, snapshot: RepoSnapshot, changed: Sequence[str]) -> ReproductionPlace:
        """A module of the test app whose tests are nearest the first changed file that has any
        (that app's models and settings are there when it runs); else of `basic`, Django's own
        app for plain model tests, or the first app there is."""
        app = ""
        for path in changed:
            labels = nearest_tests(snapshot, path, self)
            if labels:
                app = labels[0].split(".")[0]
                break
        if not app:
            apps = sorted({PurePosixPath(f.path).relative_to(self.root).parts[0] for f in snapshot.files() if self.is_test_file(f.path)})
            app = "basic" if "basic" in apps else (apps[0] if apps else "magis_reproduction")
        return ReproductionPlace(f"{self.root}/{app}/{REPRODUCTION_MODULE}.py", f"{app}.{REPRODUCTION_MODULE}", app)

    def tests_of(self, run: RanTests, target: str) -> tuple[str, ...] | None:
        # Run alone, every result is the target's (a test named by its docstring names no module);
        # a module unittest could not import is a test of unittest's own.
        ran = (*run.passed, *run.failed)
        if not ran or any(failure in test for test in ran for failure in IMPORT_FAILURES):
            return None
        return tuple(ran)


def suite_for(spec_command: str = "", user_command: str = "") -> TestSuite:
    """The suite the team's tests run in: Django's runner where the command (the user's, else the
    spec's) is it; pytest everywhere else, with the user's own command where given, else the
    spec's where it is the team's pytest with options of its own (a declared environment's)."""
    command = user_command or spec_command
    django = DJANGO_RUNNER.search(command)
    if django is not None:
        return DjangoSuite(command, root=django.group(1))
    return PytestSuite(user_command or (spec_command if spec_command.startswith(PYTEST_COMMAND) else PYTEST_COMMAND))
