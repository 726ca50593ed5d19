"""Grade one SWE-bench prediction without Docker, the way the official harness does.

The harness's steps, in its order, in one sandboxed run on a copy of the instance's testbed (the
repository installed at its base commit in the (repo, version) environment):

1. the prediction applied as the harness applies it: `git apply --verbose`, then with `--reject`,
   then `patch --batch --fuzz=5 -p1` (its GIT_APPLY_CMDS);
2. the harness's own eval script, made by the swebench package's make_eval_script_list_py: the
   spec's eval commands, its install step again (offline, from the testbed's wheelhouse), the test
   patch's files reset and the test patch applied, the test command between the harness's markers;
3. its output judged by the harness's own get_eval_report, written as the instance's report.json.

The instance's logs are laid out as the harness lays them out (MODEL/INSTANCE/ with patch.diff,
eval.sh, run_instance.log, test_output.txt and report.json), and it counts as the harness counts:
completed when its report.json is written (the prediction applied and the eval script finished),
an error otherwise; an empty prediction is not run at all."""
from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from msgspec.structs import replace

from magis_ray.events.schema import InstanceGraded, MemoryUse, PartUse, TestRunTiming, TestsStatus
from magis_ray.events.settings import GradeSettings

from magis_ray.actors.execution.environments import BuildFailed, EnvironmentUnsupported, missing_system_packages
from magis_ray.actors.execution.environments.interpreters import InterpreterMissing
from magis_ray.actors.execution.runner import INPUTS, TestRun, TestRunner
from magis_ray.actors.execution.sandbox import MiB
from magis_ray.actors.execution.inferred import declared_python, inferred_spec
from magis_ray.actors.execution.specs import InstanceSpec, NoSpec, custom_spec, instance_spec, with_record_tests
from magis_ray.actors.code.pytest_log import NETWORK_SIGNS, failures_wanting
from magis_ray.actors.code.swebench_harness import HarnessMissing, eval_script_lines, git_apply_commands, harness, test_spec
from magis_ray.actors.execution.testbeds import Testbed, TestbedCache

OUTPUT_KEPT = 4000  # characters of test output kept in the result (its tail)
EVAL_BEGINS = ">>>>> magis-ray: the eval script begins"


def patch_sha(patch: str | None) -> str:
    """What identifies the graded patch in the grading's stream ("" for a prediction without one)."""
    return "" if patch is None else hashlib.sha256(patch.encode("utf-8", "surrogateescape")).hexdigest()


def custom_setup(settings: GradeSettings) -> bool:
    """Whether the grade settings give the repository's setup themselves (`--env-setup`,
    `--test-cmd`: a user's repository) instead of SWE-bench's specs (which then need no harness)."""
    return bool(settings.env_setup or settings.test_cmd)


def spec_for(record: dict, repo_path: Path, settings: GradeSettings = GradeSettings()) -> InstanceSpec:
    """The user's own install where the settings give one (`env-setup`); else SWE-bench's spec for
    the record, unless the settings give a test command of their own; else, as for a repository
    SWE-bench's tables do not know (a record of SWE-bench-Live, of SWE-rebench, or made by
    `magis-ray tasks make`), what the project declares at the record's base commit; its tests run
    with the settings' test command, or pytest, named as the harness names them."""
    if settings.env_setup:
        return custom_spec(record, settings.env_python or declared_python(record, repo_path), settings.env_setup,
                           settings.test_cmd)
    if not settings.test_cmd:
        try:
            return instance_spec(record, repo_path)
        except NoSpec:
            pass
    return with_record_tests(inferred_spec(record, repo_path, settings.env_python).spec, record, settings.test_cmd)


@dataclass(frozen=True)
class Prepared:
    """An instance ready for its test runs on this node: its spec, its testbed, and what the
    grading's result says of them."""

    spec: InstanceSpec
    testbed: Testbed
    constants: object  # the harness's constants
    environment: PartUse
    testbed_use: PartUse
    warnings: list[str]


@dataclass(frozen=True)
class Unprepared:
    """Why an instance cannot be run: the step that failed (repository, spec or environment), in one line."""

    step: str
    error: str
    needs_internet: bool = False


def prepare(record: dict, repos_dir: str | Path, testbeds: TestbedCache, settings: GradeSettings = GradeSettings(),
            repository: Path | None = None) -> Prepared | Unprepared:
    """The record's spec and its testbed on this node (built unless cached), its repository at
    `repository`, else REPOS_DIR/owner__name (its submodules' mirrors beside it)."""
    repo_path = repository or Path(repos_dir) / record["repo"].replace("/", "__")
    if not repo_path.is_dir():
        return _unprepared("repository", f"no repository for {record['repo']} in {repos_dir} (looked for {repo_path})")
    try:
        constants, _, _, _, _ = harness()
        spec = spec_for(record, repo_path, settings)
        testbed = testbeds.get(spec.testbed, repo_path, mirrors=repos_dir)
    except (HarnessMissing, NoSpec) as exc:
        return _unprepared("spec", str(exc).strip("'\""))
    except (EnvironmentUnsupported, InterpreterMissing) as exc:  # from the project's declarations, or the build
        return _unprepared("environment", f"unsupported: {exc}")
    except BuildFailed as exc:
        return _unprepared("environment", f"build failed at {exc}", needs_internet="needs the internet" in str(exc))
    skipping = missing_system_packages(spec.optional_packages)
    warnings = [f"some tests skip without the system packages {', '.join(skipping)} "
                f"(apt-get install {' '.join(skipping)})"] if skipping else []
    env = testbed.env
    return Prepared(spec, testbed, constants, PartUse(env.key, env.label, env.build_seconds, env.built_now, env.obtained),
                    PartUse(testbed.key, "", testbed.build_seconds, testbed.built_now, testbed.obtained), warnings)


def grade(record: dict, patch: str | None, repos_dir: str | Path, testbeds: TestbedCache, runner: TestRunner,
          model: str = "", logs_dir: str | Path | None = None, settings: GradeSettings = GradeSettings(),
          run_empty: bool = False, install_again: bool = True, repository: Path | None = None) -> InstanceGraded:
    """Grade `patch` (None: the prediction has none) against the SWE-bench `record`, its repository
    at `repository`, else REPOS_DIR/owner__name (its submodules' mirrors beside it). An empty or
    missing patch is not run (the harness's rule) unless `run_empty`: the grader's own check
    that the tests fail without a fix. `install_again=False` leaves out the eval script's install
    step (the benchmark's like-for-like run against `--sandbox none`, which has none)."""
    result = InstanceGraded(instance_id=record["instance_id"], patch_sha=patch_sha(patch), resolved=False, model=model,
                            patch_is_None=patch is None, patch_exists=patch is not None, completed=False)
    if patch in ("", None) and not run_empty:
        return replace(result, ran=False)
    prepared = prepare(record, repos_dir, testbeds, settings, repository)
    if isinstance(prepared, Unprepared):
        return replace(result, error_step=prepared.step, error=prepared.error, needs_internet=prepared.needs_internet)
    result = replace(result, warnings=prepared.warnings, environment=prepared.environment, testbed=prepared.testbed_use)
    if logs_dir is None:
        with tempfile.TemporaryDirectory(prefix="magis-grade-") as scratch:
            return _graded(result, record, patch, prepared, runner, Path(scratch) / record["instance_id"], install_again)
    folder = Path(logs_dir) / (model or "none").replace("/", "__") / record["instance_id"]
    return _graded(result, record, patch, prepared, runner, folder, install_again)


def _graded(result: InstanceGraded, record: dict, patch: str | None, prepared: Prepared, runner: TestRunner,
            folder: Path, install_again: bool = True) -> InstanceGraded:
    """The prediction applied and the eval script run, in one sandboxed run; the report judged."""
    ran = run_eval(record, patch, prepared, runner, folder, install_again)
    run = ran.run
    result = replace(result, run=TestRunTiming(run.duration_s, run.exit_code, run.timed_out),
                     limits=list(run.limits), memory=MemoryUse(run.memory_control, run.peak_memory_bytes // MiB),
                     output_tail=ran.output_tail, patch_successfully_applied=ran.applied)
    if ran.error_step:
        return replace(result, error_step=ran.error_step, error=ran.error)
    entry = judge(record, prepared.spec, ran.eval_output, folder, patch)[record["instance_id"]]
    tests_status = entry.get("tests_status", {})
    resolved = entry["resolved"]
    limits_hit = ["limits: " + "; ".join(result.limits)] if result.limits and not resolved else []
    after = ran.eval_output
    return replace(result, completed=True, patch_successfully_applied=entry["patch_successfully_applied"],
                   resolved=resolved, tests_status=TestsStatus.of_harness(tests_status),
                   run=replace(result.run, tests_parsed=len(ran.statuses)),
                   needs_internet=not resolved and (needs_internet(after, tests_status) or install_needs_the_index(after)),
                   warnings=[*result.warnings, *limits_hit])


@dataclass(frozen=True)
class EvalRun:
    """One sandboxed run of the harness's steps: the patch applied, the eval script run, the
    instance's logs written as the harness lays them out."""

    run: TestRun
    setup_output: str  # what the patch's application printed
    eval_output: str  # what the eval script printed
    applied: bool  # the patch applied (no patch: nothing to apply)
    error_step: str = ""  # "patch" (it does not apply) or "tests" (they did not finish); "" when both went
    error: str = ""
    statuses: dict[str, str] = field(default_factory=dict)  # each test the spec's parser read, with its status

    @property
    def output_tail(self) -> str:
        return (self.eval_output or self.setup_output)[-OUTPUT_KEPT:]


def run_eval(record: dict, patch: str | None, prepared: Prepared, runner: TestRunner, folder: Path,
             install_again: bool = True) -> EvalRun:
    """`patch` applied as the harness applies it and the record's eval script run, in one
    sandboxed run on a copy of the testbed; the logs in `folder`. A run whose tests finished
    holds each test's status as the spec's parser reads it."""
    spec, constants = prepared.spec, prepared.constants
    folder.mkdir(parents=True, exist_ok=True)
    # No patch (--empty): the tree is the testbed's own, installed at this commit already, so the
    # install step again would only rebuild it (minutes of C for astropy) and change nothing.
    reinstall = runner.isolated and bool(patch) and install_again
    script = eval_script(record, spec, reinstall=reinstall)
    inputs = {"eval.sh": script}
    shell = []
    if patch:
        inputs["patch.diff"] = patch if patch.endswith("\n") else patch + "\n"
        shell.append(apply_block(constants))
    shell += [f"echo {EVAL_BEGINS!r}", f"/bin/bash {INPUTS}/eval.sh"]
    run = runner.run(prepared.testbed, "\n".join(shell), inputs=inputs, name="run", logs_dir=folder, installs=reinstall)
    full = Path(run.log_path).read_text(encoding="utf-8", errors="replace")
    Path(run.log_path).unlink()  # split below into the harness's two logs
    before, _, after = full.partition(EVAL_BEGINS)
    if patch and constants.APPLY_PATCH_FAIL in before:
        ran = EvalRun(run, before, after, False, "patch", "the prediction does not apply: " + _apply_reason(before))
        return _write_logs(ran, folder, patch, script, full, "")
    if run.timed_out or not after:
        why = (f"the tests did not finish within {runner.limits.wall_seconds:.0f} s" if run.timed_out
               else f"the eval script did not start (exit {run.exit_code})")
        ran = EvalRun(run, before, after, True, "tests", why + (f" [{'; '.join(run.limits)}]" if run.limits else ""))
        test_output = after + (f"\n\nTimeout error: {runner.limits.wall_seconds:.0f} seconds exceeded." if run.timed_out else "")
        return _write_logs(ran, folder, patch, script, before, test_output)
    ran = EvalRun(run, before, after, True, statuses=spec.parse(_between_markers(after, constants)))
    return _write_logs(ran, folder, patch, script, before, after)


def apply_block(constants) -> str:
    """The harness's three ways of applying the prediction, in its order, with its words."""
    lines = ["applied="]
    for command in git_apply_commands():
        lines.append(f'if [ -z "$applied" ]; then if {command} {INPUTS}/patch.diff; then applied=yes; '
                     f'else echo "Failed to apply patch to container: {command}"; fi; fi')
    lines.append(f'if [ -z "$applied" ]; then echo {constants.APPLY_PATCH_FAIL!r}; exit 1; fi')
    lines.append(f"echo {constants.APPLY_PATCH_PASS!r}")
    return "\n".join(lines)


def eval_script(record: dict, spec: InstanceSpec, reinstall: bool = True) -> str:
    """The harness's eval script for the record: made by the swebench package itself for a SWE-bench
    spec (less its conda activation, which our environments do not need), the same steps for a
    user's own setup. `reinstall`: the install step again (not without a sandbox, where the
    testbed's venv is not a copy)."""
    constants = harness()[0]
    base = record["base_commit"]
    test_patch = record.get("test_patch", "")
    install = list(spec.testbed.install)
    if spec.harness_specs is not None:
        lines = eval_script_lines(record, spec.harness_specs, base, test_patch)
        lines = [line for line in lines if not line.startswith(("source /opt/miniconda3", "conda activate"))]
        if not reinstall:
            lines = [line for line in lines if line not in install]
    else:
        files = " ".join(spec.test_files)
        reset = f"git checkout {base} {files}"
        lines = ["cd /testbed", *spec.eval_commands, *(install if reinstall else []), reset,
                 f"git apply -v - <<'EOF_114329324912'\n{test_patch}\nEOF_114329324912",
                 f": '{constants.START_TEST_OUTPUT}'", spec.test_command, f": '{constants.END_TEST_OUTPUT}'", reset]
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *lines]) + "\n"


def judge(record: dict, spec: InstanceSpec, test_output: str, folder: Path, patch: str | None) -> dict:
    """The instance's report: the harness's get_eval_report on its test output for a SWE-bench spec;
    the same judgement with the spec's parser for a user's own setup."""
    constants, grading, _, _, _ = harness()
    f2p, p2p = _tests(record, "FAIL_TO_PASS"), _tests(record, "PASS_TO_PASS")
    prediction = {"instance_id": record["instance_id"], "model_patch": patch, "model_name_or_path": ""}
    if spec.harness_specs is not None:
        report = grading.get_eval_report(test_spec(record, f2p, p2p), prediction, str(folder / "test_output.txt"), include_tests_status=True)
    else:
        status = spec.parse(_between_markers(test_output, constants))
        entry = {"patch_is_None": patch is None, "patch_exists": patch is not None, "patch_successfully_applied": True,
                 "resolved": False}
        eval_type = constants.EvalType.FAIL_ONLY if record["repo"] in constants.FAIL_ONLY_REPOS else constants.EvalType.PASS_AND_FAIL
        tests = grading.get_eval_tests_report(status, {constants.FAIL_TO_PASS: f2p, constants.PASS_TO_PASS: p2p},
                                              eval_type=eval_type)
        entry["resolved"] = grading.get_resolution_status(tests) == constants.ResolvedStatus.FULL.value
        entry["tests_status"] = tests
        report = {record["instance_id"]: entry}
    (folder / "report.json").write_text(json.dumps(report, indent=4))
    return report


def needs_internet(test_output: str, tests_status: dict) -> bool:
    """Whether the tests that should have passed failed for want of the network: a failure section
    of one of them (pytest's "____ name ____" blocks, or the whole output when there are none)
    says so."""
    failing = [t for key in ("FAIL_TO_PASS", "PASS_TO_PASS") for t in tests_status.get(key, {}).get("failure", [])]
    return bool(failing) and bool(failures_wanting(test_output, failing, NETWORK_SIGNS))


def install_needs_the_index(eval_output: str) -> bool:
    """Whether the eval script's install step failed for a package the testbed lacks (the patch
    adds a dependency; the harness's container would download it, a test run has no network)."""
    before_tests = eval_output.split(">>>>> Start Test Output", 1)[0]
    return "No matching distribution found for" in before_tests


def _between_markers(text: str, constants) -> str:
    start, end = constants.START_TEST_OUTPUT, constants.END_TEST_OUTPUT
    if start in text and end in text:
        return text.split(start, 1)[1].split(end, 1)[0]
    return text


def _apply_reason(text: str) -> str:
    lines = [line for line in text.splitlines() if line.startswith(("error:", "patch:", "Hunk", "can't find file"))]
    return " ".join(" | ".join(lines[:4]).split())[:400] or "no way of the harness's applies it"


def _write_logs(ran: EvalRun, folder: Path, patch, script: str, instance_log: str, test_output: str) -> EvalRun:
    """The harness's files of an instance: patch.diff, eval.sh, run_instance.log, test_output.txt."""
    (folder / "patch.diff").write_text(patch or "")
    (folder / "eval.sh").write_text(script)
    (folder / "run_instance.log").write_text(instance_log + (f"\n{ran.error_step}: {ran.error}\n" if ran.error else ""))
    if test_output:
        (folder / "test_output.txt").write_text(test_output)
    return ran


def _tests(record: dict, name: str) -> list[str]:
    value = record.get(name) or []
    return json.loads(value) if isinstance(value, str) else list(value)


def _unprepared(step: str, why: str, needs_internet: bool = False) -> Unprepared:
    return Unprepared(step, " ".join(why.split())[:600], needs_internet)
