"""One live driver per run: a resume of a live run is refused in one line; after SIGKILL of the
driver it works at once on the same host (the driver's pid is gone), while a lease held from
another host is waited for until it runs out; a driver that lost its run ends with one line. (Two
batches of the same name on one store, started together, are test_batch.py's.)

A resume refused is tested in this process, on a stored run cut off before its end: the refusal
comes before any Ray. The resume at once after SIGKILL is test_resume.py's, after a whole run killed."""
from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
from checks import assert_consistent_log
from commands import in_process
from runs import constructed_run, fixed_new_events, repo_for
from teamruns import resume_team
from test_resume import EXPECTED_DIFF, issue_file, run, start, team, wait_for_events, wait_for_lease_expiry  # noqa: F401
from waiting import wait_until

from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.events.projections import final_diff, fold
from magis_ray.actors.runtime.liveness import Liveness
from magis_ray.events.schema import LLMExchanged, RunFinished
from magis_ray.store import open_store


def submit(issue_file, store, server, tmp_path, lease_s: str):
    return start(["submit", str(issue_file), "--store", str(store), "--base-url", server.base_url, "--model", "m"],
                 tmp_path, start_new_session=True, env_extra={"MAGIS_LEASE_S": lease_s})


def cut_off_run(tmp_path: Path) -> tuple[Path, str]:
    """A store holding one run cut off before its end (the calc repository's, constructed)."""
    repo_path, base = repo_for(tmp_path)
    store, run_id = tmp_path / "store", "c0ffee000001"
    with open_store(str(store), create=True) as s:
        s.append(run_id, 0, fixed_new_events([pair for pair in constructed_run(repo_path, base)
                                              if not isinstance(pair[1], RunFinished)]))
    return store, run_id


def test_a_live_run_is_refused_in_one_line_naming_its_driver(tmp_path, capsys):
    """The run's driver (this process, alive, on this host) holds its lease: resume says where it
    runs and when it was last seen, writes nothing and starts nothing. Once the holder's pid is gone
    the lease is no obstacle (test_a_dead_holder_on_this_host_loses_its_lease_at_once_and_one_elsewhere_keeps_it),
    and a resume then finishes the run (test_resume.py's SIGKILL, a ten-minute lease)."""
    store, run_id = cut_off_run(tmp_path)
    with open_store(str(store)) as s:
        before = len(s.read(run_id))
    with Liveness(str(store)) as driver:
        driver.take(run_id)
        done = in_process(capsys, "resume", run_id, "--store", store, "--base-url", "http://127.0.0.1:9/v1")
    assert done.code == 2 and done.out == "", done.err
    [line] = done.err.strip().splitlines()
    assert line.startswith(f"magis-ray: error: run {run_id} is still running on ") and f"pid {os.getpid()}," in line
    assert line.endswith("s ago")
    with open_store(str(store)) as s:
        assert len(s.read(run_id)) == before


def test_a_lease_held_from_another_host_is_refused_until_it_runs_out_in_process(tmp_path, capsys):
    """This host cannot see a driver on another: its lease is waited for, and the refusal never
    says that driver is running. Once it has run out, the run's lease is this host's to take; the
    resume that then finishes a run is test_resume.py's."""
    store, run_id = cut_off_run(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid of this host that is no driver: it says nothing of a process on another host
    with open_store(str(store)) as s:
        theirs = s.take_lease(run_id, "driver-elsewhere", "elsewhere", gone.pid, ttl_s=600, now=time.time(),
                              pid_space="another-boot/pid:[4026531836]")
    assert theirs.owner == "driver-elsewhere"
    done = in_process(capsys, "resume", run_id, "--store", store, "--base-url", "http://127.0.0.1:9/v1")
    assert done.code == 2 and done.out == "", done.err
    [line] = done.err.strip().splitlines()
    assert line.startswith(f"magis-ray: error: run {run_id} is held by a driver on elsewhere, pid {gone.pid}, last seen ")
    assert "if that driver is gone, its lease runs out in " in line and "running" not in line
    with open_store(str(store)) as s:  # its last heartbeat: it renews no more, and its lease runs out
        assert s.renew_leases("driver-elsewhere", ttl_s=2, now=time.time()) == [run_id]
    wait_for_lease_expiry(store, run_id, timeout=60)
    with Liveness(str(store)) as here:
        assert here.take(run_id) == theirs.epoch + 1


# Under `slow` for the suite's time: test_a_live_run_is_refused_in_one_line_naming_its_driver in this
# process, and test_resume.py's (a whole run killed with SIGKILL, then resumed at once despite a ten-minute lease).
@pytest.mark.slow
def test_a_live_run_is_refused_then_resumes_at_once_after_sigkill(issue_file, tmp_path):
    """The driver's lease would last ten minutes: only knowing that its holder is dead (its pid is
    gone, on this host) lets the resume through at once."""
    store = tmp_path / "store"
    with ScriptedServer(team()) as server:
        driver = submit(issue_file, store, server, tmp_path, lease_s="600")
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
        with open_store(str(store)) as s:
            [lease] = s.leases(run_id)
        assert lease.live(time.time()) and lease.pid == driver.pid  # the dead driver's lease has not run out
        code, out, err = run(["resume", run_id, "--store", str(store), "--base-url", server.base_url], tmp_path)
        assert code == 0, err
        assert err.startswith(f"resuming run {run_id} from event ") and "running" not in err and "lease" not in err
    with open_store(str(store)) as s:
        events = s.read(run_id)
        [lease] = s.leases(run_id)
    assert lease.epoch == 2 and not lease.live(time.time())  # taken over, then released at the end
    assert_consistent_log(events)
    assert isinstance(events[-1].event, RunFinished) and final_diff(fold(events)) == EXPECTED_DIFF
    exchanges = [(r.event.purpose, r.event.task_id, tuple(r.event.messages)) for r in events if isinstance(r.event, LLMExchanged)]
    assert len(exchanges) == len(set(exchanges))


# Under `slow` for the suite's time: the same refusal and expiry in this process
# (test_a_lease_held_from_another_host_is_refused_until_it_runs_out_in_process), a resume that
# finishes a run in test_resume.py.
@pytest.mark.slow
def test_a_lease_held_from_another_host_is_refused_until_it_runs_out(issue_file, tmp_path):
    """This host cannot see a driver on another: its lease is waited for, and the refusal never
    says that driver is running."""
    store = tmp_path / "store"
    with ScriptedServer(team()) as server:
        driver = submit(issue_file, store, server, tmp_path, lease_s="600")
        run_id = wait_for_events(store, 6)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        with open_store(str(store)) as s:
            [ours] = s.leases(run_id)
            # a driver elsewhere takes the run over (as if it had resumed it there); the pid is
            # gone here, which says nothing about a process on another host
            theirs = s.take_lease(run_id, "driver-elsewhere", "elsewhere", driver.pid, ttl_s=600, now=time.time(),
                                  started=ours.started, pid_space="another-boot/pid:[4026531836]", replacing=ours.owner)
        assert theirs.owner == "driver-elsewhere"
        code, out, err = run(["resume", run_id, "--store", str(store), "--base-url", server.base_url], tmp_path)
        assert code == 2 and out == "", err
        [line] = err.strip().splitlines()
        assert line.startswith(f"magis-ray: error: run {run_id} is held by a driver on elsewhere, pid {driver.pid}, last seen ")
        assert "if that driver is gone, its lease runs out in " in line and "running" not in line
        with open_store(str(store)) as s:  # its last heartbeat: it renews no more, and its lease runs out
            assert s.renew_leases("driver-elsewhere", ttl_s=2, now=time.time()) == [run_id]
        wait_for_lease_expiry(store, run_id, timeout=60)
        code, out, err = run(["resume", run_id, "--store", str(store), "--base-url", server.base_url], tmp_path)
        assert code == 0, err
    with open_store(str(store)) as s:
        events = s.read(run_id)
    assert_consistent_log(events)
    assert isinstance(events[-1].event, RunFinished) and final_diff(fold(events)) == EXPECTED_DIFF


def test_a_driver_that_lost_its_run_ends_with_one_line(issue_file, tmp_path):
    """Stopped (SIGSTOP) past its lease, the run is taken over and finished in this process: its
    lease taken as `resume` takes it, the team resumed from the log (its writes unfenced, as this
    process alone writes them). Woken, the first driver is fenced out: its actors' writes are
    refused and it ends with one line, no traceback.
    The first driver has a Ray of its own, stopped with it. A whole `resume` command after a driver
    stopped is test_start_stop.py's SIGTERM mid-run."""
    store = tmp_path / "store"
    script = team(delay_s=0.3)  # slow answers: the stop finds the first driver's run under way
    with ScriptedServer(script) as server:
        driver = submit(issue_file, store, server, tmp_path, lease_s="2")
        run_id = wait_for_events(store, 6)
        os.killpg(driver.pid, signal.SIGSTOP)  # the driver, its Ray and its actors
        try:
            wait_for_lease_expiry(store, run_id)
            script.delay_s = 0.0  # the resume has no stop to wait for
            with Liveness(str(store)) as here:
                here.take(run_id)
                resumed = resume_team(store, run_id)
            assert isinstance(resumed.end, RunFinished), resumed.end
        finally:
            os.killpg(driver.pid, signal.SIGCONT)
        out, err = driver.communicate(timeout=120)
    assert driver.returncode == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == f"magis-ray: error: run {run_id} was taken over by another driver; this one stops"
    with open_store(str(store)) as s:
        events = s.read(run_id)
    assert_consistent_log(events)
    assert final_diff(fold(events)) == EXPECTED_DIFF


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


# A driver that holds run r1's lease with a two-second heartbeat, says its epoch, and ends once it
# learns it lost the lease.
HOLDING_DRIVER = """
import sys, time
from magis_ray.actors.runtime.liveness import Liveness

with Liveness(sys.argv[1], ttl_s=2.0) as driver:
    print(driver.take("r1"), flush=True)
    while not driver.lost("r1"):
        time.sleep(0.05)
    print("lost r1", flush=True)
"""


def all_threads_stopped(pid: int) -> bool:
    """Every thread of `pid` is stopped (state T): a SIGSTOP reaches each thread on its own."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            return False
    return bool(states) and all(state == "T" for state in states)


def pause_outside_a_write(process: subprocess.Popen, db: Path) -> None:
    """SIGSTOP `process` at a moment it holds no write transaction on the store: paused inside one,
    it would keep SQLite's write lock and block every other driver, which is not the stall meant
    here. Stopped, then probed with a write of our own; resumed and tried again if the lock is held."""
    def paused() -> bool:
        os.kill(process.pid, signal.SIGSTOP)
        wait_until(lambda: all_threads_stopped(process.pid), "every thread of the driver is stopped", poll_s=0.01)
        probe = sqlite3.connect(db, timeout=0.2, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:  # paused mid-write: let it finish
            os.kill(process.pid, signal.SIGCONT)
            return False
        finally:
            probe.close()

    wait_until(paused, "the driver is paused outside a write", poll_s=0.1)


def test_a_heartbeat_keeps_a_lease_and_a_stalled_driver_learns_it_lost_it(tmp_path):
    """The first driver is a process of its own, stalled for real (SIGSTOP: every thread, its
    heartbeat too), then woken (SIGCONT)."""
    import time as clock

    from magis_ray.actors.runtime.liveness import Liveness, RunIsLive
    from magis_ray.store.sqlite import DB_NAME

    store = tmp_path / "store"
    open_store(str(store), create=True).close()
    first = subprocess.Popen([sys.executable, "-c", HOLDING_DRIVER, str(store)], stdout=subprocess.PIPE, text=True)
    second = Liveness(str(store), ttl_s=2.0)
    try:
        epoch = int(first.stdout.readline())
        held_since = clock.time()
        while clock.time() - held_since < 3 * second.ttl_s:  # thrice its length: only the heartbeat keeps it
            with pytest.raises(RunIsLive, match=rf"run r1 is still running on .*, pid {first.pid}, last seen \d+s ago"):
                second.take("r1")
            clock.sleep(0.2)
        pause_outside_a_write(first, store / DB_NAME)  # the first driver stalls: no more heartbeats

        def taken() -> int | None:
            try:
                return second.take("r1")
            except RunIsLive:
                return None

        assert wait_until(taken, "the second driver takes the stalled one's lease", poll_s=0.1) == epoch + 1
        os.kill(first.pid, signal.SIGCONT)  # it wakes up
        wait_until(lambda: first.poll() is not None, "the woken driver learns it lost the lease and ends")
        assert first.returncode == 0 and first.stdout.read() == "lost r1\n"
        with open_store(str(store)) as s:
            [lease] = s.leases("r1")
        assert lease.owner == second.owner and lease.epoch == epoch + 1  # the woken driver left the new holder's lease alone
    finally:
        if first.poll() is None:
            first.kill()
        first.wait()
        first.stdout.close()
        second.close()


def lease_of(pid: int, **fields):
    """A lease as a driver of this host with that pid would hold it now."""
    from magis_ray.actors.runtime.liveness import pid_space, start_ticks
    from magis_ray.store import Lease

    now = time.time()
    return msgspec.structs.replace(Lease("r1", "holder", socket.gethostname(), pid, 1, now, now + 30, start_ticks(pid), pid_space()),
                                   **fields)


def test_a_holder_on_this_host_is_alive_until_its_pid_is_gone_or_another_process():
    from magis_ray.actors.runtime.liveness import holder_state

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        lease = lease_of(child.pid)
        assert lease.started > 0 and lease.pid_space
        assert holder_state(lease) == "alive"
        assert holder_state(msgspec.structs.replace(lease, started=lease.started + 1)) == "dead"  # its pid is another process now
        assert holder_state(msgspec.structs.replace(lease, host="elsewhere")) == "unknown"
        assert holder_state(msgspec.structs.replace(lease, pid_space="another-boot/pid:[1]")) == "unknown"  # a container, a reboot
        assert holder_state(msgspec.structs.replace(lease, started=0, pid_space="")) == "unknown"  # a lease from before start times
        child.kill()
        wait_until(lambda: Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
                   "the killed child is a zombie", poll_s=0.02)
        assert holder_state(lease) == "dead"  # killed, not yet reaped
    finally:
        child.kill()
        child.wait()
    assert holder_state(lease) == "dead"  # reaped: the pid is gone


def test_a_dead_holder_on_this_host_loses_its_lease_at_once_and_one_elsewhere_keeps_it(tmp_path):
    from magis_ray.actors.runtime.liveness import Liveness, RunIsLive

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = lease_of(child.pid)
    child.wait()
    store = str(tmp_path / "store")
    with open_store(store, create=True) as s:
        s.take_lease("r1", "dead-driver", dead.host, dead.pid, ttl_s=600, now=time.time(), started=dead.started,
                     pid_space=dead.pid_space)
        s.take_lease("r2", "far-driver", "elsewhere", dead.pid, ttl_s=600, now=time.time(), started=dead.started,
                     pid_space="another-boot/pid:[1]")
    with Liveness(store) as liveness:
        assert liveness.take("r1") == 2
        with pytest.raises(RunIsLive) as refused:
            liveness.take("r2")
    message = str(refused.value)
    assert re.fullmatch(rf"run r2 is held by a driver on elsewhere, pid {dead.pid}, last seen \d+s ago; "
                        r"if that driver is gone, its lease runs out in (\d+)s", message), message
    assert int(message.rsplit(" ", 1)[1][:-1]) > 500
