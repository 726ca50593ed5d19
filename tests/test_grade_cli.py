"""`magis-ray grade` end to end on the calc fixture (a user's repository: --test-cmd), through the
real command, a real store, real environments and the real sandbox: gold resolves, empty does
not, the report has the official shape, `eval` takes resolved from the results, a grading killed
with kill -9 goes on without grading a finished instance twice, and Ray tasks grade in parallel."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from execfixtures import GOLD, TEST_PATCH, make_calc_repos, record, write_dataset
from magis_ray.actors.execution.sandbox import bwrap_path
from magis_ray.events.schema import GradingStarted, InstanceGraded, InstanceGradingStarted
from magis_ray.store import open_store

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")
MAGIS = [sys.executable, "-m", "magis_ray.cli.main"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("grade")
    repo, base = make_calc_repos(root / "repos")
    return {"root": root, "repos": root / "repos", "base": base, "envs": root / "envs"}


def grade_args(setup, dataset: Path, store: Path, *extra: str) -> list[str]:
    return ["grade", *extra, "--dataset", str(dataset), "--repos-dir", str(setup["repos"]), "--store", str(store),
            "--env-cache", str(setup["envs"]), "--test-cmd", "pytest -rA", "--timeout", "120", "--memory", "2G"]


def magis(args, cwd, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "MAGIS_LOG_LEVEL": "warning"}
    return subprocess.run([*MAGIS, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, **kwargs)


def stream(store: Path, name: str) -> list:
    with open_store(str(store)) as s:
        return [r.event for r in s.read(f"grading:{name}")]


def test_gold_resolves_empty_does_not_and_the_report_has_the_official_shape(setup, tmp_path):
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"])])
    store = tmp_path / "store"
    gold = magis(grade_args(setup, dataset, store, "--gold", "--no-ray"), tmp_path)
    assert gold.returncode == 0, gold.stderr
    assert "resolved: 1 of 1" in gold.stdout
    report = json.loads((store / "gradings" / "gold@calc.json").read_text())
    assert report["resolved_ids"] == ["calc__calc-1"] and report["error_ids"] == []
    entry = report["instances"]["calc__calc-1"]
    assert entry["resolved"] and entry["patch_successfully_applied"]
    assert entry["tests_status"]["FAIL_TO_PASS"] == {"success": ["tests/test_more.py::test_mean_of_two"], "failure": []}
    empty = magis(grade_args(setup, dataset, store, "--empty", "--no-ray"), tmp_path)
    assert empty.returncode == 0, empty.stderr
    assert "resolved: 0 of 1" in empty.stdout
    result = [e for e in stream(store, "empty@calc") if isinstance(e, InstanceGraded)]
    assert [(r.resolved, r.fail_to_pass_failure, r.pass_to_pass_success) for r in result] == [
        (False, ["tests/test_more.py::test_mean_of_two"], ["tests/test_more.py::test_median_of_one"])]


def test_predictions_of_another_system_and_a_patch_that_does_not_apply(setup, tmp_path):
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"], 1), record(setup["base"], 2)])
    preds = tmp_path / "agent.jsonl"
    broken = GOLD.replace("(len(values) - 1)", "(len(values) - 9)")
    preds.write_text(json.dumps({"instance_id": "calc__calc-1", "model_name_or_path": "agent", "model_patch": GOLD}) + "\n"
                     + json.dumps({"instance_id": "calc__calc-2", "model_name_or_path": "agent", "model_patch": broken}) + "\n")
    store = tmp_path / "store"
    done = magis(grade_args(setup, dataset, store, str(preds), "--no-ray"), tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((store / "gradings" / "agent@calc.json").read_text())
    assert report["resolved_ids"] == ["calc__calc-1"]
    bad = report["instances"]["calc__calc-2"]
    assert not bad["patch_successfully_applied"] and bad["error"]["step"] == "patch"
    assert "calc__calc-2" in report["error_ids"]


def test_bad_input_is_one_line(setup, tmp_path):
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"])])
    for args, words in (
        (grade_args(setup, dataset, tmp_path / "s"), "exactly one"),
        (grade_args(setup, dataset, tmp_path / "s", "--gold", "--instances", "nope"), "not in calc.jsonl: nope"),
        (grade_args(setup, tmp_path / "missing.jsonl", tmp_path / "s", "--gold"), "cannot read the dataset"),
    ):
        done = magis(args, tmp_path)
        assert done.returncode == 2 and done.stderr.startswith("magis-ray: error: ") and words in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_without_bubblewrap_it_refuses_unless_sandbox_none(setup, tmp_path):
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"])])
    bin_dir = tmp_path / "bin"  # a PATH with git and sh but no bwrap
    bin_dir.mkdir()
    for tool in ("git", "sh"):
        (bin_dir / tool).symlink_to(subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip())
    env = {**os.environ, "PATH": str(bin_dir)}
    refused = subprocess.run([*MAGIS, *grade_args(setup, dataset, tmp_path / "s", "--gold", "--no-ray")], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "magis-ray: error: bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap) or pass --sandbox none"]


def test_kill_9_then_the_same_command_grades_no_finished_instance_twice(setup, tmp_path):
    # Each instance's tests take a moment (a real wait in the test patch), so the kill lands mid-batch.
    slow_patch = TEST_PATCH.replace("@@ -0,0 +1,9 @@", "@@ -0,0 +1,10 @@").replace(
        "+def test_median_of_one():\n", "+def test_median_of_one():\n+    __import__('time').sleep(1.5)\n")
    records = [dict(record(setup["base"], n), test_patch=slow_patch) for n in range(1, 5)]
    dataset = write_dataset(tmp_path / "calc.jsonl", records)
    store = tmp_path / "store"
    args = grade_args(setup, dataset, store, "--gold", "--no-ray")
    env = {**os.environ, "MAGIS_LOG_LEVEL": "warning"}
    first = subprocess.Popen([*MAGIS, *args], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    graded: list = []
    while not graded and first.poll() is None and time.monotonic() < deadline:
        if (store / "events.sqlite3").exists():
            try:
                graded = [e for e in stream(store, "gold@calc") if isinstance(e, InstanceGraded)]
            except Exception:  # noqa: BLE001 - the stream does not exist yet
                graded = []
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = stream(store, "gold@calc")
    finished = {e.instance_id for e in before if isinstance(e, InstanceGraded)}
    assert 1 <= len(finished) < 4  # cut off mid-batch
    again = magis(args, tmp_path)
    assert again.returncode == 0, again.stderr
    assert "resolved: 4 of 4" in again.stdout
    events = stream(store, "gold@calc")
    assert sum(isinstance(e, GradingStarted) for e in events) == 2
    runs = {}
    for e in events:
        if isinstance(e, InstanceGradingStarted):
            runs[e.instance_id] = runs.get(e.instance_id, 0) + 1
    for instance in finished:
        assert runs[instance] == 1  # its tests ran once, before the kill
    assert sorted(e.instance_id for e in events if isinstance(e, InstanceGraded)) == sorted(
        [e.instance_id for e in before if isinstance(e, InstanceGraded)] + [r["instance_id"] for r in records
                                                                            if r["instance_id"] not in finished])
    # and a third time grades nothing at all
    third = magis(args, tmp_path)
    assert third.returncode == 0 and len(stream(store, "gold@calc")) == len(events) + 1


def test_ray_tasks_grade_in_parallel(setup, tmp_path):
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"], 1), record(setup["base"], 2)])
    store = tmp_path / "store"
    done = magis(grade_args(setup, dataset, store, "--gold", "--workers", "2"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "resolved: 2 of 2" in done.stdout
    graded = [e for e in stream(store, "gold@calc") if isinstance(e, InstanceGraded)]
    assert all(e.node for e in graded)  # ran as Ray tasks
