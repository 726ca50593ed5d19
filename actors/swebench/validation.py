"""Validate one candidate task the way SWE-bench's own validation made its records' lists.

The record's eval script runs on its testbed, in the sandbox, as grading runs it (grading.run_eval):
with the test patch alone ("before", what an empty prediction gives), then with the gold patch
applied too ("after"). The lists are read from the two runs' test statuses with the harness's own
rules (swebench.harness.grading's test_passed and test_failed):

- FAIL_TO_PASS: the tests that pass after, and fail, error or do not run at all before (a new
  test whose module does not import without the fix);
- PASS_TO_PASS: the tests that pass both ways.

"Pass" here is PASSED alone: SWE-bench's records list no test its runs report XFAIL (an expected
failure), though grading, judging a prediction, counts XFAIL as passing.

Each side runs twice; a test whose status differs between its side's two runs is flaky and goes
in neither list. When the first two runs show no test going from fail to pass, the second two are
not made. The record, with the lists it now has, is then judged as grading judges it
(grading.judge): it is kept only if at least one test goes from fail to pass, the gold patch
resolves it and the "before" run does not. Every other candidate is dropped with its reason.

Its environment is grading's (grading.spec_for): SWE-bench's spec where the tables have one,
otherwise what the project declares at the base commit and its date."""
from __future__ import annotations

import hashlib
import json
import tempfile
import time
from pathlib import Path

from msgspec.structs import replace

from magis_ray.events.schema import CandidateValidated
from magis_ray.events.settings import GradeSettings

from magis_ray.actors.code.commit_packs import folder_name, has_commits
from magis_ray.actors.code.swebench_harness import harness
from magis_ray.actors.execution.runner import TestRunner
from magis_ray.actors.execution.testbeds import TestbedCache
from .grading import EvalRun, Prepared, Unprepared, judge, prepare, run_eval
from .instances import check_applies

# Why a candidate is dropped: few enough to count by (the event's `detail` says the particulars).
NO_TEST_PATCH = "no test patch"
NO_BASE_COMMIT = "the base commit is not in the repository"
TEST_PATCH_FAILS = "the test patch does not apply"
NO_REPOSITORY = "no repository"
ENVIRONMENT_FAILED = "environment failed"
GOLD_PATCH_FAILS = "the gold patch does not apply"
TESTS_UNFINISHED = "the tests did not finish"
NO_TESTS_RAN = "no test ran"
NO_TEST_CHANGED = "no test changed state"
FLAKY = "tests flaky across two runs"
GOLD_UNRESOLVED = "the gold patch does not resolve it"
EMPTY_RESOLVES = "the test patch alone resolves it"
UNPREPARED = {"repository": NO_REPOSITORY, "spec": ENVIRONMENT_FAILED, "environment": ENVIRONMENT_FAILED}
SIDES = ("before", "after")
DETAIL_KEPT = 600  # characters of a reason's particulars


def record_sha(record: dict) -> str:
    """What identifies a candidate's validation: its base commit and its two patches."""
    text = "\0".join(record.get(name) or "" for name in ("base_commit", "patch", "test_patch"))
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def lists_from(before: list[dict[str, str]], after: list[dict[str, str]]) -> tuple[list[str], list[str], list[str]]:
    """(FAIL_TO_PASS, PASS_TO_PASS, flaky) from the test statuses of the runs of each side, in
    the order the first "after" run names its tests."""
    grading = harness().grading
    flaky = list(dict.fromkeys(test for runs in (before, after) for test in _differing(runs)))
    unstable = set(flaky)
    passed = grading.TestStatus.PASSED.value
    kept = [test for test in after[0] if test not in unstable and after[0][test] == passed]
    fail_to_pass = [test for test in kept if grading.test_failed(test, before[0])]
    pass_to_pass = [test for test in kept if before[0].get(test) == passed]
    return fail_to_pass, pass_to_pass, flaky


def _differing(runs: list[dict[str, str]]) -> list[str]:
    """The tests whose status (or presence) differs between the runs."""
    names = dict.fromkeys(test for statuses in runs for test in statuses)
    return [test for test in names if len({statuses.get(test) for statuses in runs}) > 1]


def unusable(record: dict, repo_path: Path) -> tuple[str, str] | None:
    """Why the candidate cannot be validated before anything is built ((reason, detail)): it has no
    test patch, or its test patch does not apply at its base commit (as the eval script applies
    it: `git apply`, on the test files as the base commit has them); None when it can."""
    test_patch = record.get("test_patch") or ""
    if not test_patch.strip():
        return NO_TEST_PATCH, ""
    if not has_commits(repo_path, (record["base_commit"],)):
        return NO_BASE_COMMIT, f"{record['base_commit']} is not in {repo_path}"
    problem = check_applies(repo_path, record["base_commit"], test_patch)
    return None if problem is None else (TEST_PATCH_FAILS, problem)


def validate(record: dict, repos_dir: str | Path, testbeds: TestbedCache, runner: TestRunner,
             logs_dir: str | Path | None = None, settings: GradeSettings = GradeSettings()) -> CandidateValidated:
    """Validate the candidate `record` (its repository at REPOS_DIR/owner__name); each run's logs
    under LOGS_DIR/INSTANCE/{before,after}-{1,2}, laid out as grading lays out an instance's."""
    started = time.monotonic()
    outcome = CandidateValidated(instance_id=record["instance_id"], record_sha=record_sha(record), kept=False)
    problem = unusable(record, Path(repos_dir) / folder_name(record["repo"]))
    if problem is not None:
        return _dropped(outcome, started, *problem)
    prepared = prepare(record, repos_dir, testbeds, settings)
    if isinstance(prepared, Unprepared):
        return _dropped(outcome, started, UNPREPARED[prepared.step], prepared.error)
    outcome = replace(outcome, environment=prepared.environment, testbed=prepared.testbed_use)
    if logs_dir is not None:
        return _tested(outcome, started, record, prepared, runner, Path(logs_dir) / record["instance_id"])
    with tempfile.TemporaryDirectory(prefix="magis-validate-") as scratch:
        return _tested(outcome, started, record, prepared, runner, Path(scratch))


def _tested(outcome: CandidateValidated, started: float, record: dict, prepared: Prepared, runner: TestRunner,
            folder: Path) -> CandidateValidated:
    """The two sides run (twice each where the first runs show a change), the lists read, the
    record judged with them."""
    runs: dict[str, list[EvalRun]] = {side: [] for side in SIDES}
    for attempt in (1, 2):
        for side in SIDES:
            patch = record["patch"] if side == "after" else ""
            ran = run_eval(record, patch, prepared, runner, folder / f"{side}-{attempt}")
            runs[side].append(ran)
            outcome = replace(outcome, test_runs=outcome.test_runs + 1)
            if ran.error_step == "patch":
                return _dropped(outcome, started, GOLD_PATCH_FAILS, ran.error.partition(": ")[2])
            if ran.error_step:
                words = "with the test patch alone" if side == "before" else "with the gold patch"
                return _dropped(outcome, started, TESTS_UNFINISHED, f"{words}: {ran.error}")
        before, after = ([ran.statuses for ran in runs[side]] for side in SIDES)
        if not after[0]:
            return _dropped(outcome, started, NO_TESTS_RAN, f"no test result in the output of `{prepared.spec.test_command}`")
        if attempt == 1 and not lists_from(before, after)[0]:
            return _dropped(outcome, started, NO_TEST_CHANGED, _unchanged(before[0], after[0]))
    fail_to_pass, pass_to_pass, flaky = lists_from(before, after)
    outcome = replace(outcome, fail_to_pass=fail_to_pass, pass_to_pass=pass_to_pass, flaky=flaky)
    if not fail_to_pass:
        return _dropped(outcome, started, FLAKY, "flaky: " + ", ".join(flaky))
    judged = {**record, "FAIL_TO_PASS": json.dumps(fail_to_pass), "PASS_TO_PASS": json.dumps(pass_to_pass)}
    instance_id = record["instance_id"]
    if not judge(judged, prepared.spec, runs["after"][0].eval_output, folder / "after-1", record["patch"])[instance_id]["resolved"]:
        return _dropped(outcome, started, GOLD_UNRESOLVED, "graded with its new lists, the gold patch is unresolved")
    if judge(judged, prepared.spec, runs["before"][0].eval_output, folder / "before-1", "")[instance_id]["resolved"]:
        return _dropped(outcome, started, EMPTY_RESOLVES, "graded with its new lists, an empty patch resolves it")
    return replace(outcome, kept=True, seconds=time.monotonic() - started)


def _unchanged(before: dict[str, str], after: dict[str, str]) -> str:
    grading = harness().grading
    passing = [test for test in after if grading.test_passed(test, after)]
    also_before = sum(grading.test_passed(test, before) for test in passing)
    return (f"{len(after)} tests ran with the gold patch, {len(passing)} passing, {also_before} of them "
            f"passing with the test patch alone too")


def _dropped(outcome: CandidateValidated, started: float, reason: str, detail: str = "") -> CandidateValidated:
    return replace(outcome, kept=False, reason=reason, detail=" ".join(detail.split())[:DETAIL_KEPT],
                   seconds=time.monotonic() - started)
