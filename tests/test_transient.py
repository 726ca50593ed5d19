"""Transient model faults (500, 429, a timeout, after every retry) stop a run with a resumable
RunFailed naming the cause, never a run finished as if the model had answered; a plain resume
against the healthy server then finishes with the diff an uninterrupted run gives, and a re-run
batch picks the instance up.

The default run tests this on a run of the team in this process (tests/teamruns.py) with the line
`submit` ends on; the whole `submit` and `resume` commands, which join the module's Ray
(conftest.py's module_ray), are under `slow`: a whole resume after a stop is test_start_stop.py's."""
from __future__ import annotations

import json

import pytest
from checks import assert_consistent_log
from scenarios import MEAN_DIFF, MEAN_FIX, calc_issue, write_issue
from teamruns import resume_team, run_team, settings_for
from test_batch import batch_args, dataset, finish, magis, team as batch_team  # noqa: F401 - the dataset fixture
from test_resume import run

from magis_ray.actors.model.scripted_server import Rule, ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.cli.submit import conclude
from magis_ray.events.errors import Failed
from magis_ray.events.projections import final_diff, fold
from magis_ray.events.schema import LLMExchanged, RunFailed, RunFinished, RunResumed
from magis_ray.store import open_store


# The mean issue, one task: a fault's stop and its resume need no second task (and no second
# Developer and QA engineer to start).
EXPECTED_DIFF = MEAN_DIFF


def team() -> ScriptedTeam:
    return ScriptedTeam({"calc/stats.py": [MEAN_FIX]})


@pytest.fixture
def issue_file(calc_repo, tmp_path):
    repo_path, base = calc_repo
    return write_issue(tmp_path / "issue.json", calc_issue(repo_path, base))


class Fault:
    """Answers one step with a fault while `on`; everything else falls through to the team."""

    def __init__(self, rule: Rule, purpose: str, contains: str = ""):
        self.rule, self.purpose, self.contains, self.on = rule, purpose, contains, True

    def __call__(self, request):
        if self.on and request.purpose == self.purpose and self.contains in request.text:
            return self.rule
        return None


def test_a_fault_stops_the_run_with_its_line_and_a_plain_resume_finishes_it_with_the_same_diff_in_process(calc_repo, tmp_path):
    repo_path, base = calc_repo
    store = tmp_path / "store"
    fault = Fault(Rule(status=500, reply="upstream exploded"), "write_code")
    with ScriptedServer([fault, team()]) as server:
        cut = run_team(calc_issue(repo_path, base), settings_for(repo_path, base_url=server.base_url, model="m"), store)
        assert isinstance(cut.end, RunFailed) and cut.end.resumable
        assert not cut.of("RunFinished")
        with pytest.raises(Failed) as failed:  # the line `submit` ends on
            conclude(str(store), cut.run_id, cut.end)
        line = str(failed.value)
        assert failed.value.exit_status == 2
        assert line.startswith(f"run {cut.run_id} failed: no reachable model (write_code: ")
        assert "http 500: upstream exploded (after 5 tries)" in line
        assert line.endswith(f"resume it with `magis-ray resume {cut.run_id} --store {store}`")
        fault.on = False  # the server is healthy again
        resumed = resume_team(store, cut.run_id)  # the settings the run recorded, as a resume given no flags
        asked = [r for r in server.requests if r.purpose == "write_code"]
    assert {r.body["model"] for r in server.requests} == {"m"}
    assert asked[-1].headers.get("x-magis-run") == cut.run_id
    assert_consistent_log(resumed.events)
    assert isinstance(resumed.end, RunFinished) and final_diff(fold(resumed.events)) == EXPECTED_DIFF
    [marker] = resumed.of("RunResumed")
    assert marker.superseded >= 2  # the unanswered exchange and the failure are retried, not kept
    assert all(e.model == "m" for e in resumed.of("LLMExchanged"))


# slow: the same stop and resume as whole commands; the default run's is the case above, in process
@pytest.mark.slow
@pytest.mark.parametrize(
    "rule, cause",
    [
        (Rule(status=500, reply="upstream exploded"), "http 500: upstream exploded (after 5 tries)"),
        (Rule(status=429, reply="rate limited", retry_after_s=0), "http 429: rate limited (after 5 tries)"),
        (Rule(hang=True), "timeout: no answer within 0.5 s (after 5 tries)"),
    ],
    ids=["http-500", "http-429", "timeout"],
)
def test_a_fault_stops_the_run_and_a_plain_resume_finishes_it_with_the_same_diff(rule, cause, issue_file, tmp_path, module_ray):
    fault = Fault(rule, "write_code")
    with ScriptedServer([fault, team()]) as server:
        code, out, err = run(["submit", str(issue_file), "--store", "store", "--base-url", server.base_url, "--model", "m",
                              "--timeout", "0.5"], tmp_path, env_extra=module_ray)
        run_id = out.split("run:", 1)[1].split()[0]
        [line] = err.strip().splitlines()[-1:]
        assert code == 2 and line.startswith(f"magis-ray: error: run {run_id} failed: no reachable model (write_code: ")
        assert cause in line and line.endswith(f"resume it with `magis-ray resume {run_id} --store store`")
        with open_store(str(tmp_path / "store")) as s:
            cut = s.read(run_id)
        assert isinstance(cut[-1].event, RunFailed) and cut[-1].event.resumable
        assert not [r for r in cut if isinstance(r.event, RunFinished)]
        fault.on = False  # the server is healthy again
        # the hint as printed: no model flags, so the run's recorded endpoint, model and timeout
        code, out, err = run(["resume", run_id, "--store", "store"], tmp_path, env_extra={**module_ray, "OPENAI_API_KEY": ""})
        assert code == 0, err
        asked = [r for r in server.requests if r.purpose == "write_code"]
    assert {r.body["model"] for r in server.requests} == {"m"}
    assert asked[-1].headers.get("x-magis-run") == run_id
    with open_store(str(tmp_path / "store")) as s:
        events = s.read(run_id)
    assert_consistent_log(events)
    assert isinstance(events[-1].event, RunFinished) and final_diff(fold(events)) == EXPECTED_DIFF
    [marker] = [r.event for r in events if isinstance(r.event, RunResumed)]
    assert marker.superseded >= 2  # the unanswered exchange and the failure are retried, not kept
    assert all(r.event.model == "m" for r in events if isinstance(r.event, LLMExchanged))


# slow: a batch picking up a cut-off run is test_batch's killed batch, and a fault's resume point the in-process case above
@pytest.mark.slow
def test_a_batch_rerun_picks_up_an_instance_a_fault_cut_off(dataset, tmp_path, module_ray):
    path, repos = dataset
    fault = Fault(Rule(status=500, reply="down for maintenance"), "define_task", contains="Also `calc.texts.shout")  # calc__calc-2's issue
    with ScriptedServer([fault, batch_team()]) as server:
        code, out, err = finish(magis(batch_args(path, repos, server), tmp_path, module_ray))
        assert code == 0, err
        assert "calc__calc-2: failed: no reachable model (define_task: http 500: down for maintenance" in out
        preds = {json.loads(x)["instance_id"]: json.loads(x)["model_patch"] for x in (tmp_path / "preds.jsonl").read_text().splitlines()}
        assert "calc/stats.py" in preds["calc__calc-1"] and preds["calc__calc-2"] == ""
        fault.on = False
        code, out, err = finish(magis(batch_args(path, repos, server), tmp_path, module_ray))
        assert code == 0, err
        assert "1 skipped" in out and "1 finished" in out
    preds = {json.loads(x)["instance_id"]: json.loads(x)["model_patch"] for x in (tmp_path / "preds.jsonl").read_text().splitlines()}
    assert "calc/stats.py" in preds["calc__calc-2"] and "calc/texts.py" in preds["calc__calc-2"]
    with open_store(str(tmp_path / "store")) as s:
        assert len(s.list_runs()) == 2  # the cut-off run went on; no instance ran twice
