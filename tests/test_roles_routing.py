"""A model per role at the gateway: each request goes to its role's model (and endpoint), the
budgets count every route together; and a scripted model without an answer for a step stops the
run naming that step, resumably, never as an unreachable model."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from checks import assert_consistent_log
from scenarios import MEAN_FIX, calc_issue

from magis_ray.actors.model.gateway import BudgetExceeded, Gateway, GatewayConfig
from magis_ray.actors.model.scripted_server import Rule, Script, ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.actors.runtime.continuation import resume_point
from magis_ray.actors.runtime.inprocess import LocalLLM, run_in_process
from magis_ray.events.schema import LLMExchanged, Message, RoleModel, RunFailed, RunSettings
from magis_ray.events.settings import EndpointSettings
from magis_ray.store import open_store

EXAMPLE = Path(__file__).parents[1] / "examples" / "calc"


def ask(gateway: Gateway, role: str, run_id: str = "run-1", **kwargs) -> LLMExchanged:
    return asyncio.run(gateway.exchange(run_id=run_id, purpose="review_patch", messages=[Message("user", "x" * 400)],
                                        role=role, **kwargs))


def test_each_role_reaches_its_own_model_and_the_budget_counts_them_all():
    with ScriptedServer([Rule(reply="main")]) as main, ScriptedServer([Rule(reply="own")]) as own:
        routes = (RoleModel("developer", "gpt-4o", own.base_url), RoleModel("custodian", "gpt-4o-mini"))
        gateway = Gateway(GatewayConfig(base_url=main.base_url, model="m", endpoint=EndpointSettings(models=routes), max_tokens=50, min_answer_tokens=10))
        answers = {role: ask(gateway, role) for role in ("developer", "custodian", "manager", "qa", "selection")}
        assert [(r.body["model"], r.headers["x-magis-purpose"]) for r in own.requests] == [("gpt-4o", "review_patch")]
        assert [r.body["model"] for r in main.requests] == ["gpt-4o-mini", "m", "m", "m"]
        # one budget over every route: what the five requests spent counts, whichever route served
        # them, and a budget just above it leaves no room for a sixth, whichever role asks
        spent = sum(a.prompt_tokens + a.completion_tokens for a in answers.values())
        assert gateway.usage_of("run-1") == spent > 500
        gateway.set_budget("run-1", spent + 50)
        with pytest.raises(BudgetExceeded):
            ask(gateway, "developer")
        assert len(own.requests) == 1
    assert {role: (a.model, a.answer) for role, a in answers.items()} == {
        "developer": ("gpt-4o", "own"), "custodian": ("gpt-4o-mini", "main"), "manager": ("m", "main"), "qa": ("m", "main"),
        "selection": ("m", "main")}
    developer = answers["developer"]
    assert developer.cost_usd == pytest.approx((developer.prompt_tokens * 2.5 + developer.completion_tokens * 10.0) / 1e6)  # gpt-4o's price
    assert answers["custodian"].cost_usd > 0 and answers["manager"].cost_usd == 0  # "m" has no price


def test_the_qa_engineer_s_model_breaks_candidates_ties():
    with ScriptedServer([Rule(reply="main")]) as main, ScriptedServer([Rule(reply="qa")]) as qa:
        gateway = Gateway(GatewayConfig(base_url=main.base_url, model="m", endpoint=EndpointSettings(models=(RoleModel("qa", "judge", qa.base_url),))))
        assert ask(gateway, "selection").answer == "qa" and ask(gateway, "qa").model == "judge"


def test_a_step_the_script_has_no_answer_for_stops_the_run_naming_it(calc_repo, tmp_path):
    repo_path, base = calc_repo
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX]})
    store = open_store(str(tmp_path / "store"), create=True)
    # the scripted team answers every step but writing the code
    with ScriptedServer(Script([lambda request: None if request.purpose == "write_code" else team(request)])) as server:
        llm = LocalLLM(Gateway(GatewayConfig(base_url=server.base_url, api_key="k", model="m", max_retries=4)))
        end = run_in_process(store=store, issue=calc_issue(repo_path, base), settings=RunSettings(tests=False, top_k=3), repo_path=str(repo_path),
                             llm=llm, run_id="r")
        llm.close()
        asked = server.count("write_code")
    events = store.read("r")
    assert_consistent_log(events)
    assert isinstance(end, RunFailed) and end.resumable
    assert end.reason.startswith("the script has no answer for write_code: add a rule for purpose 'write_code'")
    assert "no reachable model" not in end.reason and asked == 1  # named at once, never retried
    # a resume asks that step again (once the script has a rule for it)
    [gap] = [r for r in events if isinstance(r.event, LLMExchanged) and r.event.error]
    assert gap.event.error.startswith("script: ") and resume_point(events).kept_version == gap.version - 1


def test_the_example_script_answers_every_step_of_a_run_with_tests():
    """Each purpose the team asks with tests on has a rule in the example's script (getting started's
    scripted command, run whole in test_own_repository)."""
    rules = Script.load(EXAMPLE / "script.json").rules
    purposes = {rule.purpose for rule in rules}
    asked = {"summarize_file", "judge_relevance", "define_task", "design_developer", "meeting_open", "meeting_speak",
             "meeting_close", "make_plan", "design_qa", "locate_lines", "write_code", "write_reproduction", "review_patch_tested"}
    assert asked <= purposes
