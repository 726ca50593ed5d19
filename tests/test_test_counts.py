"""One count of test runs, one wording: the audit (Markdown, JSON, HTML page), `watch`, the
inspector's run page and the pull-request text say the same for one run, through the real CLI
over a real SQLite store. Expected failures on the base commit (the reproduction, the regression
baseline) are not "not passing"; a reproduction pytest could not collect says so everywhere."""
from __future__ import annotations

import html
import json
import re

import pytest
from commands import magis as command
from inspecting import page, serve
from runs import fixed_new_events

from magis_ray.events import schema as ev
from magis_ray.events.projections.tests import Tally, verdict
from magis_ray.store.sqlite import SQLiteStore

DIFF = "--- a/calc/stats.py\n+++ b/calc/stats.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
COLLECTION_ERROR = ("==================================== ERRORS ====================================\n"
                    "____________________ ERROR collecting tests/test_repro.py ____________________\n"
                    "E   SyntaxError: invalid syntax\n"
                    "Interrupted: 1 error during collection\n")


def run_pairs(collectable: bool) -> list:
    settings = ev.RunSettings(tests=True, model="scripted")
    repro = (ev.TestsRan(purpose="reproduce", command="pytest tests/test_repro.py", outcome="failed", attempt=1,
                         failed=["tests/test_repro.py::test_mean"], exit_code=1, duration_s=1.0)
             if collectable else
             ev.TestsRan(purpose="reproduce", command="pytest tests/test_repro.py", outcome="failed", attempt=1,
                         failed=["tests/test_repro.py"], output=COLLECTION_ERROR, exit_code=2, duration_s=0.5))
    return [
        ("supervisor", ev.RunStarted(instance_id="calc__calc-9", repo="calc/calc", base_commit="a" * 40,
                                     problem_statement="# mean is wrong\n\nIt divides by n - 1.", settings=settings)),
        ("tester", ev.TestsRan(purpose="prepare", command="pip install -e .", outcome="passed", output="python 3.11", duration_s=9.0)),
        ("qa:reproduction", ev.ReproductionWritten(path="tests/test_repro.py", content="def test_mean(): ...\n")),
        ("tester", repro),
        ("manager", ev.TaskDefined(task_id="T1", path="calc/stats.py", description="Divide by n.")),
        ("tester", ev.TestsRan(purpose="baseline", command="pytest tests/test_calc.py", outcome="failed", task_id="T1",
                               passed=["tests/test_calc.py::test_a", "tests/test_calc.py::test_b"],
                               failed=["tests/test_calc.py::test_mean"], exit_code=1, duration_s=2.0)),
        ("developer:T1", ev.PatchProposed(task_id="T1", attempt=1, path="calc/stats.py", base_blob_id="", edits=[],
                                          new_text="x = 2\n", diff=DIFF)),
        ("tester", ev.TestsRan(purpose="check", command="pytest tests/test_calc.py", outcome="passed", task_id="T1", attempt=1,
                               passed=["tests/test_calc.py::test_a", "tests/test_calc.py::test_b", "tests/test_calc.py::test_mean"],
                               exit_code=0, duration_s=2.5)),
        ("qa:T1", ev.ReviewIssued(task_id="T1", attempt=1, approved=True, comment="Right.")),
        ("developer:T1", ev.TaskFinished(task_id="T1", status="approved", attempts=1)),
        ("supervisor", ev.RunFinished(outcome="patched", files_changed=["calc/stats.py"], summary="1 of 1 tasks patched")),
    ]


def magis(*args) -> str:
    result = command(*args, without=("MAGIS_STORE",))
    assert result.returncode == 0, result.stderr
    return result.stdout


def text_of(markup: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("counts") / "store"
    with SQLiteStore.open(path, create=True) as s:
        s.append("c0000000000a", 0, fixed_new_events(run_pairs(collectable=True)))
        s.append("c0000000000b", 0, fixed_new_events(run_pairs(collectable=False), start=1_700_100_000.0))
    return path


def test_the_audit_watch_inspector_and_pr_text_count_the_same(store):
    # the reproduction and the baseline fail on the base commit, as they must; the check passes
    want = "3 test runs: 1 passed, 2 failed as expected on the base commit"
    markdown = magis("audit", "c0000000000a", "--store", store)
    assert f"Tests: {want};" in markdown
    assert "not passing" not in markdown
    doc = json.loads(magis("audit", "c0000000000a", "--store", store, "--format", "json"))
    assert (doc["tests"]["runs"], doc["tests"]["passed"], doc["tests"]["not_passing"]) == (3, 1, 0)
    assert doc["metrics"]["total"]["test_runs"] == 3  # the environment's preparation is no test run
    assert want in text_of(magis("audit", "c0000000000a", "--store", store, "--format", "html"))
    assert want in magis("watch", "c0000000000a", "--store", store)
    assert want in magis("audit", "c0000000000a", "--store", store, "--format", "pr")
    with serve(store) as url:
        assert want in text_of(page(f"{url}runs/c0000000000a"))


def test_an_uncollectable_reproduction_reads_as_such_everywhere(store):
    run = "c0000000000b"
    want = "3 test runs: 1 passed, 1 failed as expected on the base commit, 1 could not be collected"
    markdown = magis("audit", run, "--store", store)
    assert f"Tests: {want};" in markdown
    assert "reproduction test on the base commit could not be collected (tests/test_repro.py could not be collected" in markdown
    assert "0 passed, 1 failed" not in markdown
    page_text = text_of(magis("audit", run, "--store", store, "--format", "html"))
    assert want in page_text and "0 passed, 1 failed" not in page_text
    assert "could not be collected reproduction test" in page_text  # the reproduction's badge
    watched = magis("watch", run, "--store", store)
    assert want in watched and "could not be collected" in watched
    pr = magis("audit", run, "--store", store, "--format", "pr")
    assert want in pr and "| reproduction test (must fail) | could not be collected |" in pr
    with serve(store) as url:
        inspector = text_of(page(f"{url}runs/{run}"))
    assert want in inspector and "0 passed, 1 failed" not in inspector


def test_the_tally_words():
    fail = ev.TestsRan(purpose="check", command="pytest", outcome="failed", failed=["t.py::a"])
    assert verdict(fail) == "failed"
    tally = Tally()
    for run in (fail, ev.TestsRan(purpose="prepare", command="pip", outcome="passed"),
                ev.TestsRan(purpose="check", command="pytest", outcome="timeout")):
        tally.add(run)
    assert tally.words() == "2 test runs: 0 passed, 2 not passing"
    assert Tally().words() == "no test runs"
