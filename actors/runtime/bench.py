"""The team's test bench on the execution layer: every request gets a fresh scratch checkout of the
base commit, its patches applied as `git apply` applies them, its files written, and its tests run
in the sandbox, in the run's environment (built once per node and cached).

The environment is the repository's SWE-bench spec when the issue names a version the `swebench`
package knows, and otherwise the user's `--env-setup` (default: the project installed editable,
and pytest). Whether one can be built is settled before the run starts (`prepare`), so that a run
with tests never finds out halfway."""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from magis_ray.events.schema import RunSettings, TestsRan

from magis_ray.actors.code.repository import UnsafePath, safe_repo_path
from magis_ray.actors.execution.environments import Environment, EnvironmentBuildError, EnvironmentCache, EnvironmentUnsupported
from magis_ray.actors.execution.interpreters import InterpreterMissing
from magis_ray.actors.execution.runner import TestRunner
from magis_ray.actors.execution.sandbox import Limits, Sandbox, SandboxUnavailable, check_available
from magis_ray.actors.execution.workspaces import Workspace, WorkspaceError, read_file_at
from magis_ray.actors.roles.testing import TestRequest
from magis_ray.actors.runtime.issue import IssueRecord
from magis_ray.actors.execution.specs import HarnessMissing, InstanceSpec, NoSpec, custom_spec, instance_spec

# pytest names every test's outcome (-rA), never asks (no cache folder in a read-only tree).
TEST_COMMAND = "python -m pytest -rA -p no:cacheprovider"
OUTPUT_KEPT = 6_000  # characters of a run's output in its event: the end, where pytest says why
TEST_LIMITS = Limits(wall_seconds=600.0, memory_bytes=4 * 1024**3, output_bytes=64 * 1024)


class BenchUnavailable(Exception):
    """No environment, no sandbox or no interpreter for this repository; the message is one line."""


@dataclass(frozen=True)
class BenchSetup:
    """Everything that says how a run's tests are run; travels to the bench's actor."""

    record: dict  # the issue as a SWE-bench record: repo, base_commit, version, environment_setup_commit
    repo_path: str
    env_setup: str = ""  # the user's own install step ("" : the default or SWE-bench's spec)
    python: str = "3.11"  # for a user's repository
    sandbox: str = "bwrap"  # "bwrap" or "none"
    env_cache: str = ""  # "" : the default cache folder

    @classmethod
    def of(cls, issue: IssueRecord, settings: RunSettings, repo_path: str) -> BenchSetup:
        record = dict(repo=issue.repo, instance_id=issue.instance_id, base_commit=issue.base_commit,
                      version=issue.version, environment_setup_commit=issue.environment_setup_commit)
        return cls(record=record, repo_path=repo_path, env_setup=settings.env_setup, python=settings.test_python or "3.11",
                   sandbox=settings.sandbox, env_cache=os.environ.get("MAGIS_ENV_CACHE", ""))


PACKAGING_FILES = ("pyproject.toml", "setup.py")  # what `pip install -e .` needs (setup.cfg alone is not enough)
# A repository that is no installable package (a folder of modules and tests): its tests import it
# from the checkout, so its environment needs only the test runner.
UNPACKAGED_SETUP = "python -m pip install pytest"


def spec_of(setup: BenchSetup) -> InstanceSpec:
    record = setup.record
    if record.get("version") and not setup.env_setup:
        try:
            return with_pytest(instance_spec(record, Path(setup.repo_path)))
        except NoSpec:
            pass  # a version the harness does not know: the repository is treated as the user's own
    env_setup = setup.env_setup or None
    if env_setup is None and not any(read_file_at(setup.repo_path, record["base_commit"], f) is not None for f in PACKAGING_FILES):
        env_setup = UNPACKAGED_SETUP
    return custom_spec(record, setup.python, env_setup)


def with_pytest(spec: InstanceSpec) -> InstanceSpec:
    """The team's runs are pytest's (TEST_COMMAND: any file, any test id, one output to parse),
    also where SWE-bench's own runner is another (sympy's bin/test, sphinx's tox): there pytest is
    added to the environment, and its output parsed as pytest's. Their tests are plain pytest
    functions; grading keeps the spec's runner."""
    if spec.test_command.split()[:1] == ["pytest"] or "pytest" in spec.recipe.pip_packages:
        return spec
    from swebench.harness.log_parsers.python import parse_log_pytest  # installed: the spec came from it

    recipe = replace(spec.recipe, pip_packages=(*spec.recipe.pip_packages, "pytest"))
    return replace(spec, recipe=recipe, test_command=TEST_COMMAND, parse=lambda log: parse_log_pytest(log, None))


class ExecutionBench:
    def __init__(self, setup: BenchSetup):
        self._setup = setup
        self._spec: InstanceSpec | None = None
        self._env: Environment | None = None
        sandbox = Sandbox(mode=setup.sandbox)
        self._runner = TestRunner(sandbox, TEST_LIMITS)
        self.cache = EnvironmentCache(root=Path(setup.env_cache), sandbox=sandbox) if setup.env_cache else EnvironmentCache(sandbox=sandbox)

    def environment(self) -> Environment:
        """The run's environment, built now if this node has none; BenchUnavailable says why not."""
        if self._env is None:
            try:
                if self._setup.sandbox != "none":
                    check_available()
                self._spec = spec_of(self._setup)
                self._env = self.cache.get(self._spec.recipe, self._setup.repo_path)
            except (HarnessMissing, SandboxUnavailable, EnvironmentUnsupported, InterpreterMissing) as exc:
                raise BenchUnavailable(str(exc)) from None
            except EnvironmentBuildError as exc:
                raise BenchUnavailable(f"the environment does not build: {exc}") from None
        return self._env

    def prepare(self) -> TestsRan:
        """Bench.prepare: the environment, ready, or why it cannot be."""
        try:
            env = self.environment()
        except BenchUnavailable as exc:
            return TestsRan(purpose="prepare", command="", outcome="error", output=str(exc))
        how = f"built in {env.build_seconds:.0f} s" if env.built_now else "from this node's cache"
        return TestsRan(purpose="prepare", command="", outcome="passed", output=f"environment {env.label or env.key}: {how}",
                        duration_s=round(env.build_seconds, 3))

    def run(self, request: TestRequest) -> TestsRan:
        env = self.environment()
        command = " ".join([TEST_COMMAND, *(shlex.quote(t) for t in request.targets)])
        with Workspace(self._setup.repo_path, self._setup.record["base_commit"]) as workspace:
            for number, diff in enumerate((d for d in request.patches if d.strip()), 1):
                try:
                    workspace.apply(diff, f"patch-{number}")
                except WorkspaceError as exc:
                    return self._error(request, command, f"patch {number} does not apply: {exc}")
            for path, text in request.files:
                try:
                    target = workspace.path / safe_repo_path(path)
                except UnsafePath as exc:
                    return self._error(request, command, f"a test file outside the repository: {exc}")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
            run = self._runner.run(env, workspace, command, self._spec.parse, name=request.purpose)
        if run.timed_out:
            outcome = "timeout"
        elif run.exit_code == 0:
            outcome = "passed"
        else:
            outcome = "failed" if run.failed else "error"
        return TestsRan(
            purpose=request.purpose, command=command, outcome=outcome, exit_code=run.exit_code, passed=run.passed,
            failed=run.failed, output=run.output[-OUTPUT_KEPT:], duration_s=round(run.duration_s, 3),
        )

    @staticmethod
    def _error(request: TestRequest, command: str, why: str) -> TestsRan:
        return TestsRan(purpose=request.purpose, command=command, outcome="error", output=why)
