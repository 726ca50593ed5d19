"""The paper's ablations as settings (--no-qa, --no-hints, --no-memory) and the per-run token
budget, through the whole team in-process (real store, real gateway, real HTTP)."""
from __future__ import annotations

import msgspec
from checks import assert_consistent_log
from scenarios import MEAN_FIX, calc_issue

from magis_ray.actors.model.gateway import Gateway, GatewayConfig
from magis_ray.actors.runtime.inprocess import LocalLLM, run_in_process
from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.events.projections import fold, metrics
from magis_ray.events.schema import FileSummarized, QAAssigned, ReviewIssued, RunFailed, RunFinished, RunSettings, TaskFinished
from magis_ray.store.memory import InMemoryStore

HINT = "The divisor is in the return statement."


def run(calc_repo, settings, store=None, run_id="r", budget=0):
    repo_path, base = calc_repo
    store = store or InMemoryStore()
    issue = msgspec.structs.replace(calc_issue(repo_path, base), hints_text=HINT)
    with ScriptedServer(ScriptedTeam({"calc/stats.py": [MEAN_FIX]})) as server:
        gateway = Gateway(GatewayConfig(base_url=server.base_url, api_key="k", model="m", backoff_base_s=0.01))
        if budget:
            gateway.set_budget(run_id, budget)
        llm = LocalLLM(gateway)
        end = run_in_process(store=store, issue=issue, settings=settings, repo_path=str(repo_path), llm=llm, run_id=run_id)
        llm.close()
        prompts = [m.content for r in server.requests for m in r.messages]
    events = store.read(run_id)
    assert_consistent_log(events)
    return end, events, prompts, store


def of(events, kind):
    return [r.event for r in events if isinstance(r.event, kind)]


def test_without_qa_the_first_patch_stands_unreviewed(calc_repo):
    end, events, prompts, _ = run(calc_repo, RunSettings(tests=False, top_k=3, use_qa=False))
    assert isinstance(end, RunFinished) and end.outcome == "patched"
    assert not of(events, QAAssigned) and not of(events, ReviewIssued)
    assert [t.status for t in of(events, TaskFinished)] == ["unreviewed"]


def test_hints_reach_the_prompts_unless_ablated(calc_repo):
    _, _, with_hints, _ = run(calc_repo, RunSettings(tests=False, top_k=3))
    _, _, without, _ = run(calc_repo, RunSettings(tests=False, top_k=3, use_hints=False))
    assert any(HINT in p for p in with_hints) and not any(HINT in p for p in without)


def test_without_memory_every_file_is_summarized_afresh(calc_repo):
    store = InMemoryStore()
    run(calc_repo, RunSettings(tests=False, top_k=3), store, "first")
    _, remembered, _, _ = run(calc_repo, RunSettings(tests=False, top_k=3), store, "second")
    _, forgotten, _, _ = run(calc_repo, RunSettings(tests=False, top_k=3, use_memory=False), store, "third")
    assert {s.source for s in of(remembered, FileSummarized)} == {"memory"}
    assert {s.source for s in of(forgotten, FileSummarized)} == {"fresh"}


def test_the_token_budget_holds(calc_repo):
    budget = 2500
    end, events, _, _ = run(calc_repo, RunSettings(tests=False, top_k=3, token_budget=budget), budget=budget)
    assert isinstance(end, RunFailed) and not end.resumable and "budget" in end.reason
    total = metrics(fold(events))["total"]
    assert 0 < total["prompt_tokens"] + total["completion_tokens"] <= budget


def test_summaries_are_reused_only_by_runs_of_the_model_that_wrote_them(calc_repo, tmp_path):
    from magis_ray.store import open_store

    store = open_store(str(tmp_path / "store"), create=True)
    run(calc_repo, RunSettings(tests=False, top_k=3, model="tiny-135m"), store, "tiny")
    _, other, _, _ = run(calc_repo, RunSettings(tests=False, top_k=3, model="big-70b"), store, "big")
    _, same, _, _ = run(calc_repo, RunSettings(tests=False, top_k=3, model="tiny-135m"), store, "tiny-again")
    _, told, _, _ = run(calc_repo, RunSettings(tests=False, top_k=3, model="new-model", memory_any_model=True), store, "any")
    assert {s.source for s in of(other, FileSummarized)} == {"fresh"}  # never the other model's summaries
    assert {s.source for s in of(same, FileSummarized)} == {"memory"}
    assert {s.source for s in of(told, FileSummarized)} == {"memory"}
    # Files are summarized in parallel, so the log's order of FileSummarized events varies.
    stats_blob = next(s.blob_id for s in of(same, FileSummarized) if s.path == "calc/stats.py")
    assert {store.get_summary("calc/calc", "calc/stats.py", stats_blob, model=m).model
            for m in ("tiny-135m", "big-70b")} == {"tiny-135m", "big-70b"}


def test_an_older_store_s_summaries_are_attributed_to_the_model_of_the_run_that_wrote_them(calc_repo, tmp_path):
    import sqlite3

    from magis_ray.store import open_store

    store = open_store(str(tmp_path / "store"), create=True)
    run(calc_repo, RunSettings(tests=False, top_k=3, model="tiny-135m"), store, "tiny")
    store.close()
    db = sqlite3.connect(tmp_path / "store" / "events.sqlite3")  # back to a store of the format before models
    db.executescript(
        "CREATE TABLE old AS SELECT repo, path, blob_id, summary, position FROM summaries; DROP TABLE summaries;"
        "CREATE TABLE summaries (repo TEXT NOT NULL, path TEXT NOT NULL, blob_id TEXT NOT NULL, summary TEXT NOT NULL,"
        " position INTEGER NOT NULL, PRIMARY KEY (repo, path, blob_id)); INSERT INTO summaries SELECT * FROM old; DROP TABLE old;"
        "CREATE INDEX summaries_by_file ON summaries (repo, path, position); DROP TABLE lease_holders;"
        "PRAGMA user_version = 0;"  # a store of that time: its summaries' index, no lease holders yet, no format number
    )
    db.close()
    store = open_store(str(tmp_path / "store"))
    _, same, _, _ = run(calc_repo, RunSettings(tests=False, top_k=3, model="tiny-135m"), store, "tiny-again")
    assert {s.source for s in of(same, FileSummarized)} == {"memory"}
    store.close()
