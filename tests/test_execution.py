"""The execution layer on the calc fixture: a real environment (a venv of Python 3.11), a real
testbed on it (the project installed at the base commit, editable, with pytest), real test runs on
copies of the testbed in the bubblewrap sandbox. Each hostile test is a real patch that adds a real
test; the sandbox contains it, reports it, and nothing outside changes: not the repository, not the
environment, not the testbed."""
from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from execfixtures import GOLD, TEST_PATCH, git_status, make_calc_repos, new_file_patch, tree_fingerprint
from magis_ray.actors.code.pytest_log import parse_pytest_log
from magis_ray.actors.execution.environments import BuildFailed, EnvironmentCache, Recipe
from magis_ray.actors.execution.runner import INPUTS, TestRunner
from magis_ray.actors.execution.sandbox import GiB, Limits, MiB, BubblewrapSandbox, bwrap_path
from magis_ray.actors.execution.testbeds import TestbedCache, TestbedRecipe
from magis_ray.actors.code.workspaces import Workspace, WorkspaceError

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")


def pytest_parse(log: str) -> dict[str, str]:
    return parse_pytest_log(log)


@pytest.fixture(scope="module")
def calc(tmp_path_factory):
    """The calc repository and its testbed, built once for the module."""
    root = tmp_path_factory.mktemp("exec")
    repo, base = make_calc_repos(root / "repos")
    envs = EnvironmentCache(root / "envs")
    recipe = TestbedRecipe(env=Recipe(python="3.11", label="calc"), repo="calc/calc", commit=base,
                           install=("python -m pip install -e . pytest",), label="calc")
    cache = TestbedCache(envs)
    testbed = cache.get(recipe, repo)
    return {"repo": repo, "base": base, "cache": cache, "recipe": recipe, "testbed": testbed, "root": root}


def run_with(calc, patches: list[str], command: str, runner: TestRunner | None = None, parse=pytest_parse):
    """`command` on a copy of the testbed with `patches` applied first (git apply, in the sandbox)."""
    inputs = {f"{n}.diff": p for n, p in enumerate(patches)}
    script = "\n".join([*(f"git apply -v {INPUTS}/{n}.diff" for n in range(len(patches))), command])
    runner = runner or TestRunner(BubblewrapSandbox(), Limits(wall_seconds=120, memory_bytes=8 * GiB))
    return runner.run(calc["testbed"], script, parse, inputs=inputs)


def test_environment_and_testbed_are_built_once_and_keyed_by_their_recipes(calc):
    testbed = calc["testbed"]
    assert testbed.built_now and testbed.env.built_now and testbed.build_seconds > 0
    again = calc["cache"].get(calc["recipe"], calc["repo"])
    assert again.key == testbed.key and not again.built_now and not again.env.built_now
    other = TestbedRecipe(env=calc["recipe"].env, repo="calc/calc", commit=calc["base"], install=("python -m pip install -e .",))
    assert other.key(testbed.env.key) != testbed.key  # another install step is another testbed
    env_logs = sorted(p.name for p in (Path(testbed.env.path) / "logs").iterdir())
    assert env_logs == ["01-venv.log", "02-tools.log"]
    logs = sorted(p.name for p in (Path(testbed.path) / "logs").iterdir())
    assert logs == ["01-install-1.log", "02-wheelhouse.log", "testbed.log"]
    assert "Successfully installed" in (Path(testbed.path) / "logs" / "01-install-1.log").read_text()
    # The interpreter's own files are linked into the prefix, not copied, and stay root's.
    python = Path(testbed.prefix) / "bin" / "python3.11"
    assert python.stat().st_nlink > 1 and python.stat().st_uid == Path(testbed.env.interpreter).resolve().stat().st_uid
    # The install went into the testbed's own prefix, chained onto the environment's: never into it.
    assert not list((Path(testbed.env.venv) / "lib").glob("python*/site-packages/calc*"))
    assert list((Path(testbed.prefix) / "lib").glob("python*/site-packages/*calc*"))


def test_a_testbed_outlives_the_repository_it_was_built_from(calc, tmp_path):
    """A cache kept across sessions whose repositories were temporary clones: the testbed borrows
    the commit from the repository it is asked for now, and test runs still see its git history;
    a repository without the commit is refused, with the reason, and spoils nothing."""
    gone = tmp_path / "gone" / "calc__calc"
    subprocess.run(["git", "clone", "--quiet", str(calc["repo"]), str(gone)], check=True)
    recipe = dataclasses.replace(calc["recipe"], pre_install=("true",))  # a testbed of its own
    built = calc["cache"].get(recipe, gone)
    assert built.built_now and Path(built.objects).is_relative_to(gone)
    shutil.rmtree(tmp_path / "gone")
    empty = tmp_path / "empty"
    subprocess.run(["git", "init", "--quiet", str(empty)], check=True)
    with pytest.raises(BuildFailed, match=f"the testbed's repository is gone and .* lacks commit {calc['base'][:12]}"):
        calc["cache"].get(recipe, empty)
    again = calc["cache"].get(recipe, calc["repo"])
    assert not again.built_now and again.key == built.key and Path(again.objects).is_relative_to(calc["repo"])
    run = TestRunner(BubblewrapSandbox(), Limits(wall_seconds=120, memory_bytes=8 * GiB)).run(again, "git log -1 --format=%H && git status --short --untracked-files=no", None)
    assert run.exit_code == 0 and run.output.split() == [calc["base"]], run.output[-2000:]


def test_a_failed_build_names_its_step(calc):
    broken = TestbedRecipe(env=calc["recipe"].env, repo="calc/calc", commit=calc["base"], install=("python -c 'raise SystemExit(3)'",))
    with pytest.raises(BuildFailed) as info:
        calc["cache"].get(broken, calc["repo"])
    assert info.value.step == "install-1" and "exit 3" in str(info.value)


def test_gold_patch_makes_the_failing_test_pass_and_nothing_outside_changes(calc):
    watched = {"repo": calc["repo"], "testbed": Path(calc["testbed"].path), "env": Path(calc["testbed"].env.path)}
    before, status = {k: tree_fingerprint(v) for k, v in watched.items()}, git_status(calc["repo"])
    command = "pytest -rA tests/test_more.py"
    unfixed = run_with(calc, [TEST_PATCH], command)
    fixed = run_with(calc, [GOLD, TEST_PATCH], command)
    assert unfixed.results["tests/test_more.py::test_mean_of_two"] == "FAILED"
    assert unfixed.exit_code == 1 and not unfixed.timed_out
    assert fixed.results == {"tests/test_more.py::test_mean_of_two": "PASSED", "tests/test_more.py::test_median_of_one": "PASSED"}
    assert fixed.exit_code == 0 and fixed.duration_s > 0 and "2 passed" in fixed.output
    assert {k: tree_fingerprint(v) for k, v in watched.items()} == before and git_status(calc["repo"]) == status


def test_a_run_may_install_again_into_its_copy_offline(calc):
    """As the harness's eval script does: the install step again, in the run, without the network
    (the build requirements come from the testbed's wheelhouse); the testbed is unchanged."""
    before = tree_fingerprint(Path(calc["testbed"].path))
    run = run_with(calc, [GOLD], "python -m pip install -e . && python -c 'import calc.stats as s; print(s.mean([1, 3]))'",
                   parse=None)
    assert run.exit_code == 0, run.output[-2000:]
    assert "Successfully installed calc" in run.output and run.output.strip().endswith("2.0")
    assert tree_fingerprint(Path(calc["testbed"].path)) == before


def test_a_patch_that_does_not_apply_is_refused_with_gits_reason(calc):
    bad = GOLD.replace("total / (len(values) - 1)", "total / (len(values) - 7)")
    with Workspace(calc["repo"], calc["base"]) as ws:
        assert "patch does not apply" in ws.check(bad)
        with pytest.raises(WorkspaceError, match="patch does not apply"):
            ws.apply(bad)


# --- the sandbox, one hostile test each -------------------------------------------------------------


def hostile_run(calc, name: str, test_code: str, limits: Limits):
    """Apply a patch adding tests/test_NAME.py, run it in the sandbox, and check that nothing
    outside the sandbox changed: the repository, the testbed, the environment, the home folder."""
    watched = {"repo": calc["repo"], "testbed": Path(calc["testbed"].path), "env": Path(calc["testbed"].env.path)}
    before = {k: tree_fingerprint(v) for k, v in watched.items()}
    home_before = sorted(os.listdir(Path.home()))
    path = f"tests/test_{name}.py"
    run = run_with(calc, [new_file_patch(path, test_code)], f"pytest -rA {path}", TestRunner(BubblewrapSandbox(), limits))
    assert {k: tree_fingerprint(v) for k, v in watched.items()} == before
    assert sorted(os.listdir(Path.home())) == home_before
    return run, f"{path}::test_{name}"


def test_sandbox_memory_limit(calc):
    code = """def test_memory():
    hog = bytearray(2 * 1024 ** 3)
    assert len(hog)
"""
    run, test = hostile_run(calc, "memory", code, Limits(wall_seconds=120, memory_bytes=768 * MiB))
    assert run.results[test] == "FAILED" and run.memory_exhausted and "MemoryError" in run.output


def test_without_a_testbed_the_hosts_interpreter_and_path_stay_visible(calc, tmp_path, monkeypatch):
    """A command without a testbed uses the host's tools, which may live where the sandbox shows
    nothing (an activated virtualenv under /tmp, magis-ray's own interpreter in a clean clone)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.setenv("PATH", f"{venv}/bin{os.pathsep}{os.environ['PATH']}")
    runner = TestRunner(BubblewrapSandbox(), Limits(wall_seconds=120, memory_bytes=8 * GiB))
    with Workspace(calc["repo"], calc["base"]) as workspace:
        activated = runner.run(None, "python -c 'import sys; print(sys.prefix)'", tree=workspace.path)
        own = runner.run(None, f"{sys.executable} -c 'print(42)'", tree=workspace.path)
    assert activated.exit_code == 0 and str(venv) in activated.output, activated.output
    assert own.exit_code == 0 and own.output.strip() == "42", own.output


def _distribution_python() -> str | None:
    """The distribution's own python3 (its prefix /usr), what an ordinary user without pyenv has."""
    if not Path("/usr/bin/python3").is_file():
        return None
    found = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(sys.base_prefix, *sys.version_info[:2])"],
                           capture_output=True, text=True)
    prefix, major, minor = found.stdout.split()
    return f"{major}.{minor}" if prefix == "/usr" and (int(major), int(minor)) >= (3, 8) else None


@pytest.mark.slow
@pytest.mark.skipif(_distribution_python() is None, reason="no distribution python3 under /usr")
def test_a_testbed_on_the_distributions_interpreter_is_a_venv_of_its_own(tmp_path):
    """An interpreter whose prefix is /usr itself is the sandbox's system: its testbed is a venv of
    its own (never a copy of /usr), and the calc tests run in it."""
    version = _distribution_python()
    repo, base = make_calc_repos(tmp_path / "repos")
    envs = EnvironmentCache(tmp_path / "envs", pythons={version: "/usr/bin/python3"})
    recipe = TestbedRecipe(env=Recipe(python=version, label="calc"), repo="calc/calc", commit=base,
                           install=("python -m pip install -e . pytest",), label="calc")
    testbed = TestbedCache(envs).get(recipe, repo)
    assert testbed.env.interpreter_prefix == "/usr"
    prefix = Path(testbed.prefix)
    assert (prefix / "pyvenv.cfg").is_file() and not (prefix / "bin" / "ls").exists()
    run = TestRunner(BubblewrapSandbox(), Limits(wall_seconds=120, memory_bytes=8 * GiB)).run(testbed, "python -m pytest -rA tests/test_calc.py", parse_pytest_log)
    # the base commit's two bugs fail test_mean and test_shout
    assert run.results == {"tests/test_calc.py::test_mean": "FAILED", "tests/test_calc.py::test_median": "PASSED",
                           "tests/test_calc.py::test_shout": "FAILED", "tests/test_calc.py::test_whisper": "PASSED"}, run.output[-2000:]
