"""The team's test bench on the execution layer: every request runs on a fresh copy of the run's
testbed (the repository installed at the base commit in the run's environment, built once per
node and cached), with its patches applied as `git apply` applies them and its files written, and
its tests run, all in the sandbox.

The environment and the install are the repository's SWE-bench spec when the issue names a version
the SWE-bench harness knows (the same testbeds grading uses; the `grade` extra); the user's
`--env-setup` where given; and otherwise what the project itself declares (execution/inferred.py),
which needs nothing beyond a plain install. The tests run in the repository's own suite
(actors/code/suites.py), chosen from the spec's test command or the user's `test-cmd`: pytest, or
Django's runner with its labels, read by the parser grading reads it with.

Whether tests can run is settled before the team starts (`prepare`): the testbed is built and,
for a declared environment, the suite collected (what it finds missing added) and run once at the
base (execution/preparation.py). Its event names the test command and what the suite gave, or says
in words about the run why its tests cannot run, so that a run with tests never finds out halfway."""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from magis_ray.events.errors import Unavailable
from magis_ray.events.schema import RunSettings, TestsRan
from magis_ray.events.settings import size_bytes

from magis_ray.actors.code.commit_packs import mirrors_beside
from magis_ray.actors.code.repository import UnsafePath, safe_repo_path
from magis_ray.actors.code.suites import PYTEST_COMMAND, TestSuite, suite_for
from magis_ray.actors.execution.sharing.artifacts import BUILT, FETCHED, open_artifact_store
from magis_ray.actors.execution.environments import BuildFailed, EnvironmentCache, EnvironmentUnsupported
from magis_ray.actors.execution.environments.interpreters import InterpreterMissing
from magis_ray.actors.execution.runner import INPUTS, TestRunner, limits_for_test_runs
from magis_ray.actors.execution.sandbox import MiB, SandboxUnavailable, open_sandbox
from magis_ray.actors.execution.inferred import Inference, declared_python, inferred_spec
from magis_ray.actors.execution.preparation import prepare_suite
from magis_ray.actors.execution.specs import InstanceSpec, NoSpec, custom_spec, instance_spec
from magis_ray.actors.code.swebench_harness import INSTALL, HarnessMissing, available as harness_available
from magis_ray.actors.execution.testbeds import Testbed, TestbedCache
from magis_ray.actors.roles.testing import TestRequest
from magis_ray.actors.runtime.issue import IssueRecord

OUTPUT_KEPT = 6_000  # characters of a run's output in its event: the end, where the runner says why
PATCH_FAILED = 97  # the exit code of a run whose patch did not apply
# A patch that changes these changes what the install step built: the testbed's install runs again.
BUILD_INPUTS = re.compile(r"^(setup\.py|setup\.cfg|pyproject\.toml|MANIFEST\.in)$|\.(c|h|cpp|cc|pyx|pxd|pxi)$")


class BenchUnavailable(Unavailable):
    """No environment, no sandbox or no interpreter for this repository; the message is one line."""


@dataclass(frozen=True)
class BenchSetup:
    """Everything that says how a run's tests are run; travels to the bench's actor."""

    record: dict  # the issue as a SWE-bench record: repo, base_commit, version, environment_setup_commit
    repo_path: str
    settings: RunSettings  # the run's, whole: its environment, test command, sandbox, limits and artifact store
    # what a declared environment's preparation decided: distributions its collection found missing,
    # added to the environment, and pytest's options for every run
    added: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    def __hash__(self) -> int:  # `record` is a dict; a worker's benches are cached by setup (services._bench_for)
        return hash(repr(self))

    @classmethod
    def of(cls, issue: IssueRecord, settings: RunSettings, repo_path: str) -> BenchSetup:
        record = dict(repo=issue.repo, instance_id=issue.instance_id, base_commit=issue.base_commit,
                      version=issue.version, environment_setup_commit=issue.environment_setup_commit)
        return cls(record=record, repo_path=repo_path, settings=settings)

    @property
    def python(self) -> str:
        """The interpreter of a repository's environment the settings choose ("": the newest the
        project allows); a run of an earlier version recorded the one it used as test_python."""
        return self.settings.python or self.settings.test_python


def recipe_of(setup: BenchSetup) -> tuple[InstanceSpec, Inference | None]:
    """The run's spec, and the inference it comes from where the project's declarations give it:
    SWE-bench's, as grading has it (the same environment and testbed), when the issue names a
    version the swebench package knows; the user's own `env-setup` where given; else what the
    project declares at the base commit (with what its preparation added)."""
    record, settings = setup.record, setup.settings
    if record.get("version") and not settings.env_setup:
        try:
            return instance_spec(record, Path(setup.repo_path)), None
        except NoSpec:
            pass  # a version the harness does not know: the repository is treated as any other
        except HarnessMissing:
            raise BenchUnavailable(
                f"the issue names version {record['version']} of {record['repo']}, so its tests need SWE-bench's recipe "
                f"for that version, which comes with the SWE-bench harness ({INSTALL}); or give --env-setup to "
                "install the repository your own way") from None
    if settings.env_setup:
        return custom_spec(record, setup.python or declared_python(record, setup.repo_path), settings.env_setup), None
    inference = inferred_spec(record, setup.repo_path, setup.python).with_added(setup.added).with_options(setup.options)
    return inference.spec, inference


def with_pytest(spec: InstanceSpec) -> InstanceSpec:
    """The same testbed with pytest installed into it too: where pytest can run a repository's
    tests, the team's runs are pytest's (any file, any test id, one output to parse), also where
    SWE-bench's own runner is another and the install does not bring pytest (sympy's bin/test).
    The environment, the heavy part, stays the one grading uses."""
    return replace(spec, testbed=replace(spec.testbed, install=(*spec.testbed.install, "python -m pip install pytest")))


def suite_of(spec: InstanceSpec, setup: BenchSetup) -> TestSuite:
    """The suite the run's tests run in: the user's test-cmd where given, else the spec's own
    runner where pytest cannot run the repository's tests (Django's), else pytest."""
    return suite_for(spec.test_command, setup.settings.test_cmd)


class ExecutionBench:
    def __init__(self, setup: BenchSetup):
        self._setup = setup
        self._spec: InstanceSpec | None = None
        self._inference: Inference | None = None  # where the project's declarations give the recipe
        self._suite: TestSuite | None = None
        self._testbed: Testbed | None = None
        settings = setup.settings
        sandbox = open_sandbox(settings.sandbox)
        self._runner = TestRunner(sandbox, limits_for_test_runs(settings.test_timeout, size_bytes(settings.test_memory)))
        # in this node's own cache (its node settings), shared through the run's artifact store
        envs = EnvironmentCache(sandbox=sandbox, artifacts=open_artifact_store(settings.artifact_store))
        self.cache = TestbedCache(envs)

    def _choose_recipe(self) -> None:
        """The run's spec and suite, settled once (nothing built yet); BenchUnavailable says why
        there can be none here."""
        if self._spec is not None:
            return
        try:
            self._runner.sandbox.check()
            self._spec, self._inference = recipe_of(self._setup)
        except (SandboxUnavailable, EnvironmentUnsupported, InterpreterMissing) as exc:
            raise BenchUnavailable(why_no_tests(exc)) from None
        self._suite = suite_of(self._spec, self._setup)
        if self._suite.name == "django" and not harness_available():
            raise BenchUnavailable("the test command runs Django's runner (tests/runtests.py), whose output is "
                                   f"read with the SWE-bench harness's parser ({INSTALL})")

    def testbed(self) -> Testbed:
        """The run's testbed, built now if this node has none; BenchUnavailable says why not."""
        if self._testbed is None:
            self._choose_recipe()
            try:
                repo_path = Path(self._setup.repo_path)
                mirrors = mirrors_beside(repo_path)
                self._testbed = self.cache.get(self._spec.testbed, repo_path, mirrors=mirrors)
                # pytest as the team runs it, where the spec's install did not bring it (the user's own
                # command is theirs to provide for; a declared environment has it)
                if self._inference is None and self._suite.command == PYTEST_COMMAND and not self._has_pytest(self._testbed):
                    self._spec = with_pytest(self._spec)
                    self._testbed = self.cache.get(self._spec.testbed, repo_path, mirrors=mirrors)
            except (SandboxUnavailable, EnvironmentUnsupported, InterpreterMissing, BuildFailed) as exc:
                raise BenchUnavailable(why_no_tests(exc)) from None
        return self._testbed

    def _has_pytest(self, testbed: Testbed) -> bool:
        probe = self._runner.run(testbed, "python -m pytest --version", limits=replace(self._runner.limits, wall_seconds=120),
                                 installs=False)
        return probe.exit_code == 0

    def prepare(self, collect_only: bool = False) -> TestsRan:
        """Bench.prepare: the testbed, ready, with the command its tests run with (the team reads
        the suite from it), or why it cannot be; a declared environment's suite collected and run
        at the base first (unless `collect_only`; its report in the event)."""
        try:
            self._choose_recipe()
            if self._inference is not None:
                return self._prepare_suite(collect_only)
            testbed = self.testbed()
        except BenchUnavailable as exc:
            return TestsRan(purpose="prepare", command="", outcome="error", output=str(exc))
        seconds = testbed.env.build_seconds + testbed.build_seconds
        how = ("built" if BUILT in (testbed.obtained, testbed.env.obtained) else
               "fetched from the artifact store" if FETCHED in (testbed.obtained, testbed.env.obtained) else "")
        how = f"{how} in {seconds:.0f} s" if how else "from this node's cache"
        return TestsRan(purpose="prepare", command=self._suite.command, outcome="passed",
                        output=f"environment {testbed.label or testbed.key}: {how}", duration_s=round(seconds, 3))

    def _prepare_suite(self, collect_only: bool) -> TestsRan:
        """A declared environment's preparation: what its suite's collection found missing added,
        the suite run once at the base. The testbed it leaves is the run's."""
        repo_path = Path(self._setup.repo_path)
        try:
            prepared = prepare_suite(self._spec, self.cache, self._runner, repo_path, mirrors_beside(repo_path),
                                     collect_only=collect_only, inference=self._inference)
        except (EnvironmentUnsupported, InterpreterMissing, BuildFailed) as exc:
            raise BenchUnavailable(why_no_tests(exc)) from None
        self._inference, self._spec, self._testbed = prepared.inference, prepared.spec, prepared.testbed
        self._suite = suite_of(self._spec, self._setup)  # with the options the preparation chose
        report = prepared.report
        return TestsRan(purpose="prepare", command=self._suite.command, outcome="passed" if prepared.usable else "error",
                        output=prepared.line(), duration_s=round(report.build_seconds + report.collect_seconds
                                                                 + report.run_seconds, 3), suite=report)

    def run(self, request: TestRequest) -> TestsRan:
        testbed = self.testbed()
        suite = self._suite
        command = suite.command_for(request.targets)
        inputs: dict[str, str] = {}
        lines = []
        for number, diff in enumerate((d for d in request.patches if d.strip()), 1):
            inputs[f"patch-{number}.diff"] = diff if diff.endswith("\n") else diff + "\n"
            lines.append(f"git apply -v {INPUTS}/patch-{number}.diff || {{ echo 'magis-ray: patch {number} does not apply'; "
                         f"exit {PATCH_FAILED}; }}")
        for number, (path, text) in enumerate(request.files, 1):
            try:
                target = safe_repo_path(path)
            except UnsafePath as exc:
                return self._error(request, command, f"a test file outside the repository: {exc}")
            inputs[f"file-{number}"] = text
            lines.append(f"mkdir -p {shlex.quote(os.path.dirname(target) or '.')} && cp {INPUTS}/file-{number} {shlex.quote(target)}")
        reinstall = self._runner.isolated and any(BUILD_INPUTS.search(p) for diff in request.patches for p in changed_paths(diff))
        if reinstall:
            lines += [f"{step} >/dev/null 2>&1 || echo 'magis-ray: the install step failed again after the patch'"
                      for step in self._spec.testbed.install]
        lines += [*exports(self._spec.eval_commands), command]
        parse = partial(suite.parse, targets=tuple(request.targets))
        run = self._runner.run(testbed, "\n".join(lines), parse, inputs=inputs, name=request.purpose, installs=reinstall)
        if run.exit_code == PATCH_FAILED and "magis-ray: patch" in run.output:
            number = re.search(r"magis-ray: patch (\d+) does not apply", run.output)
            reason = " | ".join(line for line in run.output.splitlines() if line.startswith("error:"))[:300]
            return self._error(request, command, f"patch {number.group(1) if number else '?'} does not apply: {reason}")
        if run.timed_out:
            outcome = "timeout"
        elif run.exit_code == 0:
            outcome = "passed"
        else:
            outcome = "failed" if run.failed else "error"
        return TestsRan(
            purpose=request.purpose, command=command, outcome=outcome, exit_code=run.exit_code, passed=run.passed,
            failed=run.failed, output=run.output[-OUTPUT_KEPT:], duration_s=round(run.duration_s, 3), limits=list(run.limits),
            memory_control=run.memory_control, peak_memory_mb=run.peak_memory_bytes // MiB,
        )

    @staticmethod
    def _error(request: TestRequest, command: str, why: str) -> TestsRan:
        return TestsRan(purpose=request.purpose, command=command, outcome="error", output=why)


def why_no_tests(exc: Exception) -> str:
    """Why this run's tests cannot run, in words about the run (the execution layer's reasons are
    also grading's, and name its flags)."""
    if isinstance(exc, SandboxUnavailable):
        return f"the tests run in a sandbox, and none can be made here: {exc}"
    if isinstance(exc, InterpreterMissing):
        # grading's `--python` is no flag of a run's: the interpreter has to be on the machine
        return f"no interpreter for the repository's tests: {str(exc).split(' or pass --python')[0]}"
    if isinstance(exc, EnvironmentUnsupported):
        return f"the repository's test environment cannot be made here: {exc}"
    return f"the repository's test environment does not build: {exc}"


def exports(eval_commands: tuple[str, ...]) -> list[str]:
    """The spec's eval steps that set the tests' environment (Django's locale: LANG, LC_ALL), as
    grading's eval script has them; not those that set up the machine (locale-gen), which is the
    testbed's to have, and which a test run without the sandbox must not do to the host."""
    return [c for c in eval_commands if c.startswith("export ")]


def changed_paths(diff: str) -> list[str]:
    """The files a diff touches (its `+++ b/` names)."""
    return re.findall(r"^\+\+\+ b/(\S+)", diff, flags=re.M)
