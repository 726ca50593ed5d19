"""The team on the repositories users grade: a run with tests on, through `magis-ray submit`, for a
pytest and a sphinx instance of SWE-bench Verified, and a Django, a scikit-learn and a matplotlib
one on their rebuilt repositories (stand-ins for their clones: the release of the instance's
version less the gold and test patches; MAGIS_BIG3_DIR holds repos/ and
verified-big3-rebuilt.jsonl). The oracle answers every step from the gold patch (it proves the
plumbing, not a model's skill) and writes the reproduction test a QA Engineer would write from the
issue, in the repository's own framework: a pytest file at the root, or a module of a Django test
app run by its label. The run's test bench builds the spec's environment and the testbed at the
instance's base commit, as grading does, and runs the reproduction and the regression tests there
in the repository's own runner: the events show which tests passed and failed, by the runner's ids.

On demand (it builds real environments and needs the fetched or rebuilt repositories; the shared
data folder is MAGIS_SWEBENCH_DATA, the fetched repositories MAGIS_REPOS_DIR):
    MAGIS_SWEBENCH=1 .venv/bin/python -m pytest -m swebench tests/test_swebench_team.py"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from commands import magis

from magis_ray.actors.code.suites import PYTEST_COMMAND
from magis_ray.events.codec import decode_recorded

DATA = Path(os.environ.get("MAGIS_SWEBENCH_DATA", Path(__file__).resolve().parents[2] / "shared" / "swebench"))
TUNING = DATA / "verified-tuning.jsonl"
REPOS = Path(os.environ.get("MAGIS_REPOS_DIR", "/work/repos"))
BIG3 = Path(os.environ.get("MAGIS_BIG3_DIR", "/work/big3"))  # the rebuilt Django, scikit-learn and matplotlib
REBUILT = BIG3 / "verified-big3-rebuilt.jsonl"
pytestmark = [
    pytest.mark.swebench,
    pytest.mark.skipif(not os.environ.get("MAGIS_SWEBENCH"), reason="builds real SWE-bench environments: MAGIS_SWEBENCH=1"),
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
    "django__django-16429": '''import datetime

from django.test import SimpleTestCase, override_settings
from django.utils import timezone
from django.utils.timesince import timesince


class TimesinceWithTimeZoneTests(SimpleTestCase):
    @override_settings(USE_TZ=True)
    def test_an_aware_datetime_a_month_ago(self):
        d = timezone.now() - datetime.timedelta(days=31)
        self.assertEqual(timesince(d), "1\\xa0month")
''',
    "scikit-learn__scikit-learn-13328": '''from sklearn.datasets import make_regression
from sklearn.linear_model import HuberRegressor


def test_huber_fits_boolean_features():
    X, y = make_regression(n_samples=200, n_features=2, noise=4.0, random_state=0)
    huber = HuberRegressor().fit(X > 0, y)
    assert huber.coef_.shape == (2,)
''',
    "matplotlib__matplotlib-20859": '''import matplotlib.pyplot as plt


def test_a_subfigure_takes_a_legend():
    subfig = plt.figure().subfigures()
    ax = subfig.subplots()
    ax.plot([0, 1], [0, 1], label="line")
    legend = subfig.legend()
    assert legend.figure is subfig
''',
}
# How the runner names the reproduction's tests: pytest's ids of the root file, or Django's of the
# module in the test app nearest the change.
REPRODUCTION_IDS = {
    "pytest-dev__pytest-10051": "test_magis_reproduction.py::test_get_records_and_records_stay_in_step_after_clear",
    "sphinx-doc__sphinx-10323": "test_magis_reproduction.py::test_prepend_keeps_its_indentation_when_the_lines_are_dedented",
    "django__django-16429": "test_an_aware_datetime_a_month_ago (utils_tests.test_magis_reproduction.TimesinceWithTimeZoneTests)",
    "scikit-learn__scikit-learn-13328": "test_magis_reproduction.py::test_huber_fits_boolean_features",
    "matplotlib__matplotlib-20859": "test_magis_reproduction.py::test_a_subfigure_takes_a_legend",
}
RUNNERS = {"django/django": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"}  # pytest elsewhere


def source_of(instance_id: str) -> tuple[Path, Path]:
    """The dataset and the repositories' folder of an instance: the tuning set on the fetched
    repositories, or the rebuilt ones."""
    return (TUNING, REPOS) if instance_id.startswith(("pytest-dev", "sphinx-doc")) else (REBUILT, BIG3 / "repos")


@pytest.mark.parametrize("instance_id", sorted(REPRODUCTIONS))
def test_the_team_runs_its_tests_in_the_spec_s_environment(instance_id, tmp_path):
    from magis_ray.actors.model.scripted_server import ScriptedServer
    from magis_ray.actors.swebench.instances import load_dataset
    from magis_ray.actors.swebench.oracle import build_oracle

    dataset, repos = source_of(instance_id)
    if not dataset.is_file() or not repos.is_dir():
        pytest.skip(f"the dataset or the repositories are absent ({dataset}, {repos})")
    record = next(r for r in map(json.loads, dataset.read_text().splitlines()) if r["instance_id"] == instance_id)
    instance = next(i for i in load_dataset(dataset)[0] if i.instance_id == instance_id)
    repo = repos / record["repo"].replace("/", "__")
    oracle = build_oracle(instance, str(repo))
    oracle.team.reproductions = [REPRODUCTIONS[instance_id]]
    issue = tmp_path / "issue.json"
    issue.write_text(json.dumps({k: record[k] for k in ("instance_id", "repo", "base_commit", "problem_statement",
                                                         "hints_text", "version", "environment_setup_commit")}))
    env = {"OPENAI_API_KEY": "oracle"}
    with ScriptedServer(oracle.team) as server:
        done = magis("submit", issue, "--repos-dir", repos, "--store", "store", "--tests", "on", "--base-url", server.base_url,
                     "--model", "oracle", "--max-review-rounds", "1", cwd=tmp_path, env=env, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
    run_id = lines["run"].strip()
    events = magis("events", run_id, "--store", "store", cwd=tmp_path, env=env, timeout=600)
    runs = [e for e in (decode_recorded(line).event for line in events.stdout.splitlines()) if type(e).__name__ == "TestsRan"]
    report = {e.purpose + (f" {e.task_id}#{e.attempt}" if e.task_id else ""):
              dict(outcome=e.outcome, command=e.command, passed=len(e.passed), failed=e.failed, seconds=e.duration_s) for e in runs}
    print(json.dumps({instance_id: report}, indent=1))  # the figures docs/results/fidelity.md quotes
    prepare = next(e for e in runs if e.purpose == "prepare")
    assert prepare.outcome == "passed" and f"{record['repo']} {record['version']}" in prepare.output, prepare.output
    assert prepare.command == RUNNERS.get(record["repo"], PYTEST_COMMAND)
    reproduce = [e for e in runs if e.purpose == "reproduce"]
    ours = REPRODUCTION_IDS[instance_id]
    assert reproduce[-1].outcome == "failed" and reproduce[-1].failed == [ours] and not reproduce[-1].passed
    baseline = next(e for e in runs if e.purpose == "baseline")
    assert baseline.passed  # the regression tests nearest the changed file, run on the base commit
    check = [e for e in runs if e.purpose == "check"][-1]
    assert ours in check.passed
    assert not set(baseline.passed) - set(check.passed)  # nothing that passed before fails now
    assert lines["outcome"].strip() == "patched"
