"""The guide "Your own repository" (docs/guides/own-repository.md), through the CLI as a user runs
it: a fresh git repository, an issue.md, `submit` from inside the repository, `apply` to a branch,
the pull request's text, and the repository's own tests passing on the branch; getting started's
scripted run; each bad input one line and exit 2; and a model per role, two scripted servers,
per-role costs.

Real throughout: git repositories made with the git command line, Ray, SQLite, the scripted model
over HTTP, and (tests on) the bubblewrap sandbox. The guide runs whole, its commands as processes of
their own; getting started's scripted run and a model per role run the team in this process
(tests/teamruns.py), with the settings `submit` settles (getting started's command as printed runs
whole in test_docs_runnable.py); bad input is refused in this process, before any Ray."""
from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest
from commands import in_process, magis as command
from gitfixtures import checkout, files_at, git, read_tree_files, user_clone
from runs import fixed_new_events
from scenarios import FILES, MEAN_FIX
from teamruns import run_team, settings_for

from magis_ray.actors.execution.sandbox import bwrap_path
from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.actors.runtime.liveness import Liveness
from magis_ray.cli.issue_input import prepare_issue
from magis_ray.events import schema as ev
from magis_ray.store import open_store
from waiting import COMMAND_S

ROOT = Path(__file__).parents[1]
EXAMPLE = ROOT / "examples" / "calc"
SCRIPT = EXAMPLE / "script.json"
KEY = "sk-own-repository-never-logged-77"

needs_sandbox = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")


USER_SHELL = ("OPENAI_", "MAGIS_")  # what a user's shell lacks of the suite's environment


def environment(env_cache: Path | None = None, **extra: str) -> dict[str, str]:
    """The user's environment over a shell without the suite's settings (USER_SHELL): no model
    configured, tests at their default (on), no settings file of the machine's user; a test's own
    environment cache."""
    env = {"MAGIS_USER_CONFIG": os.devnull, "MAGIS_RAY": "own"}  # never another session's warm Ray (conftest.py)
    if env_cache is not None:
        env["MAGIS_ENV_CACHE"] = str(env_cache)
    return {**env, **extra}


def in_users_shell(monkeypatch, env: dict[str, str]) -> None:
    """This process's environment as `environment` gives a command's, for a command run in it."""
    for name in [name for name in os.environ if name.startswith(USER_SHELL)]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def magis(args: list[str], cwd: Path, env: dict[str, str]):
    result = command(*args, cwd=cwd, env=env, without=USER_SHELL)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    return result


def one_line_error(result, *fragments: str) -> str:
    code, err = (result.code, result.err) if hasattr(result, "code") else (result.returncode, result.stderr)
    assert code == 2, (result, err)
    [line] = err.strip().splitlines()
    assert line.startswith("magis-ray: error: "), line
    for fragment in fragments:
        assert fragment in line, line
    return line


def summary(stdout: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in stdout.splitlines() if ":" in line)}


# --- the docs, as printed ------------------------------------------------------------------------


def page(path: str) -> str:
    """A page of the documentation site, as the reader sees it in docs/."""
    return (ROOT / "docs" / path).read_text()


def first_bash_block(section: str) -> str:
    return re.search(r"```bash\n(.*?)\n```", section, re.S).group(1)


def project_files() -> dict[str, str]:
    root = EXAMPLE / "project"
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def snapshot(path: Path):
    """What `apply` must leave alone: HEAD, its branch, the index and the working tree (the store
    in .magis/ aside: reading it is SQLite's business)."""
    files = {name: data for name, data in read_tree_files(path).items() if not name.startswith(".magis/")}
    return (git("rev-parse", "HEAD", cwd=path), git("symbolic-ref", "HEAD", cwd=path), git("status", "--porcelain", cwd=path),
            git("diff", cwd=path), git("diff", "--cached", cwd=path), files)


def pytest_in(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=path,
                          capture_output=True, text=True, timeout=COMMAND_S)


# slow: test_docs_runnable runs the guide's page whole, and test_apply its steps in-process
@pytest.mark.slow
@needs_sandbox
def test_your_own_repository_as_the_guide_says(tmp_path, env_cache):
    block = first_bash_block(page("guides/own-repository.md"))
    name, issue_text = re.search(r"cat > (\S+) <<'EOF'\n(.*?)\nEOF", block, re.S).groups()
    commands = [shlex.split(line, comments=True) for line in block.splitlines() if line.startswith("magis-ray ")]
    assert [c[:2] for c in commands] == [["magis-ray", "submit"], ["magis-ray", "apply"], ["magis-ray", "audit"]]

    repo, base = user_clone(tmp_path / "calc", project_files())  # a fresh repository, as `git init` and `git commit` make it
    git("remote", "add", "origin", "https://example.com/calc.git", cwd=repo)  # where the branch would be pushed
    assert pytest_in(repo).returncode == 1  # its test of mean() fails: the bug is real
    (repo / name).write_text(issue_text + "\n")
    (repo / "README.md").write_text("# calc\n\nWork in progress.\n")  # an uncommitted change the run does not see
    env = environment(env_cache)

    submit = magis([*commands[0][1:], "--llm", f"scripted:{SCRIPT}"], repo, env)
    assert submit.returncode == 0, submit.stderr
    out = summary(submit.stdout)
    assert out["outcome"] == "patched"
    run_id = out["run"]
    notices = [line for line in submit.stderr.splitlines() if line.startswith("magis-ray: notice:")]
    assert notices == [f"magis-ray: notice: 1 file(s) with uncommitted changes in {repo.resolve()} are not seen: "
                       f"the run reads HEAD ({base[:10]})"]
    assert f"run {run_id}: calc-mean-returns-the-wrong-value (calc @ {base[:10]})" in submit.stderr

    before = snapshot(repo)
    test_cmd = f"{shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider tests"  # the project's own (test-cmd)
    apply = magis([a.replace("RUN", run_id) for a in commands[1][1:]], repo, {**env, "MAGIS_TEST_CMD": test_cmd})
    assert apply.returncode == 0, apply.stderr
    assert snapshot(repo) == before  # HEAD, its branch, the index and the working tree: unchanged
    assert apply.stdout.startswith("branch fix/mean: 1 commit (")
    assert "  git push -u origin fix/mean\n" in apply.stdout and "  gh pr create --head fix/mean --fill\n" in apply.stdout
    # one commit on the base, whose tree is the base plus the run's diff (as `git apply` applies it)
    assert git("rev-list", f"{base}..fix/mean", cwd=repo).split() == [git("rev-parse", "fix/mean", cwd=repo).strip()]
    assert git("rev-parse", "fix/mean^", cwd=repo).strip() == base
    work = checkout(pygit2.Repository(str(repo)), base, tmp_path / "expected")
    git("apply", str(repo / ".magis" / "runs" / run_id / "diff.patch"), cwd=work)
    assert files_at(pygit2.Repository(str(repo)), "fix/mean") == read_tree_files(work) != files_at(pygit2.Repository(str(repo)), base)
    message = git("log", "-1", "--format=%B", "fix/mean", cwd=repo)
    assert message.startswith("mean() returns the wrong value\n\n") and f"run {run_id}" in message and "calc/stats.py" in message

    # the repository's own tests pass on the branch: the command apply printed for them, run as printed
    [run_tests] = [line.strip() for line in apply.stdout.splitlines() if line.strip().endswith(test_cmd + ")")]
    assert run_tests.startswith(f"git -C {repo} worktree add {repo}-fix-mean fix/mean && (cd {repo}-fix-mean && ")
    tests = subprocess.run(["bash", "-c", run_tests], cwd=tmp_path, capture_output=True, text=True, timeout=COMMAND_S)
    assert tests.returncode == 0 and "2 passed" in tests.stdout, tests.stdout + tests.stderr
    assert git("rev-parse", "HEAD", cwd=tmp_path / "calc-fix-mean") == git("rev-parse", "fix/mean", cwd=repo)

    audit_args = commands[2][1:commands[2].index(">")]
    pr = magis([a.replace("RUN", run_id) for a in audit_args], repo, env)
    assert pr.returncode == 0, pr.stderr
    assert pr.stdout.startswith("## mean() returns the wrong value\n\nResolves `calc-mean-returns-the-wrong-value`.")
    assert [line for line in pr.stdout.splitlines() if line.startswith("### ")] == [
        "### The issue", "### The plan", "### Changes", "### Tests", "### Cost"]
    assert "#### `calc/stats.py`" in pr.stdout and "+    return total / len(values)" in pr.stdout
    assert "| before the change | reproduction test (must fail) | failed as expected | 0 | 1 |" in pr.stdout
    assert re.search(r"\| with the change \| tests of the patch: `[^`]*` \| passed \| 3 \| 0 \|", pr.stdout), pr.stdout
    # the footer names the command that shows the audit, never a file on the author's disk
    assert pr.stdout.rstrip().endswith(f"`magis-ray audit {run_id}`.") and ".magis/" not in pr.stdout

    # the same branch again, or a working tree where a folder is: refused, and nothing changes
    again = magis(["apply", run_id, "--branch", "fix/mean"], repo, env)
    one_line_error(again, "branch fix/mean exists already")
    taken = magis(["apply", run_id, "--branch", "fix/other", "--worktree", str(tmp_path / "calc-fix-mean")], repo, env)
    one_line_error(taken, f"--worktree {tmp_path / 'calc-fix-mean'} exists already")
    assert snapshot(repo) == before and "fix/other" not in pygit2.Repository(str(repo)).branches.local


@needs_sandbox
def test_getting_started_s_scripted_run_answers_the_steps_its_tests_add(tmp_path, env_cache, monkeypatch):
    """Getting started's scripted command, its issue, repository and script, with tests at their
    default (on): the run is patched and its tests ran, the script answering the steps they add.
    The command as printed runs whole in test_docs_runnable.py (docs/getting-started.md)."""
    from magis_ray.cli.progress import tests_line
    from magis_ray.events.projections.tests import tests_decision

    [command_line] = re.findall(r"^\$ (magis-ray submit .*--llm scripted:.*)$", page("getting-started.md"), re.M)
    _, issue_file, *options = shlex.split(command_line)[1:]
    flags = dict(zip(options[::2], options[1::2]))
    assert sorted(flags) == ["--llm", "--repo"], command_line
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # the project's folder, as the docs' commands see it
    subprocess.run([sys.executable, str(EXAMPLE / "make_repo.py"), flags["--repo"]], cwd=tmp_path, check=True, capture_output=True)
    in_users_shell(monkeypatch, environment(env_cache))
    monkeypatch.chdir(tmp_path)
    issue = prepare_issue(issue_file, flags["--repo"], None, None).issue
    settings = settings_for(issue.repo_path, llm=flags["--llm"])
    run = run_team(issue, settings, tmp_path / ".magis")
    assert settings.tests and run.end.outcome == "patched"
    [prepared] = run.tests_ran("prepare")
    assert "tests off" not in tests_line(tests_decision(settings.tests, prepared))  # the tests ran
    kinds = {type(r.event).__name__ for r in run.events}
    assert {"ReproductionWritten", "TestsRan"} <= kinds


# --- bad input: one line, exit 2 -------------------------------------------------------------------


def test_an_empty_issue_file_and_a_repository_without_commits(tmp_path, monkeypatch, capsys):
    repo, _ = user_clone(tmp_path / "calc", FILES)
    (repo / "issue.md").write_text("\n  \n")
    in_users_shell(monkeypatch, environment())

    def submit(cwd: Path, *args: str):
        monkeypatch.chdir(cwd)
        return in_process(capsys, "submit", *args)

    one_line_error(submit(repo, "issue.md"), "issue.md: the issue is empty")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    one_line_error(submit(repo, "-"), "standard input: the issue is empty")
    empty = tmp_path / "new"
    empty.mkdir()
    git("init", "-q", ".", cwd=empty)
    (empty / "issue.md").write_text("# mean is wrong\n")
    one_line_error(submit(empty, "issue.md"), "has no commits yet")
    one_line_error(submit(tmp_path, str(empty / "issue.md")), "not in a git repository")
    one_line_error(submit(empty, "issue.md", "--repo", str(repo), "--base", "nope"), "--base nope: no such commit")


def stored_run(store_path: Path, run_id: str, *events: ev.AnyEvent) -> None:
    with open_store(str(store_path), create=True) as store:
        store.append(run_id, 0, fixed_new_events([("supervisor", e) for e in events]))


def test_a_run_without_a_patch_a_failed_one_and_one_still_running_are_refused(tmp_path, monkeypatch, capsys):
    repo, base = user_clone(tmp_path / "calc", FILES)
    started = ev.RunStarted(instance_id="calc-x", repo="calc", base_commit=base, problem_statement="mean is wrong",
                            repo_path=str(repo))
    store = tmp_path / "store"
    stored_run(store, "nopatch00001", started, ev.RunFinished(outcome="no_patch", summary="no file needs a change"))
    stored_run(store, "failed000001", started, ev.RunFailed(reason="token budget exhausted", resumable=False))
    stored_run(store, "running00001", started, ev.FilesRanked(candidates=[]))
    in_users_shell(monkeypatch, environment())
    monkeypatch.chdir(repo)
    before = snapshot(repo)
    apply = ["apply", "--store", str(store), "--branch", "fix/x"]
    one_line_error(in_process(capsys, *apply, "nopatch00001"), "run nopatch00001 has no patch to apply: no file needs a change")
    one_line_error(in_process(capsys, *apply, "failed000001"),
                   "run failed000001 has no patch to apply: run failed: token budget exhausted")
    with Liveness(str(store)) as liveness:  # a driver holds the run: it is still running
        liveness.take("running00001")
        one_line_error(in_process(capsys, *apply, "running00001"), "run running00001 is still running on", f"pid {os.getpid()}")
    # its driver gone (the lease given up), the run is cut off: resume it first
    one_line_error(in_process(capsys, *apply, "running00001"), "was cut off", "magis-ray resume running00001")
    assert snapshot(repo) == before and "fix/x" not in pygit2.Repository(str(repo)).branches.local


# --- a model per role ----------------------------------------------------------------------------

DEVELOPER_STEPS = {"design_qa", "meeting_speak", "locate_lines", "write_code"}  # asked in the Developers' lanes


def test_a_model_per_role_routes_each_role_to_its_own_server_and_the_audit_costs_them(tmp_path, monkeypatch, capsys):
    """Project settings name the run's model and a Developer's own, on a second server; the
    environment, a flag and the user's file set the rest. Each role's requests reach its own
    server under its own model name, the audit shows each role's tokens and cost under its model,
    and the run records all it used: replay needs no settings file. The team runs in this process,
    with the settings `submit` settles from the same layers."""
    with ScriptedServer(ScriptedTeam({"calc/stats.py": [MEAN_FIX]})) as main, \
            ScriptedServer(ScriptedTeam({"calc/stats.py": [MEAN_FIX]})) as developers:
        files = {**FILES, "magis.toml": (
            f'llm = "openai"\nbase-url = "{main.base_url}"\nmodel = "gpt-4o-mini"\ntop-k = 3\nmax-files = 3\n'
            f'[models]\ndeveloper = {{ model = "gpt-4o", base-url = "{developers.base_url}" }}\n')}
        repo, base = user_clone(tmp_path / "calc", files)
        (repo / "issue.md").write_text("# mean() returns the wrong value\n\n`mean([1, 2, 3, 4])` is 3.33, not 2.5.\n")
        user = tmp_path / "user.toml"
        user.write_text("timeout = 30\ntop-k = 9\n")
        in_users_shell(monkeypatch, environment(MAGIS_USER_CONFIG=str(user), MAGIS_MAX_FILES="2", MAGIS_TESTS="off",
                                                OPENAI_API_KEY=KEY))
        monkeypatch.chdir(repo)
        issue = prepare_issue("issue.md", None, None, None).issue  # `submit issue.md` in the repository
        run = run_team(issue, settings_for(repo, max_review_rounds=2), repo / "store")  # --max-review-rounds 2
        assert run.end.outcome == "patched", run.end
        run_id = run.run_id
        to_main, to_developers = main.requests, developers.requests

    assert {r.purpose for r in to_developers} == DEVELOPER_STEPS
    assert {r.body["model"] for r in to_developers} == {"gpt-4o"}
    assert not {r.purpose for r in to_main} & DEVELOPER_STEPS and {r.body["model"] for r in to_main} == {"gpt-4o-mini"}
    assert {"summarize_file", "judge_relevance", "define_task", "make_plan", "review_patch"} <= {r.purpose for r in to_main}

    events = run.events
    exchanges = [(r.actor.split(":")[0], r.event.model) for r in events if isinstance(r.event, ev.LLMExchanged)]
    assert {model for role, model in exchanges if role == "developer"} == {"gpt-4o"}
    assert {model for role, model in exchanges if role != "developer"} == {"gpt-4o-mini"}
    started = events[0].event
    s = started.settings
    assert (s.model, s.top_k, s.max_files, s.max_review_rounds, s.endpoint.timeout) == ("gpt-4o-mini", 3, 2, 2, 30)  # project, env, flag, user
    assert (s.endpoint.llm, s.endpoint.base_url) == ("openai", main.base_url)
    assert [(r.role, r.model, r.base_url) for r in s.endpoint.models] == [("developer", "gpt-4o", developers.base_url)]
    assert KEY.encode() not in (repo / "store" / "events.sqlite3").read_bytes()

    audit = json.loads(in_process(capsys, "audit", run_id, "--store", "store", "--format", "json").out)
    by_role_model = audit["metrics"]["by_role_model"]
    assert list(by_role_model["developer"]) == ["gpt-4o"] and list(by_role_model["custodian"]) == ["gpt-4o-mini"]
    for role, models in by_role_model.items():
        for model, bucket in models.items():
            assert bucket["cost_usd"] > 0 and bucket["prompt_tokens"] > 0, (role, model)
    dev = by_role_model["developer"]["gpt-4o"]
    assert dev["calls"] == len(to_developers)
    markdown = in_process(capsys, "audit", run_id, "--store", "store").out
    assert f"| developer | gpt-4o | {dev['calls']} | {dev['prompt_tokens']} | {dev['completion_tokens']} | {dev['cost_usd']:.4f} |" in markdown

    # the log holds all the run used: replay needs neither the settings file nor the environment
    (repo / "magis.toml").unlink()
    in_users_shell(monkeypatch, environment())
    replay = in_process(capsys, "replay", run_id, "--store", "store")
    assert replay.code == 0 and "no divergence" in replay.out, replay.out + replay.err
