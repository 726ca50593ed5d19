"""One live driver per run: a resume of a live run is refused in one line; after SIGKILL of the
driver and its lease's expiry it works; a driver that lost its run ends with one line; two batches
of the same name on one store run every instance once."""
from __future__ import annotations

import json
import os
import signal

import pytest
from checks import assert_consistent_log
from test_batch import batch_args, dataset, team as batch_team  # noqa: F401 - the dataset fixture
from test_resume import EXPECTED_DIFF, issue_file, run, start, team, wait_for_events, wait_for_lease_expiry  # noqa: F401

from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.events.projections import final_diff, fold
from magis_ray.events.schema import RunFinished, RunStarted
from magis_ray.store import open_store


def submit(issue_file, store, server, tmp_path, lease_s: str):
    return start(["submit", str(issue_file), "--store", str(store), "--base-url", server.base_url, "--model", "m"],
                 tmp_path, start_new_session=True, env_extra={"MAGIS_LEASE_S": lease_s})


def test_a_live_run_is_refused_then_resumes_after_sigkill_and_the_lease_running_out(issue_file, tmp_path):
    store = tmp_path / "store"
    with ScriptedServer(team()) as server:
        driver = submit(issue_file, store, server, tmp_path, lease_s="8")  # renewed every 2.7 s: live under load
        try:
            run_id = wait_for_events(store, 6)
            code, out, err = run(["resume", run_id, "--store", str(store), "--base-url", server.base_url], tmp_path)
            assert code == 2 and out == "", err
            [line] = err.strip().splitlines()
            assert line.startswith(f"magis-ray: error: run {run_id} is still running on ") and f"pid {driver.pid}," in line
            assert line.endswith("s ago")
        finally:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=30)
        wait_for_lease_expiry(store, run_id, timeout=60)
        code, out, err = run(["resume", run_id, "--store", str(store), "--base-url", server.base_url], tmp_path)
        assert code == 0, err
    with open_store(str(store)) as s:
        events = s.read(run_id)
    assert_consistent_log(events)
    assert isinstance(events[-1].event, RunFinished) and final_diff(fold(events)) == EXPECTED_DIFF


def test_a_driver_that_lost_its_run_ends_with_one_line(issue_file, tmp_path):
    """Stopped (SIGSTOP) past its lease, the run is resumed elsewhere; woken, the first driver is
    fenced out: its actors' writes are refused and it ends with one line, no traceback."""
    store = tmp_path / "store"
    with ScriptedServer(team(delay_s=0.3)) as server:
        driver = submit(issue_file, store, server, tmp_path, lease_s="2")
        run_id = wait_for_events(store, 6)
        os.killpg(driver.pid, signal.SIGSTOP)  # the driver, its Ray and its actors
        try:
            wait_for_lease_expiry(store, run_id)
            code, out, err = run(["resume", run_id, "--store", str(store), "--base-url", server.base_url], tmp_path)
            assert code == 0, err
        finally:
            os.killpg(driver.pid, signal.SIGCONT)
        out, err = driver.communicate(timeout=120)
    assert driver.returncode == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == f"magis-ray: error: run {run_id} was taken over by another driver; this one stops"
    with open_store(str(store)) as s:
        events = s.read(run_id)
    assert_consistent_log(events)
    assert final_diff(fold(events)) == EXPECTED_DIFF


def test_two_batches_of_one_name_started_together_predict_every_instance_once(dataset, tmp_path):
    path, repos = dataset
    with ScriptedServer(batch_team(delay_s=0.05)) as server:
        first, second = (start(batch_args(path, repos, server, "--out", out, "--batch", "lite"), tmp_path, env_extra={"MAGIS_LEASE_S": "4"})
                         for out in ("a.jsonl", "b.jsonl"))
        outs = [p.communicate(timeout=300) for p in (first, second)]
    for proc, (out, err) in zip((first, second), outs):
        assert proc.returncode == 0 and "Traceback" not in err, err
    with open_store(str(tmp_path / "store")) as s:
        started = [s.read(r.run_id)[0].event for r in s.list_runs()]
    instances = [e.instance_id for e in started if isinstance(e, RunStarted)]
    assert sorted(instances) == ["calc__calc-1", "calc__calc-2"]  # each ran once, by one of the two
    a, b = ([json.loads(line) for line in (tmp_path / name).read_text().splitlines()] for name in ("a.jsonl", "b.jsonl"))
    assert a == b and len(a) == 5 and len({p["instance_id"] for p in a}) == 5
    assert all(p["model_patch"] for p in a if p["instance_id"] in ("calc__calc-1", "calc__calc-2"))


def test_a_run_cut_off_before_its_first_event_is_said_to_have_never_started(tmp_path):
    """submit takes the run's lease before it prints the id; killed before RunStarted, the id is
    known to the store only by its lease."""
    import time as clock

    with open_store(str(tmp_path / "store"), create=True) as s:
        s.take_lease("0123456789ab", "a-driver", "host", 4242, ttl_s=0.01, now=clock.time() - 60)
    code, out, err = run(["resume", "0123456789ab", "--store", "store"], tmp_path)
    assert code == 2 and err == (
        "magis-ray: error: run 0123456789ab never started (it was stopped before its first event); submit the issue again\n"
    )
    code, out, err = run(["resume", "fedcba987654", "--store", "store"], tmp_path)
    assert code == 2 and err == "magis-ray: error: unknown run: fedcba987654\n"


def test_a_heartbeat_keeps_a_lease_and_a_stalled_driver_learns_it_lost_it(tmp_path):
    import time as clock

    from magis_ray.actors.runtime.liveness import Liveness, RunIsLive

    store = str(tmp_path / "store")
    first, second = Liveness(store, ttl_s=2.0), Liveness(store, ttl_s=2.0)
    try:
        epoch = first.take("r1")
        deadline = clock.monotonic() + 60
        held_since = clock.time()
        while clock.time() - held_since < 3 * first.ttl_s:  # thrice its length: only the heartbeat keeps it
            with pytest.raises(RunIsLive, match=r"run r1 is still running on .*, pid \d+, last seen \d+s ago"):
                second.take("r1")
            clock.sleep(0.2)
        first._stop.set()  # the first driver stalls: no more heartbeats
        first._thread.join()
        while True:
            try:
                assert second.take("r1") == epoch + 1
                break
            except RunIsLive:
                assert clock.monotonic() < deadline
                clock.sleep(0.1)
        first._stop.clear()
        first._thread = __import__("threading").Thread(target=first._beat, daemon=True)
        first._thread.start()  # it wakes up
        while not first.lost("r1"):
            assert clock.monotonic() < deadline
            clock.sleep(0.05)
    finally:
        first.close()
        second.close()
