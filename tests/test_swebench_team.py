"""The team on the repositories users grade: a run with tests on, through `magis-ray submit`, for a
pytest and a sphinx instance of SWE-bench Verified. The oracle answers every step from the gold
patch (it proves the plumbing, not a model's skill) and writes the reproduction test a QA Engineer
would write from the issue. The run's test bench builds the spec's environment and the testbed at
the instance's base commit, as grading does, and runs the reproduction and the regression tests
there: the events show which tests passed and failed.

On demand (it builds real environments and needs the fetched repositories):
    MAGIS_SWEBENCH=1 .venv/bin/python -m pytest -m swebench tests/test_swebench_team.py"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from magis_ray.events.codec import decode_recorded

TUNING = Path(__file__).resolve().parents[2] / "shared" / "swebench" / "verified-tuning.jsonl"
REPOS = Path(os.environ.get("MAGIS_REPOS_DIR", "/work/repos"))
MAGIS = [sys.executable, "-m", "magis_ray.cli.main"]
pytestmark = [
    pytest.mark.swebench,
    pytest.mark.skipif(not os.environ.get("MAGIS_SWEBENCH"), reason="builds real SWE-bench environments: MAGIS_SWEBENCH=1"),
    pytest.mark.skipif(not TUNING.is_file() or not REPOS.is_dir(), reason="the dataset or the fetched repositories are absent"),
]

# What a QA Engineer writes from each issue's text: a test that fails on the unfixed code.
REPRODUCTIONS = {
    "pytest-dev__pytest-10051": '''import logging


def test_get_records_and_records_stay_in_step_after_clear(caplog):
    def verify():
        assert caplog.get_records("call") == caplog.records

    verify()
    logging.warning("test")
    verify()
    caplog.clear()
    verify()
''',
    "sphinx-doc__sphinx-10323": '''from sphinx.config import Config
from sphinx.directives.code import LiteralIncludeReader


def test_prepend_keeps_its_indentation_when_the_lines_are_dedented(tmp_path):
    source = tmp_path / "example.py"
    source.write_text("class Bar:\\n    def baz():\\n        pass\\n")
    options = {"lines": "2-3", "dedent": 4, "prepend": "class Foo:"}
    content, _ = LiteralIncludeReader(str(source), options, Config({}, {})).read()
    assert content == "class Foo:\\ndef baz():\\n    pass\\n"
''',
}


@pytest.mark.parametrize("instance_id", sorted(REPRODUCTIONS))
def test_the_team_runs_its_tests_in_the_spec_s_environment(instance_id, tmp_path):
    from magis_ray.actors.model.scripted_server import ScriptedServer
    from magis_ray.actors.swebench.instances import load_dataset
    from magis_ray.actors.swebench.oracle import build_oracle

    record = next(r for r in map(json.loads, TUNING.read_text().splitlines()) if r["instance_id"] == instance_id)
    instance = next(i for i in load_dataset(TUNING)[0] if i.instance_id == instance_id)
    repo = REPOS / record["repo"].replace("/", "__")
    oracle = build_oracle(instance, str(repo))
    oracle.team.reproductions = [REPRODUCTIONS[instance_id]]
    issue = tmp_path / "issue.json"
    issue.write_text(json.dumps({k: record[k] for k in ("instance_id", "repo", "base_commit", "problem_statement",
                                                         "hints_text", "version", "environment_setup_commit")}))
    env = {**os.environ, "OPENAI_API_KEY": "oracle", "MAGIS_LOG_LEVEL": "warning"}
    with ScriptedServer(oracle.team) as server:
        done = subprocess.run([*MAGIS, "submit", str(issue), "--repos-dir", str(REPOS), "--store", "store", "--tests", "on",
                               "--base-url", server.base_url, "--model", "oracle", "--max-review-rounds", "1"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
    run_id = lines["run"].strip()
    events = subprocess.run([*MAGIS, "events", run_id, "--store", "store"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=600)
    runs = [e for e in (decode_recorded(line).event for line in events.stdout.splitlines()) if type(e).__name__ == "TestsRan"]
    report = {e.purpose + (f" {e.task_id}#{e.attempt}" if e.task_id else ""): (e.outcome, e.passed, e.failed) for e in runs}
    print(json.dumps(report, indent=1))  # the figures the README quotes
    prepare = next(e for e in runs if e.purpose == "prepare")
    assert prepare.outcome == "passed" and f"{record['repo']} {record['version']}" in prepare.output
    reproduce = [e for e in runs if e.purpose == "reproduce"]
    assert reproduce[-1].outcome == "failed" and any(t.startswith("test_magis_reproduction.py::") for t in reproduce[-1].failed)
    baseline = next(e for e in runs if e.purpose == "baseline")
    assert baseline.passed  # the regression tests nearest the changed file, run on the base commit
    check = [e for e in runs if e.purpose == "check"][-1]
    assert any(t.startswith("test_magis_reproduction.py::") for t in check.passed)
    assert not set(baseline.passed) - set(check.passed)  # nothing that passed before fails now
    assert lines["outcome"].strip() == "patched"
