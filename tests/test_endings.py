"""Why a run ended without a patch, in one line (events/projections/ending.py), and `apply`
repeating it through the CLI; `apply` prints push commands only for a remote that exists.

Not yet here (left for the submit summary, which issue 33's branch is rewriting): the same line
printed by `submit`'s terminal summary for runs driven end to end by the scripted model."""
from __future__ import annotations

import subprocess

from gitfixtures import git, user_clone
from inspecting import MAGIS, env
from runs import constructed_run, fixed_new_events
from scenarios import FILES

from magis_ray.events import schema as ev
from magis_ray.events.projections import fold
from magis_ray.events.projections.ending import ending
from magis_ray.store.sqlite import SQLiteStore


def magis(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*MAGIS, *map(str, args)], capture_output=True, text=True, env=env(), timeout=120, cwd=cwd)


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


def test_each_silent_ending_has_its_reason_and_apply_repeats_it(tmp_path):
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
        assert result.returncode == 2 and result.stdout == ""
        assert result.stderr == f"magis-ray: error: run {run_id} has no patch to apply: {WANT[run_id]}\n"


def test_apply_prints_push_commands_only_for_a_remote_that_exists(tmp_path):
    repo, base = user_clone(tmp_path / "calc", FILES)
    store = tmp_path / "store"
    with SQLiteStore.open(store, create=True) as s:
        s.append("a1b2c3d4e5f6", 0, fixed_new_events(constructed_run(repo, base)))
    alone = magis("apply", "a1b2c3d4e5f6", "--store", store, "--repo", repo, "--branch", "fix/one", cwd=repo)
    assert alone.returncode == 0, alone.stderr
    assert "git push" not in alone.stdout and "gh pr create" not in alone.stdout
    assert f"has no remote to push to: add one with `git -C {repo} remote add origin URL`" in alone.stdout
    git("remote", "add", "upstream", "https://example.com/calc.git", cwd=repo)
    pushed = magis("apply", "a1b2c3d4e5f6", "--store", store, "--repo", repo, "--branch", "fix/two", cwd=repo)
    assert pushed.returncode == 0, pushed.stderr
    assert "  git push -u upstream fix/two\n" in pushed.stdout and "  gh pr create --head fix/two --fill\n" in pushed.stdout
