"""`magis-ray submit` as a user runs it: a real process, a real repository with a real failing
test, the scripted model on loopback; and every kind of bad input as one line and exit code 2,
refused in this process before any Ray."""
from __future__ import annotations

import json
import subprocess
import sys

import pygit2
import pytest
from checks import assert_one_line_error
from commands import in_process, magis as command
from conftest import run_pytest
from gitfixtures import checkout
from scenarios import MEAN_FIX, calc_issue, write_issue

from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam

KEY = "test-key-never-logged"


def magis(*args, cwd):
    return command(*args, cwd=cwd, env={"OPENAI_API_KEY": KEY}, without=("OPENAI_BASE_URL",))


@pytest.fixture
def submit(capsys, monkeypatch, tmp_path):
    """`magis-ray submit ARGS` in this process, in tmp_path, as magis() runs it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    return lambda *args: in_process(capsys, "submit", *args)


def test_submit_fixes_the_bug_and_the_failing_test_passes(calc_repo, tmp_path):
    repo_path, base = calc_repo
    before = checkout(pygit2.Repository(str(repo_path)), base, tmp_path / "before")
    # the bug is real (test_shout belongs to another issue, BOTH_ISSUE's second half)
    assert "1 failed, 2 passed" in run_pytest(before, "-k", "not shout").stdout
    issue = write_issue(tmp_path / "issue.json", calc_issue(repo_path, base))
    (repo_path / "notes.txt").write_text("the user's own work in progress\n")
    status_before, head_before = pygit2.Repository(str(repo_path)).status(), pygit2.Repository(str(repo_path)).head.target
    with ScriptedServer(ScriptedTeam({"calc/stats.py": [MEAN_FIX]})) as server:
        result = magis("submit", str(issue), "--store", "store", "--base-url", server.base_url, "--model", "scripted", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # progress on stderr as plain lines, one per phase the run went through long enough to be seen
    # (RunSummary's stage, as the inspector shows it); stdout keeps the summary alone
    progress = [line.strip() for line in result.stderr.splitlines() if line.startswith("  ")]
    assert progress[0] == "starting Ray" and progress[1] in ("starting the team", "preparing the test environment"), result.stderr
    # the run's id is shown once Ray has started, before the team starts
    assert result.stderr.index("  starting Ray") < result.stderr.index("run ") < result.stderr.index("  starting the team"), result.stderr
    assert "\x1b" not in result.stderr and not any(line.startswith("  ") for line in result.stdout.splitlines())
    lines = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    assert lines["outcome"].strip() == "patched"
    diff_path = tmp_path / lines["diff"].strip()
    assert (tmp_path / lines["audit"].strip()).read_text().startswith("# Audit of run")
    after = checkout(pygit2.Repository(str(repo_path)), base, tmp_path / "after")
    subprocess.run(["git", "apply", str(diff_path)], cwd=after, check=True)
    assert "3 passed" in run_pytest(after, "-k", "not shout").stdout
    # the user's repository and working tree are untouched, and the key is in no event
    user_repo = pygit2.Repository(str(repo_path))
    assert user_repo.status() == status_before and user_repo.head.target == head_before
    assert (repo_path / "notes.txt").read_text() == "the user's own work in progress\n"
    events = magis("events", lines["run"].strip(), "--store", "store", cwd=tmp_path).stdout
    assert KEY not in events and json.loads(events.splitlines()[0])["event"]["type"] == "RunStarted"


def test_malformed_issue(tmp_path, submit):
    (tmp_path / "bad.json").write_text('{"instance_id": "x", "repo": "a/b"')
    assert_one_line_error(submit("bad.json"), "bad.json", "not valid JSON")
    # a record without base_commit starts from the repository's HEAD: here there is no repository
    (tmp_path / "partial.json").write_text('{"instance_id": "x", "repo": "a/b", "problem_statement": "p"}')
    assert_one_line_error(submit("partial.json"), "not in a git repository", "--repo")
    (tmp_path / "typed.json").write_text('{"instance_id": "x", "problem_statement": 5}')
    assert_one_line_error(submit("typed.json"), "typed.json", "problem_statement")
    assert_one_line_error(submit("missing.json"), "missing.json")
    (tmp_path / "title.json").write_text('{"number": 7, "title": "mean() is wrong"}')  # `gh issue view 7 --json number,title`
    assert_one_line_error(submit("title.json"), "title.json", "without its body", "--json number,title,body,url")


def test_a_path_that_is_no_git_repository(tmp_path, submit):
    issue = write_issue(tmp_path / "issue.json", calc_issue(tmp_path / "nowhere", "abc123"))
    (tmp_path / "nowhere").mkdir()
    assert_one_line_error(submit(str(issue)), "not a git repository")


def test_an_unknown_llm_is_refused_before_anything_starts(tmp_path):
    # no issue read, no store made, Ray not even imported: the flag is checked first
    code = ("import atexit, runpy, sys; atexit.register(lambda: print('ray imported:', 'ray' in sys.modules, file=sys.stderr)); "
            "sys.argv = ['magis-ray', 'submit', 'missing.md', '--store', 'store', '--llm', 'bogus']; "
            "runpy.run_module('magis_ray.cli.main', run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert_one_line_error(result, "--llm: llm must be one of auto, local, openai, scripted:FILE, not 'bogus'")
    assert "ray imported: False" in result.stderr and not (tmp_path / "store").exists()


def test_a_base_commit_that_is_not_in_the_repository(calc_repo, tmp_path, submit):
    repo_path, _ = calc_repo
    issue = write_issue(tmp_path / "issue.json", calc_issue(repo_path, "0" * 40))
    assert_one_line_error(submit(str(issue)), "not found")
