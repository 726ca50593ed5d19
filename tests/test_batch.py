"""`magis-ray submit DATASET.jsonl`: a batch on Ray with SWE-bench predictions, per-instance
errors that do not stop it, two processes of one batch started together, a shared token budget
that holds, and resume without running any instance twice. The batches join the module's Ray (conftest.py's module_ray), the killed one too:
that a killed driver's own Ray ends with it is test_resume.py's SIGKILL test."""
from __future__ import annotations

import json
import os
import signal

import msgspec
import pytest
from commands import started
from scenarios import BOTH_ISSUE, MEAN_FIX, SHOUT_FIX, calc_issue
from waiting import COMMAND_S, wait_until

from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.events.projections import fold, metrics
from magis_ray.events.schema import RunStarted
from magis_ray.store import open_store


@pytest.fixture
def dataset(calc_repo, tmp_path):
    """Two good instances of calc/calc (repos dir layout), three bad lines."""
    repo_path, base = calc_repo
    repos = tmp_path / "repos"
    repos.mkdir()
    repo_path.rename(repos / "calc__calc")

    def line(issue, **extra):
        record = msgspec.to_builtins(msgspec.structs.replace(issue, repo_path=None))
        record.pop("repo_path")
        record.update(extra)
        return json.dumps(record)

    good_one = calc_issue(repo_path, base, instance_id="calc__calc-1")
    good_two = calc_issue(repo_path, base, BOTH_ISSUE, instance_id="calc__calc-2")
    lines = [
        line(good_one, FAIL_TO_PASS='["tests/test_calc.py::test_mean"]', PASS_TO_PASS="[]"),
        json.dumps({"instance_id": "calc__calc-3", "repo": "calc/calc", "problem_statement": "no base commit"}),
        line(good_two),
        line(msgspec.structs.replace(good_one, instance_id="other__repo-1", repo="other/repo")),
        line(msgspec.structs.replace(good_one, instance_id="calc__calc-4", base_commit="1" * 40)),
    ]
    path = tmp_path / "lite.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path, repos


def team(delay_s=0.0):
    return ScriptedTeam({"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]}, delay_s=delay_s)


def batch_args(dataset, repos, server, *extra):
    return ["submit", str(dataset), "--repos-dir", str(repos), "--out", "preds.jsonl", "--store", "store",
            "--base-url", server.base_url, "--model", "m", "--workers", "2", "--top-k", "4", *extra]


def magis(args, cwd, ray: dict[str, str] | None = None, **popen):
    """The batch command started; `ray`: the variables that join a Ray (module_ray), else it starts its own."""
    return started(*args, cwd=cwd, env={"OPENAI_API_KEY": "k", "MAGIS_LEASE_S": "2", **(ray or {})}, **popen)


def finish(proc, timeout=COMMAND_S):
    out, err = proc.communicate(timeout=timeout)
    assert "Traceback" not in out + err, err
    return proc.returncode, out, err


def runs_per_instance(store_path):
    with open_store(str(store_path)) as store:
        counts: dict[str, int] = {}
        for info in store.list_runs():
            first = store.read(info.run_id)[0].event
            assert isinstance(first, RunStarted)
            counts[first.instance_id] = counts.get(first.instance_id, 0) + 1
        return counts


def test_two_batches_of_one_name_started_together_predict_every_instance_once_and_report_bad_ones(dataset, tmp_path, module_ray):
    """Two processes of the same batch (one store, the batch's name from the dataset) started at
    once: each instance runs once, by one of them, and both write every prediction and report the
    bad lines. The same command again skips everything finished and asks nothing."""
    path, repos = dataset
    with ScriptedServer(team(delay_s=0.05)) as server:
        both = [magis(batch_args(path, repos, server, "--out", out, "--batch", "lite"), tmp_path, {**module_ray, "MAGIS_LEASE_S": "4"})
                for out in ("preds.jsonl", "other.jsonl")]
        for code, out, err in [finish(proc) for proc in both]:
            assert code == 0, err
            assert "5 instances: 3 error, " in out
            assert "calc__calc-3: error:" in out and "base_commit" in out
            assert "other__repo-1: error:" in out and "calc__calc-4: error:" in out
        preds = [json.loads(line) for line in (tmp_path / "preds.jsonl").read_text().splitlines()]
        assert [json.loads(line) for line in (tmp_path / "other.jsonl").read_text().splitlines()] == preds
        assert [p["instance_id"] for p in preds] == ["calc__calc-1", "calc__calc-3", "calc__calc-2", "other__repo-1", "calc__calc-4"]
        assert all(set(p) == {"instance_id", "model_name_or_path", "model_patch"} for p in preds)
        patches = {p["instance_id"]: p["model_patch"] for p in preds}
        assert "calc/stats.py" in patches["calc__calc-1"]
        assert "calc/stats.py" in patches["calc__calc-2"] and "calc/texts.py" in patches["calc__calc-2"]
        assert patches["calc__calc-3"] == patches["other__repo-1"] == patches["calc__calc-4"] == ""
        sent = len(server.requests)
        # the same command again: everything finished is skipped, nothing is asked or run again
        code, out, err = finish(magis(batch_args(path, repos, server, "--batch", "lite"), tmp_path, module_ray))
        assert code == 0 and "2 skipped" in out and len(server.requests) == sent
        again = [json.loads(line) for line in (tmp_path / "preds.jsonl").read_text().splitlines()]
        assert again == preds
    assert runs_per_instance(tmp_path / "store") == {"calc__calc-1": 1, "calc__calc-2": 1}


def test_a_killed_batch_resumes_without_running_an_instance_twice(dataset, tmp_path, module_ray):
    """Killed on the module's Ray, and run again at once: what the dead driver's actors still write
    before Ray ends them is fenced out by the runs' leases."""
    path, repos = dataset
    script = team(delay_s=0.2)  # slow answers: the kill finds the batch's runs under way
    with ScriptedServer(script) as server:
        proc = magis(batch_args(path, repos, server), tmp_path, module_ray, start_new_session=True)
        # a guard on the run's first steps, which a loaded machine slows many times
        wait_until(lambda: any(r.purpose == "meeting_open" for r in server.requests), "a Manager opens a meeting",
                   timeout_s=COMMAND_S, while_running=proc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        script.delay_s = 0.0  # the batch run again has no kill to wait for
        code, out, err = finish(magis(batch_args(path, repos, server), tmp_path, module_ray))
        assert code == 0, err
    assert runs_per_instance(tmp_path / "store") == {"calc__calc-1": 1, "calc__calc-2": 1}
    preds = {json.loads(line)["instance_id"]: json.loads(line)["model_patch"] for line in (tmp_path / "preds.jsonl").read_text().splitlines()}
    assert "calc/stats.py" in preds["calc__calc-1"] and "calc/texts.py" in preds["calc__calc-2"]


# slow: test_cluster's budget test holds the same BatchRunner budget across a batch's runs
@pytest.mark.slow
def test_the_batch_budget_holds_across_its_runs(dataset, tmp_path, module_ray):
    path, repos = dataset
    budget = 6000
    with ScriptedServer(team()) as server:
        code, out, err = finish(magis(batch_args(path, repos, server, "--batch-budget", str(budget)), tmp_path, module_ray))
        assert code == 0, err
    with open_store(str(tmp_path / "store")) as store:
        spent = [metrics(fold(store.read(info.run_id)))["total"] for info in store.list_runs()]
    total = sum(m["prompt_tokens"] + m["completion_tokens"] for m in spent)
    assert 0 < total <= budget
    assert "budget" in out  # at least one run stopped on it
