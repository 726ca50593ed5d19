"""The execution layer on the calc fixture: a real environment (a venv with the project installed
and pytest), real workspaces, the real bubblewrap sandbox. Each hostile test is a real patch that
adds a real test; the sandbox contains it, reports it, and nothing outside the workspace changes."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from execfixtures import (GOLD, TEST_PATCH, git_status, host_processes_with, make_calc_repos, new_file_patch,
                          tree_fingerprint)
from magis_ray.actors.execution.environments import EnvironmentBuildError, EnvironmentCache, Recipe
from magis_ray.actors.execution.runner import TestRunner, run_on_patch
from magis_ray.actors.execution.sandbox import Limits, MiB, Sandbox, bwrap_path
from magis_ray.actors.execution.workspaces import Workspace, WorkspaceError

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")


def pytest_parse(log: str) -> dict[str, str]:
    from swebench.harness.log_parsers.python import parse_log_pytest

    return parse_log_pytest(log, None)


@pytest.fixture(scope="module")
def calc(tmp_path_factory):
    """The calc repository and its environment, built once for the module."""
    root = tmp_path_factory.mktemp("exec")
    repo, base = make_calc_repos(root / "repos")
    cache = EnvironmentCache(root / "envs")
    recipe = Recipe(python="3.11", repo="calc/calc", commit=base, setup=("python -m pip install -e . pytest",), label="calc")
    env = cache.get(recipe, repo)
    return {"repo": repo, "base": base, "cache": cache, "recipe": recipe, "env": env, "root": root}


def test_environment_is_built_once_and_keyed_by_its_recipe(calc):
    env = calc["env"]
    assert env.built_now and env.build_seconds > 0
    again = calc["cache"].get(calc["recipe"], calc["repo"])
    assert again.key == env.key and not again.built_now
    other = Recipe(python="3.11", repo="calc/calc", commit=calc["base"], setup=("python -m pip install -e .",))
    assert other.key(env.python_version) != env.key  # another install step is another environment
    logs = sorted(p.name for p in (Path(env.path) / "logs").iterdir())
    assert logs == ["01-venv.log", "02-tools.log", "03-setup-1.log"]
    assert "Successfully installed" in (Path(env.path) / "logs" / "03-setup-1.log").read_text()


def test_a_failed_build_names_its_step(calc):
    broken = Recipe(python="3.11", repo="calc/calc", commit=calc["base"], setup=("python -c 'raise SystemExit(3)'",))
    with pytest.raises(EnvironmentBuildError) as info:
        calc["cache"].get(broken, calc["repo"])
    assert info.value.step == "setup-1" and "exit 3" in str(info.value)


def test_gold_patch_makes_the_failing_test_pass_and_the_repository_is_untouched(calc):
    runner = TestRunner(Sandbox(), Limits(wall_seconds=120))
    before, status = tree_fingerprint(calc["repo"]), git_status(calc["repo"])
    command = "pytest -rA tests/test_more.py"
    unfixed = run_on_patch(calc["repo"], calc["base"], [("test_patch", TEST_PATCH)], calc["env"], command, runner, pytest_parse)
    fixed = run_on_patch(calc["repo"], calc["base"], [("gold", GOLD), ("test_patch", TEST_PATCH)], calc["env"], command,
                         runner, pytest_parse)
    assert unfixed.results["tests/test_more.py::test_mean_of_two"] == "FAILED"
    assert unfixed.exit_code == 1 and not unfixed.timed_out
    assert fixed.results == {"tests/test_more.py::test_mean_of_two": "PASSED", "tests/test_more.py::test_median_of_one": "PASSED"}
    assert fixed.exit_code == 0 and fixed.duration_s > 0 and "2 passed" in fixed.output
    assert tree_fingerprint(calc["repo"]) == before and git_status(calc["repo"]) == status


def test_a_patch_that_does_not_apply_is_refused_with_gits_reason(calc):
    bad = GOLD.replace("total / (len(values) - 1)", "total / (len(values) - 7)")
    with Workspace(calc["repo"], calc["base"]) as ws:
        assert "patch does not apply" in ws.check(bad)
        with pytest.raises(WorkspaceError, match="patch does not apply"):
            ws.apply(bad)


# --- the sandbox, one hostile test each -------------------------------------------------------------


def hostile_run(calc, name: str, test_code: str, limits: Limits):
    """Apply a patch adding tests/test_NAME.py, run it in the sandbox, and check that nothing
    outside the workspace changed: the repository, the environment, the home directory."""
    watched = {"repo": calc["repo"], "env": Path(calc["env"].path)}
    before = {k: tree_fingerprint(v) for k, v in watched.items()}
    home_before = sorted(os.listdir(Path.home()))
    runner = TestRunner(Sandbox(), limits)
    path = f"tests/test_{name}.py"
    run = run_on_patch(calc["repo"], calc["base"], [(name, new_file_patch(path, test_code))], calc["env"],
                       f"pytest -rA {path}", runner, pytest_parse)
    assert {k: tree_fingerprint(v) for k, v in watched.items()} == before
    assert sorted(os.listdir(Path.home())) == home_before
    return run, f"{path}::test_{name}"


def test_sandbox_has_no_network_even_to_a_loopback_server(calc):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    code = f"""import socket


def test_network():
    with socket.create_connection(("127.0.0.1", {port}), timeout=5) as s:
        s.sendall(b"hello")
"""
    try:
        # The same connection works from the host: the server is really there.
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        run, test = hostile_run(calc, "network", code, Limits(wall_seconds=120))
    finally:
        stop.set()
        thread.join()
        server.close()
    assert run.results[test] == "FAILED" and "ConnectionRefusedError" in run.output
    assert len(accepted) == 1  # only the host's own probe


def test_sandbox_home_is_not_writable(calc):
    probe = Path.home() / f"magis-probe-{uuid.uuid4().hex}"
    code = f"""from pathlib import Path


def test_home():
    Path({str(probe)!r}).write_text("escaped")
"""
    run, test = hostile_run(calc, "home", code, Limits(wall_seconds=120))
    assert run.results[test] == "FAILED" and "Read-only file system" in run.output
    assert not probe.exists()


def test_sandbox_memory_limit(calc):
    code = """def test_memory():
    hog = bytearray(2 * 1024 ** 3)
    assert len(hog)
"""
    run, test = hostile_run(calc, "memory", code, Limits(wall_seconds=120, memory_bytes=768 * MiB))
    assert run.results[test] == "FAILED" and run.memory_exhausted and "MemoryError" in run.output


def test_sandbox_time_limit_kills_the_whole_tree(calc):
    marker = f"magis-sleeper-{uuid.uuid4().hex}"
    code = f"""import subprocess, sys


def test_time():
    subprocess.run([sys.executable, "-c", "import time; time.sleep(600)", {marker!r}])
"""
    run, _ = hostile_run(calc, "time", code, Limits(wall_seconds=8))
    assert run.timed_out and run.exit_code is None and run.duration_s < 60
    assert host_processes_with(marker) == []


def test_sandbox_kills_what_a_test_leaves_behind(calc):
    marker = f"magis-orphan-{uuid.uuid4().hex}"
    code = f"""import subprocess, sys


def test_background():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", {marker!r}], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""
    run, test = hostile_run(calc, "background", code, Limits(wall_seconds=120))
    assert run.results[test] == "PASSED" and run.exit_code == 0 and not run.timed_out
    assert run.leftover_processes >= 1
    assert host_processes_with(marker) == []


def test_without_an_environment_the_hosts_interpreter_and_path_stay_visible(calc, tmp_path, monkeypatch):
    """The sandbox has its own empty /tmp (and hides what it is told to). A command without an
    environment uses the host's tools, which may live there: an activated virtualenv under /tmp,
    or magis-ray's own interpreter (a clean clone in /tmp) must still run."""
    venv = tmp_path / "venv"  # pytest's tmp_path is under /tmp
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.setenv("PATH", f"{venv}/bin{os.pathsep}{os.environ['PATH']}")
    runner = TestRunner(Sandbox(), Limits(wall_seconds=120))
    activated = run_on_patch(calc["repo"], calc["base"], [], None, "python -c 'import sys; print(sys.prefix)'", runner)
    assert activated.exit_code == 0 and str(venv) in activated.output, activated.output
    # magis-ray's own interpreter, in a folder the sandbox hides.
    hidden = TestRunner(Sandbox(hide=(sys.prefix,)), Limits(wall_seconds=120))
    own = run_on_patch(calc["repo"], calc["base"], [], None, f"{sys.executable} -c 'print(42)'", hidden)
    assert own.exit_code == 0 and own.output.strip() == "42", own.output
