"""Hostile answers from the model: retried with a correction, then the step fails with an event
saying why; the run still ends with RunFinished or RunFailed, a consistent log and a diff that
applies. The team runs in-process here (real store, real gateway, real HTTP), Ray elsewhere."""
from __future__ import annotations

import pytest
from checks import assert_consistent_log, assert_diff_applies
from scenarios import MEAN_FIX, calc_issue

from magis_ray.actors.model.gateway import Gateway, GatewayConfig
from magis_ray.events.settings import EndpointSettings
from magis_ray.actors.runtime.inprocess import LocalLLM, run_in_process
from magis_ray.actors.model.scripted_server import Rule, ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.events.projections import fold
from magis_ray.events.schema import (
    FileJudged, LLMExchanged, RunFailed, RunFinished, RunSettings, StepFailed, TaskDefined, TaskFinished,
)
from magis_ray.store import open_store

SETTINGS = RunSettings(tests=False, top_k=3, max_review_rounds=2)


def run_with(rules, calc_repo, tmp_path, timeout_s=5.0):
    """Run the mean() issue with `rules` tried before the scripted team's answers."""
    repo_path, base = calc_repo
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX]})
    store = open_store(str(tmp_path / "store"), create=True)
    with ScriptedServer([*rules, team]) as server:
        config = GatewayConfig(base_url=server.base_url, api_key="k", model="m", endpoint=EndpointSettings(timeout=timeout_s), max_retries=1, backoff_base_s=0.01)
        llm = LocalLLM(Gateway(config))
        end = run_in_process(store=store, issue=calc_issue(repo_path, base), settings=SETTINGS, repo_path=str(repo_path), llm=llm, run_id="r")
        llm.close()
        requests = list(server.requests)
    events = store.read("r")
    assert_consistent_log(events)
    assert_diff_applies(events, repo_path, base, tmp_path / "work")
    return end, events, requests


def of_type(events, kind):
    return [e.event for e in events if isinstance(e.event, kind)]


@pytest.mark.parametrize(
    "rule, why",
    [
        (Rule(purpose="locate_lines", reply="I would change the division."), "not a JSON object"),
        (Rule(purpose="locate_lines", json={"lines": "9"}), "does not match the schema"),
        (Rule(purpose="locate_lines", json={"ranges": [{"start": 40, "end": 55}]}), "outside"),
        (Rule(purpose="write_code", json={"edits": [{"start": 9, "end": 9}]}), "does not match the schema"),
        (Rule(purpose="write_code", json={"edits": [{"start": 0, "end": 99, "new_code": "x"}]}), "range"),
        (Rule(purpose="locate_lines", reply=""), "empty"),
    ],
    ids=["not-json", "wrong-schema", "lines-outside-file", "missing-field", "edit-outside-file", "empty"],
)
def test_a_developer_step_that_never_gets_a_usable_answer_fails_its_task(rule, why, calc_repo, tmp_path):
    end, events, requests = run_with([rule], calc_repo, tmp_path)
    assert isinstance(end, RunFinished) and end.outcome == "no_patch"
    [finished] = of_type(events, TaskFinished)
    assert finished.status == "failed" and why in finished.reason
    assert fold(events).tasks["T1"].final_patch is None
    # an answer that breaks the rules (an empty one too) is sent back with the reason, twice
    corrections = [r for r in requests if r.purpose == rule.purpose]
    assert len(corrections) == 3
    assert "could not be used" in corrections[1].messages[-1].content


def test_a_bad_answer_followed_by_a_good_one_is_corrected(calc_repo, tmp_path):
    bad = Rule(purpose="write_code", reply="```python\nreturn total / len(values)\n```", times=1)
    end, events, requests = run_with([bad], calc_repo, tmp_path)
    assert isinstance(end, RunFinished) and end.outcome == "patched"
    attempts = [x.attempt for x in of_type(events, LLMExchanged) if x.purpose == "write_code"]
    assert attempts == [1, 2]


def test_a_new_file_outside_the_repository_is_refused(calc_repo, tmp_path):
    escape = Rule(purpose="define_task", json={"needed": True, "task": "t", "new_files": [{"path": "../../etc/evil.py", "task": "x"}]})
    end, events, _ = run_with([escape], calc_repo, tmp_path)
    assert isinstance(end, RunFinished) and end.outcome == "no_patch"
    failed = [e for e in of_type(events, StepFailed) if e.purpose == "define_task"]
    assert failed and "not allowed" in failed[0].reason
    assert not (tmp_path / "etc").exists()


def test_an_empty_answer_is_corrected(calc_repo, tmp_path):
    end, events, requests = run_with([Rule(purpose="locate_lines", reply="", times=1)], calc_repo, tmp_path)
    assert isinstance(end, RunFinished) and end.outcome == "patched"
    asked = [r for r in requests if r.purpose == "locate_lines"]
    assert len(asked) == 2 and "the answer was empty" in asked[1].messages[-1].content
    assert [x.attempt for x in of_type(events, LLMExchanged) if x.purpose == "locate_lines"] == [1, 2]


@pytest.mark.parametrize(
    "rule, cause",
    [
        (Rule(purpose="judge_relevance", hang=True), "timeout"),
        (Rule(purpose="locate_lines", status=500, reply="boom"), "http 500"),
        (Rule(purpose="write_code", status=429, reply="slow down", retry_after_s=0), "http 429"),
        (Rule(purpose="review_patch", drop=True), "connection"),
    ],
    ids=["timeout", "http-500", "http-429", "reset"],
)
def test_a_step_the_transport_never_answers_stops_the_run_resumably(rule, cause, calc_repo, tmp_path):
    """Not a content failure: no step is judged on an answer that never came, and the run does not
    finish as if it had; it stops with a resumable RunFailed that names the cause."""
    end, events, _ = run_with([rule], calc_repo, tmp_path, timeout_s=0.3)
    assert isinstance(end, RunFailed) and end.resumable and end.error_type == "ModelUnavailable"
    assert cause in end.reason and rule.purpose in end.reason
    assert not of_type(events, RunFinished) and not of_type(events, StepFailed)
    assert not [j for j in of_type(events, FileJudged) if cause in j.reason]


def test_an_unreachable_model_fails_the_run_resumably(calc_repo, tmp_path):
    repo_path, base = calc_repo
    store = open_store(str(tmp_path / "store"), create=True)
    config = GatewayConfig(base_url="http://127.0.0.1:9/v1", api_key="k", model="m", max_retries=1, backoff_base_s=0.01)
    llm = LocalLLM(Gateway(config))
    end = run_in_process(store=store, issue=calc_issue(repo_path, base), settings=SETTINGS, repo_path=str(repo_path), llm=llm, run_id="r")
    assert isinstance(end, RunFailed) and end.resumable and "no reachable model" in end.reason
    assert_consistent_log(store.read("r"))


@pytest.mark.parametrize(
    "path, why",
    [
        ("calc/" + "n" * 256 + ".py", "longer than 255 bytes"),
        ("calc\\\\helpers.py", "backslash"),
        ("calc/bell\x07.py", "control characters"),
        ("calc/nul\x00.py", "not a usable path"),
    ],
    ids=["name-too-long", "backslash", "control-char", "nul"],
)
def test_a_new_file_path_no_checkout_could_hold_is_sent_back_with_the_reason(path, why, calc_repo, tmp_path):
    bad = Rule(purpose="define_task", json={"needed": True, "task": "Fix mean().", "new_files": [{"path": path, "task": "x"}]})
    end, events, requests = run_with([bad], calc_repo, tmp_path)
    asked = [r for r in requests if r.purpose == "define_task"]
    assert any(why in r.messages[-1].content for r in asked[1:])  # the model was told why
    assert isinstance(end, RunFinished) and not any(path in f for f in end.files_changed)
    assert not [e for e in of_type(events, TaskDefined) if e.path == path]


def test_diff_applies_is_git_apply_check_on_the_base_commit(calc_repo):
    from magis_ray.actors.code.applying import diff_applies
    from magis_ray.actors.code.diffs import file_diff
    from magis_ray.actors.code.edits import apply_edits
    from scenarios import STATS

    repo_path, base = calc_repo
    good = file_diff("calc/stats.py", STATS, apply_edits(STATS, [MEAN_FIX]))
    assert diff_applies(repo_path, base, good) is None
    stale = good.replace("-    return total / (len(values) - 1)", "-    return total / (len(values) - 2)")  # a line the base lacks
    assert stale != good
    assert "patch does not apply" in diff_applies(repo_path, base, stale)
    assert "already exists" in diff_applies(repo_path, base, file_diff("calc/stats.py", None, "x = 1\n"))


def test_a_run_whose_combined_diff_does_not_apply_does_not_end_patched(calc_repo, tmp_path):
    """Each task's diff is checked on its own; the run checks the whole before it claims a patch
    (here the projection is handed a diff that a checkout of the base would refuse)."""
    from magis_ray.actors.code.repository import RepoSnapshot
    from magis_ray.actors.roles.custodian import Custodian
    from magis_ray.actors.runtime.inprocess import ThreadWorkforce
    from magis_ray.actors.runtime.journal import RunWriter
    from magis_ray.actors.runtime.lanes import Lanes
    from magis_ray.actors.runtime.team import Team
    from magis_ray.events.projections import final_diff

    repo_path, base = calc_repo
    store = open_store(str(tmp_path / "store"), create=True)
    with ScriptedServer([ScriptedTeam({"calc/stats.py": [MEAN_FIX]})]) as server:
        llm = LocalLLM(Gateway(GatewayConfig(base_url=server.base_url, api_key="k", model="m")))
        issue, snapshot = calc_issue(repo_path, base), RepoSnapshot.open(repo_path, base)
        lanes = Lanes("r", RunWriter(store, "r"), llm)
        team = Team(issue=issue, settings=SETTINGS, snapshot=snapshot, asker_for=lanes,
                    custodian=Custodian(snapshot, store, lanes, issue.repo, SETTINGS), workforce=ThreadWorkforce(lanes),
                    projected_diff=lambda: final_diff(fold(store.read("r"))).replace("-    return total / (len(values) - 1)", "-    return total / (len(values) - 2)"))
        end = team.run()
        llm.close()
    assert isinstance(end, RunFinished) and end.outcome == "no_patch" and "does not apply" in end.summary
    events = store.read("r")
    assert_consistent_log(events)
    assert final_diff(fold(events)) == ""  # a no_patch run predicts no patch
