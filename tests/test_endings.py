"""Why a run ended without a patch, in one line (events/projections/ending.py): on stored logs,
and for each silent ending of a real run (the team in this process with the settings `submit`
settles, the scripted model over HTTP, a real git repository), where submit's summary names the
model and the reason and `apply` repeats it; `apply` prints push commands only for a remote that
exists. The commands run in this process: none of them starts a Ray."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from commands import Done, in_process
from gitfixtures import git, user_clone
from runs import constructed_run, fixed_new_events
from scenarios import FILES
from teamruns import run_team, settings_for

from magis_ray.cli.issue_input import prepare_issue
from magis_ray.cli.submit import conclude
from magis_ray.events import schema as ev
from magis_ray.events.projections import fold
from magis_ray.events.projections.ending import ending
from magis_ray.store.sqlite import SQLiteStore


EXAMPLE_SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "calc" / "script.json"


@pytest.fixture
def magis(capsys, monkeypatch):
    """`magis-ray ARGS` in this process, in the folder `cwd`."""
    def run(*args, cwd: Path | None = None) -> Done:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        return in_process(capsys, *args)

    return run


def endings(base: str, repo) -> dict[str, list]:
    started = ev.RunStarted(instance_id="calc-x", repo="calc", base_commit=base, problem_statement="# mean is wrong\n",
                            repo_path=str(repo))
    judge = "judge_relevance: no usable answer after 2 tries"
    return {
        "located0nothing": [started, ev.StepFailed(purpose="judge_relevance", reason=judge, path="calc/stats.py"),
                            ev.FilesLocated(paths=[]), ev.RunFinished(outcome="no_patch", summary="no file needs a change")],
        "allstepsfaile": [started, ev.FilesLocated(paths=["calc/stats.py"]),
                          ev.TaskDefined(task_id="T1", path="calc/stats.py", description="Divide by n."),
                          ev.StepFailed(purpose="write_code", reason="the edits stayed invalid after 2 corrections", task_id="T1"),
                          ev.TaskFinished(task_id="T1", status="failed", reason="attempt 1: write_code: the edits stayed invalid"),
                          ev.RunFinished(outcome="no_patch", summary="T1 failed")],
        "unreachable01": [started, ev.RunFailed(reason="model unreachable at http://127.0.0.1:9/v1 (connection refused)",
                                                error_type="APIConnectionError")],
    }


WANT = {
    "located0nothing": "Repository Custodian: located no file to change for the issue (last step failure: judge_relevance: "
                       "judge_relevance: no usable answer after 2 tries)",
    "allstepsfaile": "Developer: every task failed: T1 (calc/stats.py): attempt 1: write_code: the edits stayed invalid",
    "unreachable01": "run failed (APIConnectionError): model unreachable at http://127.0.0.1:9/v1 (connection refused)",
}


def test_each_silent_ending_has_its_reason_and_apply_repeats_it(tmp_path, magis):
    repo, base = user_clone(tmp_path / "calc", FILES)
    store = tmp_path / "store"
    runs = endings(base, repo)
    with SQLiteStore.open(store, create=True) as s:
        for run_id, events in runs.items():
            s.append(run_id, 0, fixed_new_events([("supervisor", e) for e in events]))
    for run_id, events in runs.items():
        with SQLiteStore.open(store) as s:
            assert ending(fold(s.read(run_id))) == WANT[run_id]
        result = magis("apply", run_id, "--store", store, cwd=repo)
        assert result.code == 2 and result.out == ""
        assert result.err == f"magis-ray: error: run {run_id} has no patch to apply: {WANT[run_id]}\n"


def test_apply_prints_push_commands_only_for_a_remote_that_exists(tmp_path, magis):
    repo, base = user_clone(tmp_path / "calc", FILES)
    store = tmp_path / "store"
    with SQLiteStore.open(store, create=True) as s:
        s.append("a1b2c3d4e5f6", 0, fixed_new_events(constructed_run(repo, base)))
    alone = magis("apply", "a1b2c3d4e5f6", "--store", store, "--repo", repo, "--branch", "fix/one", cwd=repo)
    assert alone.code == 0, alone.err
    assert "git push" not in alone.out and "gh pr create" not in alone.out
    assert f"has no remote to push to: add one with `git -C {repo} remote add origin URL`" in alone.out
    git("remote", "add", "upstream", "https://example.com/calc.git", cwd=repo)
    pushed = magis("apply", "a1b2c3d4e5f6", "--store", store, "--repo", repo, "--branch", "fix/two", cwd=repo)
    assert pushed.code == 0, pushed.err
    assert "  git push -u upstream fix/two\n" in pushed.out and "  gh pr create --head fix/two --fill\n" in pushed.out


# --- a real run: submit says the model and the reason, apply repeats the reason ------------------


def script_file(path: Path, replace: dict[str, dict]) -> Path:
    """The example's script, with the answers of the steps in `replace` (purpose -> answer)."""
    script = json.loads(EXAMPLE_SCRIPT.read_text())
    rules = [r for r in script["rules"] if r["purpose"] not in replace]
    script["rules"] = [*({"purpose": purpose, "json": answer} for purpose, answer in replace.items()), *rules]
    script["latency_s"] = 0
    path.write_text(json.dumps(script))
    return path


def summary(stdout: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in stdout.splitlines() if ":" in line)}


def submit_and_apply(repo: Path, magis, capsys, monkeypatch, script: Path) -> tuple[dict[str, str], Done]:
    """`submit issue.md --tests off --llm scripted:SCRIPT` in the repository: the run, then submit's
    own ending (its files and summary); then `apply` of the run."""
    (repo / "issue.md").write_text("# mean() returns the wrong value\n\nmean([1, 2, 3, 4]) is 3.33, not 2.5.\n")
    monkeypatch.chdir(repo)
    store = str(repo.parent / "store")
    run = run_team(prepare_issue("issue.md", None, None, None).issue, settings_for(repo, tests="off", llm=f"scripted:{script}"),
                   Path(store))
    capsys.readouterr()
    conclude(store, run.run_id, run.end)
    out = summary(capsys.readouterr().out)
    assert out["run"] == run.run_id
    apply = magis("apply", out["run"], "--store", store, cwd=repo)
    assert apply.code == 2 and apply.out == "", apply.out + apply.err
    return out, apply


def assert_repeated(out: dict[str, str], apply: Done, reason: str) -> None:
    assert out["reason"] == reason, out
    assert apply.err == f"magis-ray: error: run {out['run']} has no patch to apply: {reason}\n"


def test_a_run_that_locates_nothing_says_so_at_submit_and_apply(tmp_path, magis, capsys, monkeypatch):
    repo, _ = user_clone(tmp_path / "calc", FILES)
    script = script_file(tmp_path / "nothing.json", {"judge_relevance": {"relevant": False, "reason": "Not this one."}})
    out, apply = submit_and_apply(repo, magis, capsys, monkeypatch, script)
    assert out["outcome"] == "no_patch" and out["model"] == f"scripted ({script})"
    assert out["usage"].endswith("$0.0000")
    assert_repeated(out, apply, "Repository Custodian: located no file to change for the issue")


def test_a_run_whose_every_answer_fails_validation_says_which_step_at_submit_and_apply(tmp_path, magis, capsys, monkeypatch):
    repo, _ = user_clone(tmp_path / "calc", FILES)
    (repo / "magis.toml").write_text('[models]\ndeveloper = "gpt-4o"\n')  # a priced name, on a scripted endpoint
    script = script_file(tmp_path / "invalid.json", {"write_code": {"edits": "none, thanks"}})
    out, apply = submit_and_apply(repo, magis, capsys, monkeypatch, script)
    assert out["outcome"] == "no_patch" and out["model"] == f"scripted ({script}); developer: gpt-4o"
    assert out["usage"].endswith("$0.0000")  # scripted answers cost nothing, whatever [models] calls them
    assert out["reason"].startswith("Developer: every task failed: T1 (calc/stats.py): ") and "write_code" in out["reason"]
    assert_repeated(out, apply, out["reason"])


def test_an_unreachable_model_is_refused_before_a_run_is_recorded(tmp_path, magis):
    """The endpoint is asked for its models before Ray starts: no run, one line. (A model lost
    mid-run ends the run as `unreachable01` above says, resumably.)"""
    repo, _ = user_clone(tmp_path / "calc", FILES)
    (repo / "issue.md").write_text("# mean() returns the wrong value\n\nmean([1, 2, 3, 4]) is 3.33, not 2.5.\n")
    submit = magis("submit", "issue.md", "--store", repo.parent / "store", "--tests", "off", "--llm", "openai",
                   "--base-url", "http://127.0.0.1:9/v1", "--model", "gpt-4o", "--timeout", "2", cwd=repo)
    assert submit.code == 2 and submit.out == "", submit.out + submit.err
    assert submit.err.startswith("magis-ray: error: the model endpoint http://127.0.0.1:9/v1 does not answer")
    assert len(submit.err.splitlines()) == 1 and not (repo.parent / "store" / "events.sqlite3").exists()