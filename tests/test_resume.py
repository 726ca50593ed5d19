"""Every decision can be re-lived and no work is paid twice: the driver killed with SIGKILL at
several points and resumed, Ctrl-C, a role actor killed mid-task, replay and its divergences.

A run killed with SIGKILL is a whole `submit` process, its resume a `resume` command in this
process on the module's Ray (Ctrl-C's, under `slow`, a whole `resume`); a finished run refused
and replay are tested on a run of the team in this process (tests/teamruns.py)."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from checks import assert_consistent_log
from commands import in_process, magis, started
from conftest import interruptible
from processes import cmdline_of, in_session, tree_of
from scenarios import BOTH_DIFF, BOTH_ISSUE, MEAN_FIX, SHOUT_FIX, STATS, calc_issue, write_issue
from teamruns import run_team, settings_for
from waiting import COMMAND_S, GENEROUS_S, wait_until

from magis_ray.actors.code.diffs import file_diff
from magis_ray.actors.code.edits import apply_edits
from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.events.projections import final_diff, fold
from magis_ray.events.schema import LLMExchanged, RunFailed, RunFinished, RunResumed, TaskFinished
from magis_ray.store import open_store

EXPECTED_DIFF = BOTH_DIFF


def team(delay_s=0.25):
    return ScriptedTeam({"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]}, delay_s=delay_s)


LEASE_S = "2"  # a stalled driver's lease runs out this soon (the default is 30 s)


def start(args, cwd, env_extra=None, **popen):
    return started(*args, cwd=cwd, env={"OPENAI_API_KEY": "k", "MAGIS_LEASE_S": LEASE_S, **(env_extra or {})}, **popen)


def run(args, cwd, timeout=COMMAND_S, env_extra=None):
    proc = start(args, cwd, env_extra)
    out, err = proc.communicate(timeout=timeout)
    assert "Traceback" not in out + err, err
    return proc.returncode, out, err


def wait_for_events(store_path: Path, at_least: int, timeout=GENEROUS_S) -> str:
    """The run id once the store's only run holds `at_least` events."""
    def run_long_enough() -> str | None:
        if (store_path / "events.sqlite3").exists():
            with open_store(str(store_path)) as store:
                runs = store.list_runs()
                if runs and runs[0].version >= at_least:
                    return runs[0].run_id
        return None

    # asked every 0.05 s throughout: a kill at this count should land within an answer of it
    return wait_until(run_long_enough, f"the run reaches {at_least} events", timeout_s=timeout, poll_s=0.05)


def wait_for_lease_expiry(store_path: Path, run_id: str, timeout=GENEROUS_S) -> None:
    """A stopped (or far away) driver renews its lease no more; wait until the store says it has run out."""
    def expired() -> bool:
        with open_store(str(store_path)) as store:
            [lease] = store.leases(run_id)
        return not lease.live(time.time())

    wait_until(expired, "the dead driver's lease expires", timeout_s=timeout, poll_s=0.1)


def requests_of(server, since=0):
    return [(r.purpose, r.task, tuple(r.messages)) for r in server.requests[since:]]


def exchanges_in(events):
    return [(r.event.purpose, r.event.task_id, tuple(r.event.messages)) for r in events if isinstance(r.event, LLMExchanged)]


@pytest.fixture
def issue_file(calc_repo, tmp_path):
    repo_path, base = calc_repo
    return write_issue(tmp_path / "issue.json", calc_issue(repo_path, base, BOTH_ISSUE))


# The developers' phase in the default run: it is the one with the most in flight at the kill. The
# two earlier phases are slow-marked for the suite's time.
@pytest.mark.parametrize("kill_at", [pytest.param(6, id="custodian", marks=pytest.mark.slow),
                                     pytest.param(20, id="meeting", marks=pytest.mark.slow),
                                     pytest.param(31, id="developers")])
@pytest.mark.usefixtures("ray_session")
def test_sigkill_then_resume_at_once_pays_nothing_twice(kill_at, issue_file, tmp_path, capsys, monkeypatch):
    """Resumed the moment the driver is dead, on the same host: its lease (ten minutes long) is no
    obstacle, and what the dead driver's actors still write before Ray ends them is either in the
    log the resume reads or fenced out after it. The killed `submit` is a process of its own with
    its own Ray; `resume` runs in this process, on the module's Ray."""
    store = tmp_path / "store"
    answers = team()
    with ScriptedServer(answers) as server:
        driver = start(["submit", str(issue_file), "--store", str(store), "--base-url", server.base_url, "--model", "m"],
                       tmp_path, env_extra={"MAGIS_LEASE_S": "600"}, start_new_session=True)
        run_id = wait_for_events(store, kill_at)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        answers.delay_s = 0  # the delays kept the kill mid-phase; the resume needs none
        with open_store(str(store)) as s:
            [lease] = s.leases(run_id)
        assert lease.live(time.time()) and lease.pid == driver.pid  # the dead driver's lease has not run out
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        monkeypatch.chdir(tmp_path)
        resumed = in_process(capsys, "resume", run_id[:6], "--store", store, "--base-url", server.base_url)
        assert resumed.code == 0, resumed.err
        err = resumed.err
        assert err.startswith(f"resuming run {run_id} from event ") and "running" not in err and "lease" not in err
        sent = requests_of(server)
    # the killed driver's Ray (process groups of their own in its session, so the kill missed them) noticed and ended
    wait_until(lambda: not in_session(driver.pid), lambda: f"the killed driver's Ray ends: {in_session(driver.pid)} left")
    with open_store(str(store)) as s:
        events = s.read(run_id)
        [lease] = s.leases(run_id)
    assert lease.epoch == 2 and not lease.live(time.time())  # taken over, then released at the end
    assert_consistent_log(events)
    [marker] = [r for r in events if isinstance(r.event, RunResumed)]
    assert marker.event.superseded == 0  # a killed run goes on from its last event
    assert isinstance(events[-1].event, RunFinished) and final_diff(fold(events)) == EXPECTED_DIFF
    # every answer recorded before the resume was paid for once: reused, never asked again
    recorded_before = exchanges_in(r for r in events if r.version < marker.version)
    assert recorded_before and all(sent.count(key) == 1 for key in recorded_before)
    # nothing written twice: each lane's events after the resume continue it, none repeats
    ids = [r.event_id for r in events]
    assert len(ids) == len(set(ids))
    assert len(exchanges_in(events)) == len(set(exchanges_in(events)))


# Under `slow` for the suite's time: the same stop as test_start_stop.py's SIGTERM mid-run (a whole
# run, its log ended Interrupted and resumed), SIGINT's own exit status in
# test_start_stop.py::test_a_signal_after_the_outcome_is_decided_exits_with_it[sigint-before].
@pytest.mark.slow
def test_ctrl_c_ends_the_log_cleanly_and_resume_finishes(issue_file, tmp_path):
    store = tmp_path / "store"
    with ScriptedServer(team()) as server:
        driver = start(["submit", str(issue_file), "--store", str(store), "--base-url", server.base_url, "--model", "m"],
                       tmp_path, preexec_fn=interruptible)
        run_id = wait_for_events(store, 15)
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=60)
        assert driver.returncode == 130 and "Traceback" not in err, err
        assert f"magis-ray resume {run_id}" in err
        with open_store(str(store)) as s:
            cut = s.read(run_id)
        assert isinstance(cut[-1].event, RunFailed) and cut[-1].event.error_type == "Interrupted"
        assert_consistent_log(cut)
        code, out, err = run(["resume", run_id, "--store", str(store), "--base-url", server.base_url], tmp_path)
        assert code == 0, err
    with open_store(str(store)) as s:
        events = s.read(run_id)
    assert_consistent_log(events)
    assert final_diff(fold(events)) == EXPECTED_DIFF


def finished_run(calc_repo, tmp_path, server):
    """A finished run of BOTH_ISSUE in the store at tmp_path/store, by the team in this process."""
    repo_path, base = calc_repo
    store = tmp_path / "store"
    run = run_team(calc_issue(repo_path, base, BOTH_ISSUE), settings_for(repo_path, base_url=server.base_url, model="m"), store)
    assert run.end.outcome == "patched" and final_diff(fold(run.events)) == EXPECTED_DIFF
    return store, run.run_id


def test_resume_refuses_a_finished_run(calc_repo, tmp_path, capsys):
    with ScriptedServer(team(delay_s=0)) as server:
        store, run_id = finished_run(calc_repo, tmp_path, server)
        done = in_process(capsys, "resume", run_id, "--store", store, "--base-url", server.base_url)
    assert done.code == 2 and "already finished" in done.err and len(done.err.strip().splitlines()) == 1


def test_replay_finds_no_divergence_and_a_changed_prompt_is_reported(calc_repo, tmp_path, capsys):
    with ScriptedServer(team(delay_s=0)) as server:
        store, run_id = finished_run(calc_repo, tmp_path, server)
        sent = len(server.requests)
        done = in_process(capsys, "replay", run_id, "--store", store)
        assert done.code == 0 and "no divergence" in done.out, done.out + done.err
        assert len(server.requests) == sent  # replay never asks the model
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    original = (Path(__file__).parents[1] / "actors" / "model" / "prompts" / "review_patch.txt").read_text()
    (prompts / "review_patch.txt").write_text(original.replace("Review the change:", "Review this change:"))
    # a process of its own: the templates are read once a process
    proc = magis("replay", run_id, "--store", store, cwd=tmp_path, env={"MAGIS_PROMPTS_DIR": str(prompts)})
    assert proc.returncode == 1, proc.stderr
    assert "divergence in lane qa:" in proc.stdout and "review_patch" in proc.stdout
    assert "Review this change" in proc.stdout.split("first difference:")[1]


def developer_actor_pids() -> list[int]:
    """The DeveloperService actors' processes of this test process's own Ray (ray_session starts it
    below this process): found in this process's tree, never among another Ray's on the machine."""
    return [pid for pid in tree_of(os.getpid()) if "DeveloperService" in cmdline_of(pid)]


@pytest.mark.usefixtures("ray_session")
def test_a_developer_actor_killed_mid_task_is_recreated_from_the_log(calc_repo, tmp_path):
    from magis_ray.actors.runtime.deployment import run_issue
    from magis_ray.actors.model.gateway import GatewayConfig
    from magis_ray.events.schema import RunSettings

    repo_path, base = calc_repo
    # locate_lines takes a while: the kill lands while the Developer waits on it
    scripted = ScriptedTeam({"calc/stats.py": [MEAN_FIX]}, delay_s=0.6, slow=("locate_lines",))
    store = tmp_path / "store"
    result = {}
    with ScriptedServer(scripted) as server:
        worker = threading.Thread(target=lambda: result.setdefault("end", run_issue(
            store_path=str(store), issue=calc_issue(repo_path, base), settings=RunSettings(tests=False, top_k=3), repo_path=str(repo_path),
            gateway_config=GatewayConfig(base_url=server.base_url, api_key="k", model="m"), run_id="victim",
        )))
        worker.start()
        try:
            # design_qa is recorded by then
            # at once: the kill must land while the answer is held back (0.6 s)
            wait_until(lambda: any(r.purpose == "locate_lines" for r in server.requests), "a Developer asks locate_lines",
                       while_running=worker, poll_s=0.02)
            [pid] = developer_actor_pids()
            os.kill(pid, signal.SIGKILL)
            scripted.delay_s = 0  # the question asked again needs no delay
        finally:
            # never leave the run going past the test: the module's Ray ends under it after the last test
            worker.join(timeout=300)
        assert not worker.is_alive(), "the run did not end"
        assert server.count("design_qa") == 1  # recorded before the kill: reused, not asked again
        assert server.count("locate_lines") == 2  # in flight at the kill: asked again
    assert isinstance(result["end"], RunFinished) and result["end"].outcome == "patched"
    with open_store(str(store)) as s:
        events = s.read("victim")
    assert_consistent_log(events)
    [finished] = [r.event for r in events if isinstance(r.event, TaskFinished)]
    assert finished.status == "approved"
    assert final_diff(fold(events)) == file_diff("calc/stats.py", STATS, apply_edits(STATS, [MEAN_FIX]))
