"""Starting and stopping `magis-ray submit` on a busy machine, as a user (or `timeout`, CI, systemd)
does it, each beside two busy loops: a Ray that cannot start, SIGTERM mid-run, an unreachable
model, and a warm Ray left running by `ray start --head`."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from checks import assert_consistent_log, assert_one_line_error
from commands import MAGIS, command_environment, in_process
from gated import Gate, run_gated
from processes import busy_loops, describe, in_session
from rayheads import recorded_head_started, stop_head
from scenarios import BOTH_DIFF, BOTH_ISSUE, MEAN_FIX, SHOUT_FIX, calc_issue, write_issue
from teamruns import resume_team
from waiting import wait_until

from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.events.projections import final_diff, fold
from magis_ray.events.schema import RunFailed, RunFinished, RunStarted
from magis_ray.store import NotAStore, open_store

EXPECTED_DIFF = BOTH_DIFF
# A deadline that bounds a hang; what is asserted is the outcome, never the time. Longer than
# Ray's own start may take beside other work (deployment.DEFAULT_RAY_START_S).
GENEROUS_S = 600


# The calls from the kick-off meeting on: a run stopped the moment its meeting begins is still
# waiting on them.
FROM_THE_MEETING = ("meeting_open", "meeting_speak", "meeting_close", "make_plan", "design_qa", "locate_lines", "write_code",
                    "review_patch")


def team(delay_s=0.25):
    return ScriptedTeam({"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]}, delay_s=delay_s, slow=FROM_THE_MEETING)


def environment(**extra) -> dict:
    """A command's environment (tests/commands.py's) with a key and no OPENAI_BASE_URL, and `extra`."""
    return command_environment({"OPENAI_API_KEY": "k", **extra}, without=("OPENAI_BASE_URL",))


def run(args, cwd, env=None, timeout=GENEROUS_S):
    return subprocess.run([*MAGIS, *args], cwd=cwd, env=env or environment(), capture_output=True, text=True, timeout=timeout)


def runs_in(store: Path) -> list[str]:
    try:
        with open_store(str(store)) as s:
            return [info.run_id for info in s.list_runs()]
    except NotAStore:
        return []


@pytest.fixture
def issue_file(calc_repo, tmp_path):
    repo_path, base = calc_repo
    return write_issue(tmp_path / "issue.json", calc_issue(repo_path, base, BOTH_ISSUE))


def test_a_ray_that_cannot_start_ends_in_one_line_and_records_nothing(issue_file, tmp_path):
    """Ray's temp dir is a file: no Ray can start there. Nothing is recorded, no id is shown."""
    broken = tmp_path / "not-a-folder"
    broken.write_text("Ray cannot make its session folder under a file\n")
    store = tmp_path / "store"
    with busy_loops(2), ScriptedServer(team(delay_s=0)) as server:
        result = run(["submit", str(issue_file), "--store", str(store), "--base-url", server.base_url, "--model", "m"],
                     tmp_path, environment(RAY_TMPDIR=str(broken)))
    assert_one_line_error(result, "Ray did not start")
    assert runs_in(store) == []
    assert server.requests == []  # the model was asked for its list of models, and for nothing else


# The moments of a scripted submit at which it is sent SIGTERM: the line whose appearance sends it.
# The run's id is shown the instant Ray has started (the lease taken in between).
MOMENTS = {
    "during-ray-start": Gate("stderr", "  starting Ray"),
    "ray-started-run-id-shown": Gate("stderr", "run "),
    "starting-the-team": Gate("stderr", "  starting the team"),
    "mid-run": Gate("stderr", "  kick-off meeting"),
    "after-the-summary": Gate("stdout", "page:"),
}
# Under `slow`, those that other tests cover without a submit of their own: the instant after
# Ray's start (test_ray_start_keeps_the_commands_signal_handlers), a run stopped before its log
# began (test_journal.py: test_a_log_ended_before_it_began_is_closed_unbegun), a signal once the
# outcome is decided (test_a_signal_after_the_outcome_is_decided_exits_with_it, and the mid-run
# moment's resume, sent SIGTERM after its summary).
COVERED_IN_PROCESS = {"ray-started-run-id-shown", "starting-the-team", "after-the-summary"}
STACK_MARKS = ("Traceback", "logging.cc", "*** SIGTERM", "Aborted", "Fatal Python error")


def submit_args(issue_file: Path, store: Path, server) -> list[str]:
    return [*MAGIS, "submit", str(issue_file), "--store", str(store), "--base-url", server.base_url, "--model", "m"]


def assert_one_ending_line(stopped, starts: str) -> None:
    """What the command said after the gate: progress lines (indented) at most, then exactly one
    line of its own, and no stack of any kind."""
    said = [line for line in stopped.after_gate() if line.strip() and not line.startswith("  ")]
    everything = "\n".join(stopped.stderr + stopped.stdout)
    assert not any(mark in everything for mark in STACK_MARKS), everything
    assert len(said) == 1 and said[0].startswith(starts), stopped.stderr


def assert_session_ends(pid: int) -> None:
    """The stopped driver's Ray (its GCS, raylet, workers) ends with it."""
    left: list[int] = []

    def nothing_left() -> bool:
        left[:] = in_session(pid)
        return not left

    wait_until(nothing_left, lambda: "the stopped driver's processes end; left: " + "; ".join(f"{p} {describe(p)}" for p in left))


@pytest.mark.parametrize("moment", [pytest.param(name, marks=pytest.mark.slow) if name in COVERED_IN_PROCESS else name
                                    for name in MOMENTS])
def test_sigterm_at_any_moment_of_a_submit_ends_in_one_line_and_leaves_no_run_or_a_resumable_one(moment, issue_file, tmp_path):
    """The signal is sent the moment the command prints the moment's line. Before the summary: exit
    143, one line, and no run recorded or one that `resume` finishes; after it: the run's own status.
    The resume that finishes is itself sent SIGTERM once its summary has printed."""
    store = tmp_path / "store"
    gate = MOMENTS[moment]
    answers = team()
    with ScriptedServer(answers) as server:
        stopped = run_gated(submit_args(issue_file, store, server), cwd=tmp_path, env=environment(MAGIS_RAY="own"), gate=gate)
        answers.delay_s = 0  # the resume below is signalled only after its summary: no call of its needs a delay
        assert stopped.opened_at is not None, stopped.stderr
        assert_session_ends(stopped.pid)
        runs = runs_in(store)
        if moment == "after-the-summary":
            assert stopped.returncode == 0, stopped.stderr
            assert stopped.after_gate() == [] and stopped.stdout[1] == "outcome:  patched", stopped.stdout
            [run_id] = runs
        else:
            assert stopped.returncode == 143, stopped.stderr
            assert_one_ending_line(stopped, "magis-ray: interrupted")
            if not runs:
                assert moment != "mid-run", stopped.stderr
                return
            [run_id] = runs
            assert f"magis-ray resume {run_id}" in stopped.stderr[-1], stopped.stderr
            cut = events_of(store, run_id)
            assert isinstance(cut[0].event, RunStarted) and isinstance(cut[-1].event, RunFailed), cut[-1]
            assert cut[-1].event.error_type == "Interrupted"
            assert_consistent_log(cut)
            resumed = run_gated([*MAGIS, "resume", run_id, "--store", str(store), "--base-url", server.base_url],
                                cwd=tmp_path, env=environment(MAGIS_RAY="own"), gate=MOMENTS["after-the-summary"])
            assert resumed.returncode == 0 and resumed.stdout[1] == "outcome:  patched", resumed.stderr
    events = events_of(store, run_id)
    assert isinstance(events[-1].event, RunFinished) and final_diff(fold(events)) == EXPECTED_DIFF


def events_of(store: Path, run_id: str):
    with open_store(str(store)) as s:
        return s.read(run_id)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_model_ends_before_ray_starts(issue_file, tmp_path):
    store = tmp_path / "store"
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with busy_loops(2):
        result = run(["submit", str(issue_file), "--store", str(store), "--base-url", url, "--model", "m"], tmp_path)
    assert_one_line_error(result, url, "does not answer")
    assert runs_in(store) == []
    assert "starting Ray" not in result.stderr


class ListingEndpoint:
    """A remote model endpoint as far as GET /models goes: it lists gpt-4o, and refuses any key but
    "good-key" (HTTP 401), as OpenAI's does; it serves no completion (the run must not get that far)."""

    def __init__(self):
        import json
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.headers.get("Authorization") != "Bearer good-key":
                    code, body = 401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}
                else:
                    code, body = 200, {"object": "list", "data": [{"id": "gpt-4o", "object": "model", "owned_by": "openai"}]}
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        import threading

        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_a_refused_key_or_model_name_ends_in_one_line(issue_file, tmp_path, capsys, monkeypatch):
    """Refused before Ray starts: in this process."""
    store = tmp_path / "store"
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with ListingEndpoint() as endpoint:
        monkeypatch.setenv("OPENAI_API_KEY", "bad-key")
        wrong_key = in_process(capsys, "submit", issue_file, "--store", store, "--base-url", endpoint.base_url, "--model", "gpt-4o")
        monkeypatch.setenv("OPENAI_API_KEY", "good-key")
        wrong_model = in_process(capsys, "submit", issue_file, "--store", store, "--base-url", endpoint.base_url, "--model", "gpt-x")
    assert_one_line_error(wrong_key, "refuses the key", "HTTP 401")
    assert "bad-key" not in wrong_key.err
    assert_one_line_error(wrong_model, "does not serve gpt-x", "gpt-4o")
    assert runs_in(store) == []


# Under `slow` for the suite's time: the joining (its line, its hint, no session of its own in the
# head's temp dir) is checked on test_a_joined_ray_stopped_mid_run_is_named_and_resume_finishes_the_run's
# submit, and whole runs on a joined Ray finish in the modules that join module_ray (test_batch,
# test_docs_runnable, test_shared_services).
@pytest.mark.slow
def test_submit_uses_a_running_ray_head(issue_file, tmp_path):
    """`ray start --head` left running: submit joins it rather than starting a Ray of its own."""
    store = tmp_path / "store"
    with busy_loops(2), recorded_head_started("magis-warm-") as head, ScriptedServer(team(delay_s=0)) as server:
        env = environment(**{name: value for name, value in head.env.items() if name.startswith("RAY_")},
                          RAY_TMPDIR=head.root, MAGIS_RAY="auto")
        result = run(["submit", str(issue_file), "--store", str(store), "--base-url", server.base_url, "--model", "m"],
                     tmp_path, env)
        assert result.returncode == 0, result.stderr
        recorded = (Path(head.root) / "ray" / "ray_current_cluster").read_text().strip()  # the head's node address
        assert recorded.endswith(":" + head.address.rpartition(":")[2]), (recorded, head.address)
        assert f"joining the running Ray at {recorded}, which another process started" in result.stderr, result.stderr
        assert "MAGIS_RAY=own" in result.stderr
        # a Ray of its own would have made a session folder named after the driver's pid there
        sessions = sorted(p.name for p in (Path(head.root) / "ray").glob("session_*") if not p.is_symlink())
        assert len(sessions) == 1, sessions
    [run_id] = runs_in(store)
    assert final_diff(fold(events_of(store, run_id))) == EXPECTED_DIFF


def test_a_joined_ray_stopped_mid_run_is_named_and_resume_finishes_the_run(issue_file, tmp_path):
    """`ray start --head` left running: submit joins it rather than starting a Ray of its own, and
    says so. That warm Ray is stopped by whoever started it, the moment the run's kick-off meeting
    begins: one line naming that Ray by its address and saying how to go on, exit 2; the run goes on
    from its log (the team's resume in this process: a whole `resume` command is the SIGTERM test's
    above) and finishes."""
    store = tmp_path / "store"
    answers = team()
    with ScriptedServer(answers) as server:
        with recorded_head_started("magis-gone-") as head:
            env = environment(**{name: value for name, value in head.env.items() if name.startswith("RAY_")},
                              RAY_TMPDIR=head.root, MAGIS_RAY="auto")
            address = (Path(head.root) / "ray" / "ray_current_cluster").read_text().strip()  # the head's node address
            assert address.endswith(":" + head.address.rpartition(":")[2]), (address, head.address)
            stop = Gate("stderr", "  kick-off meeting", act=lambda _driver: stop_head(head.process, head.root))
            stopped = run_gated(submit_args(issue_file, store, server), cwd=tmp_path, env=env, gate=stop)
            said = "\n".join(stopped.stderr)
            assert f"joining the running Ray at {address}, which another process started" in said, said
            assert "MAGIS_RAY=own" in said
            # a Ray of its own would have made a session folder named after the driver's pid there
            sessions = sorted(p.name for p in (Path(head.root) / "ray").glob("session_*") if not p.is_symlink())
            assert len(sessions) == 1, sessions
        assert stopped.opened_at is not None, stopped.stderr
        assert stopped.returncode == 2, stopped.stderr
        [run_id] = runs_in(store)
        assert_one_ending_line(stopped, f"magis-ray: error: run {run_id}: the Ray this command joined at {address} is gone")
        assert f"magis-ray resume {run_id}" in stopped.stderr[-1], stopped.stderr
        answers.delay_s = 0  # the resume runs to its end: no call of its needs a delay
        resumed = resume_team(store, run_id)
    assert isinstance(resumed.end, RunFinished) and final_diff(fold(resumed.events)) == EXPECTED_DIFF


def test_runs_shows_a_run_without_a_driver_as_cut_off(tmp_path, capsys):
    """Two runs cut short of their ending: one whose driver (this process) holds its lease, one
    whose driver is gone (no lease: it was killed before releasing, and its lease ran out)."""
    from runs import constructed_run, fixed_new_events, repo_for

    from magis_ray.actors.runtime.liveness import Liveness

    repo_path, base = repo_for(tmp_path)
    store = tmp_path / "store"
    unfinished = [pair for pair in constructed_run(repo_path, base) if not isinstance(pair[1], RunFinished)]
    with open_store(str(store), create=True) as s:
        s.append("live00000001", 0, fixed_new_events(unfinished))
        s.append("gone00000002", 0, fixed_new_events(unfinished, start=1_700_100_000.0))
    with Liveness(str(store)) as liveness:
        liveness.take("live00000001")
        listed = in_process(capsys, "runs", "--store", store)
    rows = {line.split()[0]: line for line in listed.out.splitlines()[1:]}
    assert rows["live00000001"].split()[2] == "running", listed.out
    assert rows["gone00000002"].split()[2:4] == ["cut", "off"] and "magis-ray resume" in rows["gone00000002"], listed.out


def test_a_ray_another_user_recorded_is_not_joined(tmp_path, monkeypatch):
    """/tmp/ray is everyone's on a shared machine: a Ray head another user started and recorded there
    is not this user's to run work in, so the driver starts its own; its own recorded head it joins."""
    from magis_ray.actors.runtime.deployment import warm_local_ray
    from magis_ray.events.settings import NodeSettings

    if os.geteuid() != 0:
        pytest.skip("recording an address as another user needs root")
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    with socket.create_server(("127.0.0.1", 0)) as gcs:
        address = f"127.0.0.1:{gcs.getsockname()[1]}"
        recorded = tmp_path / "ray" / "ray_current_cluster"
        recorded.parent.mkdir()
        recorded.write_text(address)
        assert warm_local_ray(NodeSettings()) == address
        os.chown(recorded, 54321, 54321)
        assert warm_local_ray(NodeSettings()) is None


@pytest.mark.parametrize("under_nohup", [False, True], ids=["terminal", "nohup"])
def test_sighup_stops_a_command_unless_it_was_started_under_nohup(under_nohup):
    """A closed terminal (SIGHUP) stops a command as Ctrl-C does, except one started with `nohup`,
    which ignores SIGHUP and must go on ignoring it: the real handler, in a process of its own."""
    program = (
        "import os, signal, sys\n"
        # As a terminal or nohup leaves it, whatever the test runner itself was started under.
        f"signal.signal(signal.SIGHUP, signal.SIG_IGN if {under_nohup} else signal.SIG_DFL)\n"
        "from magis_ray.cli.signals import handle_signals\n"
        "handle_signals()\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGHUP)\n"
        "    print('went on')\n"
        "except KeyboardInterrupt:\n"
        "    print('stopped')\n"
        "print('after:', 'ignored' if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else 'handled')\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=GENEROUS_S)
    assert done.returncode == 0, done.stderr
    if under_nohup:
        assert done.stdout.split() == ["went", "on", "after:", "ignored"]
    else:
        assert done.stdout.split() == ["stopped", "after:", "handled"]


def test_ray_start_keeps_the_commands_signal_handlers():
    """Ray's start would put handlers of its own in place (SIGTERM: exit 15, or its crash handler's
    C++ stack and exit 134): the command's stay, so SIGTERM the instant after the start stops the
    command as anywhere else. The gate is the start's return itself."""
    program = (
        "import os, signal, time\n"
        "from magis_ray.cli.signals import handle_signals\n"
        "handle_signals()\n"
        "from magis_ray.actors.runtime.deployment import ensure_ray\n"
        "ensure_ray('local')\n"
        "print('handler:', signal.getsignal(signal.SIGTERM).__name__, flush=True)\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(60)\n"
        "    print('went on')\n"
        "except KeyboardInterrupt:\n"
        "    print('stopped')\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=GENEROUS_S,
                          env=environment(MAGIS_RAY="own"), start_new_session=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["handler: _on_signal", "stopped"], done.stdout
    assert not any(mark in done.stderr for mark in STACK_MARKS), done.stderr


def test_a_signal_that_comes_while_ray_forks_its_processes_still_stops_the_command():
    """A signal whose handler runs in an at-fork callback (Ray starting its processes) raises where
    Python cannot pass the exception on: it prints "Exception ignored" with a stack and goes on. The
    stop is kept, nothing is printed, and the command stops once Ray's start returns."""
    program = (
        "import os, signal\n"
        "from magis_ray.cli.signals import handle_signals\n"
        "from magis_ray.actors.runtime.deployment import signal_handlers_kept\n"
        "handle_signals()\n"
        "def signalled_mid_fork():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    for _ in range(1000):\n"  # Python code, in which the handler runs
        "        pass\n"
        "os.register_at_fork(after_in_parent=signalled_mid_fork)\n"
        "try:\n"
        "    with signal_handlers_kept():\n"  # as ensure_ray starts Ray
        "        child = os.fork()\n"
        "        if child == 0:\n"
        "            os._exit(0)\n"
        "        os.waitpid(child, 0)\n"
        "        print('went on')\n"
        "except KeyboardInterrupt:\n"
        "    print('stopped')\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=GENEROUS_S)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.splitlines() == ["went on", "stopped"]


@pytest.mark.parametrize("signals, printed, status", [
    ("before", ["stopped 143", "went on"], 0),
    ("sigint-before", ["stopped 130", "went on"], 0),  # Ctrl-C
    ("once-decided", ["summary", "went on"], 7),
    ("twice-decided", ["summary"], 7),
])
def test_a_signal_after_the_outcome_is_decided_exits_with_it(signals, printed, status):
    """Before the outcome is decided a signal stops the command (KeyboardInterrupt), and the status
    it is to exit with names the signal (SIGTERM 143, Ctrl-C's SIGINT 130). Once it is
    decided (status 7 here), a signal lets the command go on printing and exit as it would; a
    second one ends it at once, with that status."""
    program = (
        "import os, signal, sys, time\n"
        "from magis_ray.cli.signals import decide, handle_signals, interrupted_exit_code\n"
        "handle_signals()\n"
        f"signals = {signals!r}\n"
        "if signals in ('before', 'sigint-before'):\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT if signals == 'sigint-before' else signal.SIGTERM)\n"
        "        time.sleep(60)\n"
        "    except KeyboardInterrupt:\n"
        "        print('stopped', interrupted_exit_code())\n"
        "    print('went on')\n"
        "    sys.exit(0)\n"
        "decide(7)\n"
        "print('summary')\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "if signals == 'twice-decided':\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"  # not SIGHUP: a suite run under nohup ignores it
        "    time.sleep(60)\n"
        "print('went on')\n"
        "sys.exit(7)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=GENEROUS_S)
    assert done.returncode == status and done.stderr == "", done.stderr
    assert done.stdout.splitlines() == printed
