"""Grade one SWE-bench prediction without Docker, the way the official harness does.

The harness's steps, in its order: a checkout of the base commit in the (repo, version)
environment, the prediction applied with `git apply`, the test patch's files reset to the base
commit and the test patch applied, the spec's test command with the test patch's files as
directives, the output parsed with the harness's own log parser, and FAIL_TO_PASS / PASS_TO_PASS
judged with the harness's own report functions. Every step runs in the sandbox except git.
The result has the official report's fields (patch_is_None, patch_exists,
patch_successfully_applied, resolved, tests_status) plus where the time went and, when a step
failed, which step and why.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from magis_ray.actors.execution.environments import EnvironmentBuildError, EnvironmentCache, EnvironmentUnsupported
from magis_ray.actors.execution.interpreters import InterpreterMissing
from magis_ray.actors.execution.runner import TestRunner
from magis_ray.actors.execution.workspaces import Workspace, WorkspaceError
from magis_ray.actors.execution.specs import HarnessMissing, custom_spec, harness, instance_spec

OUTPUT_KEPT = 4000  # characters of test output kept in the result (its tail)


@dataclass
class GradeResult:
    instance_id: str
    model: str = ""
    resolved: bool = False
    patch_is_None: bool = False
    patch_exists: bool = False
    patch_successfully_applied: bool = False
    tests_status: dict = field(default_factory=dict)  # FAIL_TO_PASS / PASS_TO_PASS: {success, failure}
    error_step: str = ""  # "" when every step ran; else spec / environment / checkout / patch / test_patch / tests
    error: str = ""
    env_key: str = ""
    env_label: str = ""
    env_build_seconds: float = 0.0  # when this grading built it; 0 when it came from the cache
    env_built_now: bool = False
    test_seconds: float = 0.0
    test_exit_code: int | None = None
    timed_out: bool = False
    tests_parsed: int = 0
    output_tail: str = ""
    node: str = ""
    warnings: list = field(default_factory=list)

    def report(self) -> dict:
        """The official harness's report entry for this instance."""
        entry = {"patch_is_None": self.patch_is_None, "patch_exists": self.patch_exists,
                 "patch_successfully_applied": self.patch_successfully_applied, "resolved": self.resolved}
        if self.tests_status:
            entry["tests_status"] = self.tests_status
        return {self.instance_id: entry}


@dataclass(frozen=True)
class CustomSetup:
    """A user's repository instead of SWE-bench's specs (`--env-setup`, `--test-cmd`)."""

    python: str
    env_setup: str | None = None
    test_cmd: str | None = None


def spec_for(record: dict, repo_path: Path, custom: CustomSetup | None = None):
    """SWE-bench's spec for the record, or the user's own setup when one is given."""
    if custom is not None:
        return custom_spec(record, custom.python, custom.env_setup, custom.test_cmd)
    return instance_spec(record, repo_path)


def grade(record: dict, patch: str | None, repos_dir: str | Path, cache: EnvironmentCache, runner: TestRunner,
          model: str = "", logs_dir: str | Path | None = None, custom: CustomSetup | None = None) -> GradeResult:
    """Grade `patch` (None: the prediction has none) against the SWE-bench `record`."""
    result = GradeResult(instance_id=record["instance_id"], model=model)
    result.patch_is_None = patch is None
    result.patch_exists = bool(patch and patch.strip())
    repo_path = Path(repos_dir) / record["repo"].replace("/", "__")
    if not repo_path.is_dir():
        return _failed(result, "repository", f"no repository for {record['repo']} in {repos_dir} (looked for {repo_path})")
    try:
        constants, grading, _, _, _ = harness()
        spec = spec_for(record, repo_path, custom)
    except (HarnessMissing, KeyError) as exc:
        return _failed(result, "spec", str(exc).strip("'\""))
    if patch is None:
        return result  # the harness reports such a prediction as it is, without running anything
    try:
        env = cache.get(spec.recipe, repo_path)
    except (EnvironmentUnsupported, InterpreterMissing) as exc:
        return _failed(result, "environment", f"unsupported: {exc}")
    except EnvironmentBuildError as exc:
        return _failed(result, "environment", f"build failed at {exc}")
    result.env_key, result.env_label = env.key, env.label
    result.env_build_seconds, result.env_built_now = env.build_seconds, env.built_now
    try:
        workspace = Workspace(repo_path, record["base_commit"])
    except WorkspaceError as exc:
        return _failed(result, "checkout", str(exc))
    with workspace:
        if workspace.missing:
            shown = ", ".join(workspace.missing[:5]) + (" ..." if len(workspace.missing) > 5 else "")
            result.warnings.append(f"the repository lacks the content of {len(workspace.missing)} file(s) at the base "
                                   f"commit (a clone cut by a size limit?): {shown}")
        if result.patch_exists:
            try:
                workspace.apply(patch, "prediction")
            except WorkspaceError as exc:
                return _failed(result, "patch", f"the prediction does not apply: {exc}")
        # An empty prediction changes nothing and the tests still run: that is what --empty checks.
        result.patch_successfully_applied = True
        workspace.restore(list(spec.test_files))
        if record.get("test_patch", "").strip():
            try:
                workspace.apply(record["test_patch"], "test_patch")
            except WorkspaceError as exc:
                return _failed(result, "test_patch", f"the test patch does not apply: {exc}")
        run = runner.run(env, workspace, spec.test_command, spec.parse, prelude=spec.eval_commands)
        if logs_dir is not None:
            folder = Path(logs_dir) / record["instance_id"]
            folder.mkdir(parents=True, exist_ok=True)
            for log in workspace.logs.iterdir():
                (folder / log.name).write_bytes(log.read_bytes())
    result.test_seconds, result.test_exit_code, result.timed_out = run.duration_s, run.exit_code, run.timed_out
    result.tests_parsed = len(run.results)
    result.output_tail = run.output[-OUTPUT_KEPT:]
    gold = {constants.FAIL_TO_PASS: _tests(record, "FAIL_TO_PASS"), constants.PASS_TO_PASS: _tests(record, "PASS_TO_PASS")}
    eval_type = constants.EvalType.FAIL_ONLY if record["repo"] in constants.FAIL_ONLY_REPOS else constants.EvalType.PASS_AND_FAIL
    if run.timed_out:
        # The harness writes TESTS_TIMEOUT into the log and reports nothing parsed.
        result.error_step, result.error = "tests", f"the tests did not finish within {runner.limits.wall_seconds:.0f} s"
        status = {}
    else:
        status = run.results
        if not status:
            result.error_step, result.error = "tests", f"no test results in the output (exit {run.exit_code})"
    report = grading.get_eval_tests_report(status, gold, eval_type=eval_type)
    result.tests_status = {k: report[k] for k in (constants.FAIL_TO_PASS, constants.PASS_TO_PASS)}
    result.resolved = grading.get_resolution_status(report) == constants.ResolvedStatus.FULL.value
    return result


def _tests(record: dict, name: str) -> list[str]:
    value = record.get(name) or []
    return json.loads(value) if isinstance(value, str) else list(value)


def _failed(result: GradeResult, step: str, why: str) -> GradeResult:
    result.error_step, result.error = step, " ".join(why.split())[:600]
    return result


def grade_timed(*args, **kwargs) -> tuple[GradeResult, float]:
    start = time.monotonic()
    result = grade(*args, **kwargs)
    return result, time.monotonic() - start
