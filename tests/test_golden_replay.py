"""Schema evolution: a log written by the first event version (a real run of the example with the
scripted model, committed with the prompt templates of that time) replays under the current code.
Each replay is a process of its own: a process reads its prompt templates (MAGIS_PROMPTS_DIR) once."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from commands import magis

ROOT = Path(__file__).parents[1]
GOLDEN = ROOT / "tests" / "golden"


def test_the_v1_example_run_replays_without_divergence(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "examples" / "calc" / "make_repo.py"), str(tmp_path / "calc")], check=True,
                   capture_output=True)
    result = magis("replay", GOLDEN / "v1_example_run.jsonl", "--repo", tmp_path / "calc", env={"MAGIS_PROMPTS_DIR": str(GOLDEN / "v1_prompts")},
                   timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "replayed 37 events: no divergence" in result.stdout


def test_the_v2_run_with_tests_and_candidates_replays_without_running_a_test(tmp_path):
    """tests/golden/v2_tests_run.jsonl (made by tests/make_golden_v2.py) holds a reproduction test,
    regression baselines, checks of three candidates and the choice among them. Replay reuses every
    recorded outcome: it builds no environment and makes no workspace."""
    subprocess.run([sys.executable, str(ROOT / "examples" / "calc" / "make_repo.py"), str(tmp_path / "calc")], check=True,
                   capture_output=True)
    log = GOLDEN / "v2_tests_run.jsonl"
    envs, scratch = tmp_path / "envs", tmp_path / "tmp"
    envs.mkdir()
    scratch.mkdir()
    env = {"MAGIS_PROMPTS_DIR": str(GOLDEN / "v2_prompts"), "MAGIS_ENV_CACHE": str(envs), "TMPDIR": str(scratch)}
    result = magis("replay", log, "--repo", tmp_path / "calc", env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    events = len(log.read_bytes().splitlines())
    assert f"replayed {events} events: no divergence" in result.stdout
    assert log.read_text().count('"type":"TestsRan"') == 9
    assert list(envs.iterdir()) == [] and not [p for p in scratch.iterdir() if p.name.startswith("magis-ws-")]


def test_the_v2_grading_log_decodes_to_the_results_it_reported():
    """tests/golden/v2_grading_run.jsonl: a grading's stream as `magis-ray grade --gold` wrote it.
    Its InstanceGraded records are the grader's results as they are, so they still make the same
    harness report and give back the harness's tests_status."""
    from magis_ray.actors.swebench.grading_batch import official_report
    from magis_ray.events.codec import decode_recorded
    from magis_ray.events.schema import InstanceGraded
    from magis_ray.events.streams import StreamKind

    records = [decode_recorded(line) for line in (GOLDEN / "v2_grading_run.jsonl").read_bytes().splitlines()]
    assert {StreamKind.of(r.run_id) for r in records} == {StreamKind.GRADING}
    graded = [r.event for r in records if isinstance(r.event, InstanceGraded)]
    assert [g.instance_id for g in graded] == ["calc__calc-1"] and graded[0].completed
    assert graded[0].tests_status.as_harness() == {
        "FAIL_TO_PASS": {"success": ["tests/test_more.py::test_mean_of_two"], "failure": []},
        "PASS_TO_PASS": {"success": ["tests/test_more.py::test_median_of_one"], "failure": []},
        "FAIL_TO_FAIL": {"success": [], "failure": []}, "PASS_TO_FAIL": {"success": [], "failure": []}}
    report = official_report(graded, ["calc__calc-1"], ["calc__calc-1"])
    assert (report["resolved_ids"], report["completed_ids"], report["error_ids"]) == (["calc__calc-1"], ["calc__calc-1"], [])


def test_the_v5_validation_log_decodes_to_the_tasks_it_kept_and_the_reasons_it_dropped():
    """tests/golden/v5_validation_run.jsonl: a validation's stream as `magis-ray tasks validate`
    wrote it (tests/test_tasks_validate.py's candidates): the kept task with its lists, and every
    other candidate with the reason the validation gave."""
    from magis_ray.actors.swebench import validation
    from magis_ray.events.codec import decode_recorded
    from magis_ray.events.schema import CandidateValidated, ValidationStarted
    from magis_ray.events.streams import StreamKind

    records = [decode_recorded(line) for line in (GOLDEN / "v5_validation_run.jsonl").read_bytes().splitlines()]
    assert {StreamKind.of(r.run_id) for r in records} == {StreamKind.VALIDATION}
    started, *validated = [r.event for r in records]
    assert isinstance(started, ValidationStarted) and all(isinstance(v, CandidateValidated) for v in validated)
    assert started.candidates == [v.instance_id for v in validated]
    [kept] = [v for v in validated if v.kept]
    assert (kept.fail_to_pass, kept.pass_to_pass) == (["tests/test_stats.py::test_mean"], ["tests/test_stats.py::test_median"])
    assert sorted(v.reason for v in validated if not v.kept) == sorted([
        validation.NO_TEST_CHANGED, validation.NO_TESTS_RAN, validation.ENVIRONMENT_FAILED, validation.TEST_PATCH_FAILS,
        validation.GOLD_PATCH_FAILS])


def test_the_v2_run_with_its_model_settings_recorded_the_version_2_way_replays(tmp_path):
    """tests/golden/v2_model_run.jsonl (tests/make_golden_v2_model.py): a developer with a model of
    its own, and the endpoint's limits, recorded where version 2 kept them."""
    subprocess.run([sys.executable, str(ROOT / "examples" / "calc" / "make_repo.py"), str(tmp_path / "calc")], check=True,
                   capture_output=True)
    log = GOLDEN / "v2_model_run.jsonl"
    result = magis("replay", log, "--repo", tmp_path / "calc", env={"MAGIS_PROMPTS_DIR": str(GOLDEN / "v2_model_prompts")}, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"replayed {len(log.read_bytes().splitlines())} events: no divergence" in result.stdout
