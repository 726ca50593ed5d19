"""A run records its model endpoint at submit (never the key): a plain `magis-ray resume RUN`
talks to that model again, here a scripted one, even where `--llm auto` would pick another.

In this process: the run, cut off where its script has no answer, its record, the settings resume
settles from it, and the resume. The whole `submit`, SIGKILL and `resume` is under `slow`;
test_resume.py kills a whole `submit` and resumes it in process."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from checks import assert_consistent_log
from teamruns import resume_team, run_team, settings_for
from test_resume import run, start, wait_for_events, wait_for_lease_expiry

from magis_ray.events.schema import LLMExchanged, RunFailed, RunFinished, RunResumed, RunStarted
from magis_ray.store import open_store

KEY = "sk-never-in-the-log-4711"
EXAMPLE = Path(__file__).parents[1] / "examples" / "calc"


def test_a_plain_resume_of_a_scripted_run_settles_on_the_recorded_script_in_process(tmp_path, monkeypatch):
    from magis_ray.cli.config import effective_settings
    from magis_ray.cli.issue_input import prepare_issue
    from magis_ray.cli.resume import recorded_layer
    from magis_ray.cli.settings import flag_layer
    from magis_ray.cli.submit import run_settings

    repo = tmp_path / "calc"
    subprocess.run([sys.executable, str(EXAMPLE / "make_repo.py"), str(repo)], check=True, capture_output=True)
    issue = prepare_issue(str(EXAMPLE / "issue.json"), str(repo), None, None).issue  # as submit reads it
    whole = json.loads((EXAMPLE / "script.json").read_text())
    script = tmp_path / "script.json"
    # the model answers no review: the run stops there, resumably
    script.write_text(json.dumps({**whole, "rules": [r for r in whole["rules"] if not r["purpose"].startswith("review_patch")]}))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    store = tmp_path / "store"
    cut = run_team(issue, settings_for(repo, llm=f"scripted:{script}", timeout=7), store)
    assert isinstance(cut.end, RunFailed) and cut.end.resumable, cut.end
    started = cut.events[0].event
    assert isinstance(started, RunStarted) and started.settings.endpoint.llm == f"scripted:{script}"
    assert started.settings.endpoint.timeout == 7
    assert KEY.encode() not in (store / "events.sqlite3").read_bytes()

    # `magis-ray resume RUN`, no flags: the record under the flags, above the environment, where
    # OPENAI_API_KEY is set and `--llm auto` alone would pick openai
    flags = flag_layer({})
    assert run_settings(effective_settings(flags, repo).settings).endpoint.llm == "openai"
    resumed = run_settings(effective_settings(flags, repo, recorded_layer(started.settings, flags)).settings)
    assert resumed.endpoint.llm == f"scripted:{script}" and resumed.endpoint.timeout == 7
    script.write_text(json.dumps(whole))  # the script answers reviews again
    done = resume_team(store, cut.run_id, resumed)
    events = done.events
    assert_consistent_log(events)
    resumed_at = next(r.version for r in events if isinstance(r.event, RunResumed))
    after = [r.event for r in events if r.version > resumed_at and isinstance(r.event, LLMExchanged)]
    assert after and all(e.model == "scripted" and not e.error for e in after)
    assert isinstance(events[-1].event, RunFinished) and events[-1].event.outcome == "patched"


# Under `slow` for the suite's time: the run, its record and the resume's settings in this process
# (above), a whole `submit` killed with SIGKILL and resumed in test_resume.py.
@pytest.mark.slow
def test_a_plain_resume_of_a_scripted_run_uses_the_scripted_model(tmp_path):
    subprocess.run([sys.executable, str(EXAMPLE / "make_repo.py"), str(tmp_path / "calc")], check=True, capture_output=True)
    script = json.loads((EXAMPLE / "script.json").read_text())
    script["latency_s"] = 0.3  # slow enough to be cut off half-way
    (tmp_path / "script.json").write_text(json.dumps(script))
    driver = start(["submit", str(EXAMPLE / "issue.json"), "--repo", "calc", "--store", "store", "--llm", "scripted:script.json",
                    "--timeout", "7"], tmp_path, start_new_session=True, env_extra={"OPENAI_API_KEY": KEY})
    try:
        run_id = wait_for_events(tmp_path / "store", 10)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    wait_for_lease_expiry(tmp_path / "store", run_id)
    # OPENAI_API_KEY is set: `--llm auto` alone would now pick openai
    code, out, err = run(["resume", run_id, "--store", "store"], tmp_path, env_extra={"OPENAI_API_KEY": KEY})
    assert code == 0, err
    assert "outcome:  patched" in out
    with open_store(str(tmp_path / "store")) as s:
        events = s.read(run_id)
    assert_consistent_log(events)
    started = events[0].event
    assert isinstance(started, RunStarted) and started.settings.endpoint.llm == f"scripted:{tmp_path / 'script.json'}"
    assert started.settings.endpoint.timeout == 7
    assert KEY.encode() not in (tmp_path / "store" / "events.sqlite3").read_bytes()
    resumed_at = next(r.version for r in events if isinstance(r.event, RunResumed))
    after = [r.event for r in events if r.version > resumed_at and isinstance(r.event, LLMExchanged)]
    assert after and all(e.model == "scripted" and not e.error for e in after)
    assert isinstance(events[-1].event, RunFinished)
