"""The team runs the code: a reproduction test written before the Developers start (one that passes
on the unfixed code is sent back), every patch tested against it and against the repository's
nearest tests in the sandbox, a patch the tests reject sent back whatever the review says, and a
replay that reuses every recorded test run and runs none.

Real throughout: the calc repository with its real bug and failing test, a real environment
(pytest installed from PyPI into the module's cached venv), bubblewrap, the scripted model over
HTTP. The team runs in this process (tests/teamruns.py): what a whole `submit` with tests adds is
tested by tests/test_own_repository.py's runs of the guides' commands."""
from __future__ import annotations

import subprocess
import tempfile

import pygit2
import pytest
from commands import in_process
from conftest import run_pytest
from gitfixtures import checkout
from scenarios import MEAN_FIX, calc_issue
from teamruns import resume_team, run_team, settings_for

from magis_ray.actors.code.regression import imports_module, module_of, nearest_tests
from magis_ray.actors.code.repository import RepoSnapshot
from magis_ray.actors.execution.sandbox import bwrap_path
from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.events.projections import final_diff, fold
from magis_ray.events.schema import Edit, LineRange

# Integer division: mean([2, 4]) is right, mean([1, 2, 3, 4]) is 2, not 2.5. A reviewer reading
# only the diff could well approve it.
FLOOR_FIX = Edit(LineRange(9, 9), "    return total // len(values)\n")
PASSES_ON_BASE = "from calc.stats import mean\n\n\ndef test_mean_of_two():\n    assert mean([2, 2]) == 4\n"
REPRODUCES = "from calc.stats import mean\n\n\ndef test_mean_of_four():\n    assert mean([1, 2, 3, 4]) == 2.5\n"
ENV_SETUP = "python -m pip install pytest"

needs_sandbox = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")


def scripted(server: ScriptedServer, repo_path, **flags):
    """A run's settings as submit settles them, given `--base-url` (the scripted model's) `--model
    scripted` and `flags`."""
    return settings_for(repo_path, base_url=server.base_url, model="scripted", **flags)


def asked(requests, purpose: str) -> list:
    return [r for r in requests if r.purpose == purpose]


@pytest.fixture(autouse=True)
def module_environments(env_cache, monkeypatch):
    """The module's environment cache; tests at their default (on) unless a test says otherwise."""
    monkeypatch.setenv("MAGIS_ENV_CACHE", str(env_cache))
    monkeypatch.delenv("MAGIS_TESTS", raising=False)


@needs_sandbox
def test_a_patch_the_reproduction_test_rejects_is_sent_back_and_the_next_one_approved(calc_repo, tmp_path, capsys, monkeypatch):
    repo_path, base = calc_repo
    store = tmp_path / "store"
    team = ScriptedTeam({"calc/stats.py": [FLOOR_FIX]}, retries={"calc/stats.py": [[MEAN_FIX]]},
                        reproductions=[PASSES_ON_BASE, REPRODUCES])  # the QA approves every patch
    with ScriptedServer(team) as server:
        run = run_team(calc_issue(repo_path, base), scripted(server, repo_path, tests="on", env_setup=ENV_SETUP), store)
        requests = list(server.requests)
    assert run.end.outcome == "patched"
    events = run.of
    kinds = [type(r.event).__name__ for r in run.events]

    # the environment, then a reproduction test that passes on the unfixed code is sent back with that fact
    [prepared] = run.tests_ran("prepare")
    assert prepared.outcome == "passed"
    reproduce = run.tests_ran("reproduce")
    assert [r.outcome for r in reproduce] == ["passed", "failed"]
    assert "test_magis_reproduction.py::test_mean_of_four" in reproduce[1].failed
    second_try = asked(requests, "write_reproduction")[1]
    assert "PASSES on the unfixed code" in second_try.text

    # the regression tests nearest calc/stats.py ran on the base commit: what passed there must keep passing
    [baseline] = run.tests_ran("baseline")
    assert baseline.task_id == "T1" and "tests/test_calc.py::test_median" in baseline.passed
    assert "tests/test_calc.py::test_mean" in baseline.failed

    # attempt 1 (floor division): the reproduction test still fails, so the review cannot approve it
    checks = run.tests_ran("check")
    assert [c.attempt for c in checks] == [1, 2]
    assert "test_magis_reproduction.py::test_mean_of_four" in checks[0].failed
    # attempt 2 fixes it; test_shout (another issue's bug) failed before and still does, which says nothing of it
    assert "test_magis_reproduction.py::test_mean_of_four" in checks[1].passed
    assert {"tests/test_calc.py::test_mean", "tests/test_calc.py::test_median"} <= set(checks[1].passed)
    assert checks[1].failed == ["tests/test_calc.py::test_shout"]
    reviews = events("ReviewIssued")
    assert [(r.attempt, r.approved) for r in reviews] == [(1, False), (2, True)]
    assert "The tests reject this patch" in reviews[0].comment
    # the QA's review saw the evidence, and the Developer received the failure
    tested_review = asked(requests, "review_patch_tested")[0]
    assert "still FAILS" in tested_review.text
    second_code = asked(requests, "write_code")[1]
    assert "still FAILS" in second_code.text and "total // len(values)" in second_code.text
    [finished] = events("TaskFinished")
    assert (finished.status, finished.attempts) == ("approved", 2)

    # the final diff makes the repository's own failing test pass, and holds no reproduction test
    diff = final_diff(fold(run.events))
    assert "test_magis_reproduction" not in diff
    after = checkout(pygit2.Repository(str(repo_path)), base, tmp_path / "after")
    subprocess.run(["git", "apply"], input=diff, text=True, cwd=after, check=True)
    assert "passed" in run_pytest(after, "tests/test_calc.py::test_mean").stdout

    # the audit shows each test run beside the patch it judged
    audit = in_process(capsys, "audit", run.run_id, "--store", store).out
    assert "## Reproduction" in audit and "Regression tests that passed before" not in audit
    assert "T1 attempt 1: tests of the patch failed (2 passed, 3 failed" in audit and "still FAILS" in audit
    assert "T1 attempt 2: tests of the patch failed (4 passed, 1 failed" in audit  # test_shout, as on the base commit
    # and says what held each run's memory budget, and the most it took
    assert all(c.memory_control in ("cgroup v1", "cgroup v2", "watchdog") and c.peak_memory_mb > 0 for c in checks), checks
    assert f"; memory: {checks[0].memory_control}, peak " in audit

    # replay reuses every recorded test run and runs none: no environment, no workspace
    empty_cache, scratch = tmp_path / "replay-envs", tmp_path / "replay-tmp"
    empty_cache.mkdir()
    scratch.mkdir()
    monkeypatch.setenv("MAGIS_ENV_CACHE", str(empty_cache))
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # what TMPDIR gives a process of its own
    replay = in_process(capsys, "replay", run.run_id, "--store", store)
    assert replay.code == 0, replay.out + replay.err
    assert "no divergence" in replay.out
    assert sum(k == "TestsRan" for k in kinds) == 6  # prepare, 2 reproduce, baseline, 2 checks: all reused
    assert list(empty_cache.iterdir()) == [] and not [p for p in scratch.iterdir() if p.name.startswith("magis-ws-")]


@needs_sandbox
def test_the_baseline_runs_while_the_developer_asks_the_model_for_its_patch(calc_repo, tmp_path):
    """A task's regression baseline starts with its Developer, beside the model calls that write the
    first patch (1 s each here), rather than after them: the first check waits for nothing but
    itself. Its event still comes where it always did, between the patch and its check."""
    repo_path, base = calc_repo
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX]}, reproductions=[REPRODUCES], delay_s=1.0,
                        slow=("design_qa", "locate_lines", "write_code"))
    with ScriptedServer(team) as server:
        run = run_team(calc_issue(repo_path, base), scripted(server, repo_path, tests="on", env_setup=ENV_SETUP),
                       tmp_path / "store")
    assert run.end.outcome == "patched"
    lane = [r for r in run.events if r.actor == "developer:T1"]
    steps = [(type(r.event).__name__, r.event.purpose) for r in lane if type(r.event).__name__ in ("LLMExchanged", "TestsRan")]
    assert steps == [("LLMExchanged", "design_qa"), ("LLMExchanged", "locate_lines"), ("LLMExchanged", "write_code"),
                     ("TestsRan", "baseline"), ("TestsRan", "check")]
    written, baseline = (next(r for r in lane if getattr(r.event, "purpose", "") == p) for p in ("write_code", "baseline"))
    # Run after the patch, the baseline would be logged at least its own duration after it; it was
    # done by then, so it is logged as soon as the check asks for it.
    assert baseline.time - written.time < baseline.event.duration_s, (baseline.time - written.time, baseline.event.duration_s)


@needs_sandbox
def test_a_reproduction_that_does_not_even_collect_is_sent_back_with_the_reason(calc_repo, tmp_path):
    """The bundled model once wrote a test file whose only line was `the whole test file`: a
    SyntaxError, which fails on the unfixed code without showing anything of the issue."""
    repo_path, base = calc_repo
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX]}, reproductions=["the whole test file\n", REPRODUCES])
    with ScriptedServer(team) as server:
        run = run_team(calc_issue(repo_path, base), scripted(server, repo_path, tests="on", env_setup=ENV_SETUP),
                       tmp_path / "store")
        requests = list(server.requests)
    assert run.end.outcome == "patched"
    reproduce = run.tests_ran("reproduce")
    assert [r.outcome for r in reproduce] == ["failed", "failed"]
    assert reproduce[0].failed == ["test_magis_reproduction.py"]  # the file itself: it never collected
    second_try = asked(requests, "write_reproduction")[1]
    assert "does not even run: pytest could not collect it" in second_try.text and "SyntaxError" in second_try.text
    assert "test_magis_reproduction.py::test_mean_of_four" in reproduce[1].failed


@needs_sandbox
def test_without_an_environment_the_run_goes_on_without_tests_and_says_so(calc_repo, tmp_path):
    from magis_ray.cli.progress import tests_line
    from magis_ray.events.projections.tests import tests_decision

    repo_path, base = calc_repo
    with ScriptedServer(ScriptedTeam({"calc/stats.py": [MEAN_FIX]})) as server:
        settings = scripted(server, repo_path, env_setup="exit 3")  # tests at their default: on
        run = run_team(calc_issue(repo_path, base), settings, tmp_path / "store")
    assert settings.tests and run.end.outcome == "patched"
    [prepared] = run.tests_ran("prepare")
    notice = tests_line(tests_decision(settings.tests, prepared))  # the line the terminal shows
    assert notice.startswith("magis-ray: notice:") and "tests off" in notice and "exit 3" in notice
    kinds = [type(r.event).__name__ for r in run.events]
    assert kinds.count("TestsRan") == 1 and "ReproductionWritten" not in kinds


def test_the_nearest_tests_are_those_importing_the_module(tmp_path):
    from gitfixtures import make_repo

    path = tmp_path / "repo"
    _, commit = make_repo(path, {
        "src/pkg/__init__.py": "",
        "src/pkg/core.py": "def f():\n    return 1\n",
        "src/pkg/other.py": "def g():\n    return 2\n",
        "tests/test_core.py": "from pkg.core import f\n\ndef test_f():\n    assert f() == 1\n",
        "tests/test_api.py": "from pkg import core, other\n\ndef test_both():\n    assert core.f() + other.g() == 3\n",
        "tests/test_other.py": "import pkg.other\n\ndef test_g():\n    assert pkg.other.g() == 2\n",
        "tests/test_core_named.py": "def test_nothing():\n    assert True\n",
        "docs/conf.py": "import pkg.core\n",
    })
    snapshot = RepoSnapshot.open(path, commit)
    assert module_of("src/pkg/core.py") == ("pkg.core", "pkg")
    assert imports_module("from pkg import core, other\n", "pkg.core", "pkg")
    assert not imports_module("import pkg.core_extra\n", "pkg.core", "pkg")
    assert nearest_tests(snapshot, "src/pkg/core.py") == ("tests/test_core.py", "tests/test_api.py", "tests/test_core_named.py")
    assert nearest_tests(snapshot, "src/pkg/other.py") == ("tests/test_other.py", "tests/test_api.py")
    assert nearest_tests(snapshot, "tests/test_core.py") == ()
    assert nearest_tests(snapshot, "README.md") == ()


SAME_FIX_SPACED = Edit(LineRange(9, 9), "    return total / len(values)   \n")  # the mean fix, trailing blanks
SUM_FIX = Edit(LineRange(9, 9), "    return sum(values) / len(values)\n")  # another right fix


def submit_candidates(tmp_path, calc, later_writes):
    repo_path, base = calc
    team = ScriptedTeam({"calc/stats.py": [FLOOR_FIX]}, retries={"calc/stats.py": later_writes}, reproductions=[REPRODUCES])
    with ScriptedServer(team) as server:  # an unpackaged repo: pytest alone
        run = run_team(calc_issue(repo_path, base), scripted(server, repo_path, tests="on", candidates=3, max_review_rounds=1),
                       tmp_path / "store")
        return run, list(server.requests)


@needs_sandbox
def test_candidates_the_tests_filter_and_the_majority_chooses(calc_repo, tmp_path):
    # three Developers in parallel: floor division (the tests reject it), and the mean fix twice
    run, requests = submit_candidates(tmp_path, calc_repo, [[MEAN_FIX], [SAME_FIX_SPACED]])
    patches = run.of("PatchProposed")
    assert sorted(p.candidate for p in patches) == [1, 2, 3]
    floor = next(p for p in patches if "//" in p.diff)
    [chosen] = run.of("CandidateChosen")
    assert chosen.candidates == 3 and chosen.votes == 2 and chosen.chosen != floor.candidate
    assert "2 of 3 patched candidates pass the tests" in chosen.reason
    assert not asked(requests, "choose_candidate")  # a majority needs no tie-break
    # the candidates sampled above temperature 0, and the final diff is the chosen one's
    assert {r.body.get("temperature") for r in asked(requests, "write_code")} == {0.8}
    diff = final_diff(fold(run.events))
    assert "return total / len(values)" in diff and "//" not in diff
    assert run.end.outcome == "patched"


@needs_sandbox
def test_candidates_a_tie_is_broken_by_the_qa_engineer(calc_repo, tmp_path):
    run, requests = submit_candidates(tmp_path, calc_repo, [[MEAN_FIX], [SUM_FIX]])
    [chosen] = run.of("CandidateChosen")
    tie = asked(requests, "choose_candidate")
    assert len(tie) == 1 and "Candidate" in tie[0].text and "Tests:" in tie[0].text
    assert chosen.votes == 1 and "the QA engineer chose it" in chosen.reason
    offered = sorted(int(n) for n in tie[0].text.split("one of ")[1].split('"')[0].replace(",", " ").split())
    assert chosen.chosen == offered[0] and len(offered) == 2


@needs_sandbox
def test_resume_after_a_fault_reuses_every_recorded_test_run(calc_repo, tmp_path):
    """The model fails at the second review (after every retry): the run stops resumably. The
    resume re-lives the log: the environment, the reproduction test, the baseline and the first
    check are reused from it, and only what follows the unanswered request runs."""
    from test_transient import Fault

    from magis_ray.actors.model.scripted_server import Rule
    from magis_ray.events.history import effective

    repo_path, base = calc_repo
    store = tmp_path / "store"
    team = ScriptedTeam({"calc/stats.py": [FLOOR_FIX]}, retries={"calc/stats.py": [[MEAN_FIX]]}, reproductions=[REPRODUCES])
    fault = Fault(Rule(status=500, reply="down"), "review_patch_tested", contains="total / len(values)")
    with ScriptedServer([fault, team]) as server:
        cut = run_team(calc_issue(repo_path, base), scripted(server, repo_path, tests="on", timeout=5), store)
        assert cut.end.resumable and cut.end.reason.startswith("no reachable model (review_patch_tested"), cut.end
        fault.on = False
        resumed = resume_team(store, cut.run_id)
        assert resumed.end.outcome == "patched", resumed.end
    events = resumed.events
    runs = [(r.event.purpose, r.event.attempt) for r in events if type(r.event).__name__ == "TestsRan"]
    # nothing ran twice: each test run is in the log once, superseded or not
    assert runs == [("prepare", 0), ("reproduce", 1), ("baseline", 0), ("check", 1), ("check", 2)]
    kept = [type(r.event).__name__ for r in effective(events)]
    assert kept.count("TestsRan") == 5 and kept[-1] == "RunFinished"


@needs_sandbox
def test_a_later_stage_is_tested_with_the_earlier_stages_patches_applied(calc_repo, tmp_path):
    """Two stages: calc/stats.py, then calc/texts.py. The reproduction test is the mean bug, which
    only the first stage fixes: the second stage's checks pass it only if they run on top of the
    first stage's patch, as the final diff will."""
    from scenarios import BOTH_ISSUE, SHOUT_FIX

    repo_path, base = calc_repo
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]},
                        stages=[["calc/stats.py"], ["calc/texts.py"]], reproductions=[REPRODUCES])
    with ScriptedServer(team) as server:
        run = run_team(calc_issue(repo_path, base, BOTH_ISSUE),
                       scripted(server, repo_path, tests="on", top_k=4, max_review_rounds=1), tmp_path / "store")
    tasks = {e.path: e.task_id for e in run.of("TaskDefined")}
    second = tasks["calc/texts.py"]
    runs = [e for e in run.of("TestsRan") if e.task_id == second]
    baseline = next(e for e in runs if e.purpose == "baseline")
    check = next(e for e in runs if e.purpose == "check")
    # the second stage's base is the first stage's result: the mean test passes there already
    assert "tests/test_calc.py::test_mean" in baseline.passed and "tests/test_calc.py::test_shout" in baseline.failed
    assert "test_magis_reproduction.py::test_mean_of_four" in check.passed and not check.failed
    finished = {e.task_id: e.status for e in run.of("TaskFinished")}
    assert finished == {tasks["calc/stats.py"]: "approved", second: "approved"}
    assert run.end.outcome == "patched"


def test_the_bench_reads_test_ids_only_from_pytests_summary_of_its_own_run():
    """pytest's own suite prints its inner runs' summaries ("PASSED [100%]", "FAILED test_x.py::t");
    those are not the run's tests."""
    from magis_ray.actors.code.suites import PytestSuite

    pytest_parse = PytestSuite().parse
    log = ("PASSED testing/test_a.py::test_one\nFAILED testing/test_a.py::test_two - assert 1 == 2\n"
           "PASSED [100%]\nPASSED [100%]------------------------------\nERROR testing/test_b.py\n"
           "FAILED test_change_level_undo.py::test1 - assert 0\nERROR    catchlog:test_x.py:8 boom\n")
    ours = {"testing/test_a.py::test_one": "PASSED", "testing/test_a.py::test_two": "FAILED", "testing/test_b.py": "ERROR"}
    assert pytest_parse(log, ("testing/test_a.py", "testing/test_b.py")) == ours
    assert pytest_parse(log, ("testing/",)) == ours
    assert pytest_parse(log, ("testing/test_a.py::test_two",)) == {k: v for k, v in ours.items() if "test_a" in k}  # its file's


# --- a repository whose tests run in their own runner: the user's test-cmd names it ---------------

SHOP_RUNNER = '''"""The project's test runner, as Django's is: unittest's, given test labels (module paths below
this folder), reporting each test by name."""
import argparse
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
options = argparse.ArgumentParser()
options.add_argument("labels", nargs="*")
options.add_argument("--verbosity", type=int, default=1)
args = options.parse_args()
suite = unittest.defaultTestLoader.loadTestsFromNames(args.labels)
result = unittest.TextTestRunner(verbosity=args.verbosity).run(suite)
sys.exit(not result.wasSuccessful())
'''
SHOP_FILES = {
    "shop/__init__.py": "",
    "shop/pricing.py": '"""Prices."""\n\n\ndef total(prices, discount=0):\n    """The sum of `prices` less `discount` percent."""\n'
                       "    subtotal = sum(prices)\n    return subtotal - subtotal * discount / 10\n",
    "tests/runtests.py": SHOP_RUNNER,
    "tests/pricing_tests/__init__.py": "",
    "tests/pricing_tests/tests.py": "import unittest\n\nfrom shop.pricing import total\n\n\nclass TotalTests(unittest.TestCase):\n"
                                    "    def test_no_discount(self):\n        self.assertEqual(total([1, 2]), 3)\n\n"
                                    "    def test_nothing(self):\n        self.assertEqual(total([]), 0)\n",
    "tests/other_tests/__init__.py": "",
    "tests/other_tests/tests.py": "import unittest\n\n\nclass OtherTests(unittest.TestCase):\n    def test_other(self):\n"
                                  "        self.assertTrue(True)\n",
    # the project's settings: its own runner, and an environment that needs nothing installed
    "magis.toml": 'test-cmd = "python tests/runtests.py --verbosity 2"\nenv-setup = "true"\n',
}
SHOP_FIX = Edit(LineRange(7, 7), "    return subtotal - subtotal * discount / 100\n")
SHOP_REPRODUCTION = ("import unittest\n\nfrom shop.pricing import total\n\n\nclass DiscountTests(unittest.TestCase):\n"
                     "    def test_ten_percent_off(self):\n        self.assertEqual(total([50, 50], discount=10), 90)\n")


@needs_sandbox
def test_a_repository_s_own_runner_from_its_test_cmd_runs_the_team_s_tests_by_label(tmp_path):
    """Django's shape without Django: test apps under tests/, run by tests/runtests.py given labels,
    reporting as Django's runner does (it is unittest's). The settings file's test-cmd names it: the
    reproduction goes into the test app nearest the change and runs by its label, the regression
    tests are that app's modules, and the ids in the events are the runner's."""
    from gitfixtures import user_clone

    from magis_ray.actors.runtime.issue import IssueRecord

    repo_path, base = user_clone(tmp_path / "shop", SHOP_FILES)
    issue = IssueRecord(
        instance_id="shop-1", repo="shop/shop", base_commit=base, repo_path=str(repo_path),
        problem_statement="total() takes ten times the discount\n\n`total([50, 50], discount=10)` is 0, not 90.")
    team = ScriptedTeam({"shop/pricing.py": [SHOP_FIX]}, reproductions=[SHOP_REPRODUCTION])
    with ScriptedServer(team) as server:  # test-cmd and env-setup from the project's magis.toml
        run = run_team(issue, scripted(server, repo_path, tests="on", max_review_rounds=1), tmp_path / "store")
        requests = list(server.requests)
    assert run.end.outcome == "patched"
    runs = {e.purpose: e for e in run.of("TestsRan")}
    assert runs["prepare"].command == "python tests/runtests.py --verbosity 2"

    # the QA Engineer was told its framework and its place
    [written_by] = asked(requests, "write_reproduction")
    assert "Django's test runner" in written_by.text and "`pricing_tests.test_magis_reproduction`" in written_by.text
    [written] = run.of("ReproductionWritten")
    assert written.path == "tests/pricing_tests/test_magis_reproduction.py"
    reproduce = runs["reproduce"]
    assert reproduce.command == "python tests/runtests.py --verbosity 2 pricing_tests.test_magis_reproduction"
    [failing] = reproduce.failed
    assert failing.startswith("test_ten_percent_off (pricing_tests.test_magis_reproduction.DiscountTests") and not reproduce.passed
    baseline = runs["baseline"]
    assert baseline.command.endswith(" pricing_tests.tests") and len(baseline.passed) == 2 and not baseline.failed
    assert all(t.startswith(("test_no_discount (pricing_tests.tests.TotalTests", "test_nothing (pricing_tests.tests.TotalTests"))
               for t in baseline.passed)
    check = runs["check"]
    assert check.outcome == "passed" and sorted(check.passed) == sorted([failing, *baseline.passed])
    diff = final_diff(fold(run.events))
    assert "discount / 100" in diff and "test_magis_reproduction" not in diff


@needs_sandbox
def test_the_user_s_pytest_command_runs_the_team_s_tests(calc_repo, tmp_path, monkeypatch):
    repo_path, base = calc_repo
    own = "python -m pytest -rA -p no:cacheprovider --tb=line"
    monkeypatch.setenv("MAGIS_TEST_CMD", own)
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX]}, reproductions=[REPRODUCES])
    with ScriptedServer(team) as server:
        run = run_team(calc_issue(repo_path, base),
                       scripted(server, repo_path, tests="on", env_setup=ENV_SETUP, max_review_rounds=1), tmp_path / "store")
    assert run.end.outcome == "patched"
    runs = run.of("TestsRan")
    assert [(e.purpose, e.command) for e in runs] == [
        ("prepare", own), ("reproduce", f"{own} test_magis_reproduction.py"), ("baseline", f"{own} tests/test_calc.py"),
        ("check", f"{own} test_magis_reproduction.py tests/test_calc.py")]
    assert runs[1].failed == ["test_magis_reproduction.py::test_mean_of_four"]
    assert "test_magis_reproduction.py::test_mean_of_four" in runs[3].passed
