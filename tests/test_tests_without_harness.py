"""The team's tests need no grader: on a user's repository the bench's spec, its suite and their
parser work with the SWE-bench harness absent (hidden from the process, as an install without the
`grade` extra has it), and where tests cannot run the bench says why in words about the run.
A fresh venv with a plain `pip install .` running a scripted submit is .ci/plain_install.sh."""
from __future__ import annotations

import sys

import pytest

from gitfixtures import make_repo
from magis_ray.actors.code.suites import PYTEST_COMMAND, PytestSuite, suite_for
from magis_ray.actors.execution.specs import custom_spec
from magis_ray.actors.runtime.bench import BenchSetup, ExecutionBench, recipe_of
from magis_ray.events.settings import RunSettings

PYTEST_SUMMARY = """\
=========================== short test summary info ============================
PASSED tests/test_stats.py::test_median
FAILED tests/test_stats.py::test_mean - assert 3.3333333333333335 == 2.5
========================= 1 failed, 1 passed in 0.03s ==========================
"""


@pytest.fixture
def without_harness(monkeypatch):
    """`import swebench` fails in this process, as it does without the grade extra."""
    for name in [m for m in sys.modules if m == "swebench" or m.startswith("swebench.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "swebench", None)
    with pytest.raises(ImportError):
        import swebench  # noqa: F401


@pytest.fixture
def user_repo(tmp_path):
    _, base = make_repo(tmp_path / "calc", {
        "calc/__init__.py": "", "calc/stats.py": "def mean(values):\n    return sum(values) / (len(values) - 1)\n",
        "tests/test_stats.py": "from calc.stats import mean\n\ndef test_mean():\n    assert mean([1, 2, 3, 4]) == 2.5\n",
    })
    return tmp_path / "calc", base


def setup_of(repo, base, record=None, **settings) -> BenchSetup:
    """A run's bench setup on `repo` at `base`, with these settings of the run's."""
    found = dict(repo="example/calc", instance_id="calc-1", base_commit=base, version="", environment_setup_commit="")
    found.update(record or {})
    return BenchSetup(record=found, repo_path=str(repo), settings=RunSettings(**settings))


def test_a_user_s_repository_has_its_spec_and_suite_without_the_harness(without_harness, user_repo):
    repo, base = user_repo
    spec, inference = recipe_of(setup_of(repo, base))
    # declared: nothing, and no package to install: pytest in the environment, the checkout as it is
    assert inference is not None and spec.harness_specs is None and spec.testbed.install == ()
    assert spec.testbed.env.requirements.split() == ["pytest"]
    assert spec.parse(PYTEST_SUMMARY) == {"tests/test_stats.py::test_median": "PASSED", "tests/test_stats.py::test_mean": "FAILED"}
    suite = suite_for(spec.test_command, "")
    assert isinstance(suite, PytestSuite) and suite.command == PYTEST_COMMAND
    assert suite.parse(PYTEST_SUMMARY, ["tests/test_stats.py"]) == spec.parse(PYTEST_SUMMARY)


def test_a_grading_s_own_setup_without_a_test_patch_needs_no_harness(without_harness):
    spec = custom_spec({"repo": "example/calc", "instance_id": "calc-1", "base_commit": "0" * 40}, "3.11", "pip install -e .")
    assert spec.test_command == "pytest -rA" and spec.parse(PYTEST_SUMMARY)["tests/test_stats.py::test_mean"] == "FAILED"


def prepared_output(setup: BenchSetup) -> str:
    ready = ExecutionBench(setup).prepare()
    assert ready.purpose == "prepare" and ready.outcome == "error" and ready.command == ""
    assert "\n" not in ready.output
    return ready.output


def test_a_swebench_version_without_the_harness_says_what_the_run_needs(without_harness, user_repo):
    repo, base = user_repo
    why = prepared_output(setup_of(repo, base, record={"repo": "astropy/astropy", "version": "4.3"}, sandbox="none"))
    assert why == ("the issue names version 4.3 of astropy/astropy, so its tests need SWE-bench's recipe for that version, "
                   "which comes with the SWE-bench harness (pip install 'magis-ray[grade]'); or give --env-setup to "
                   "install the repository your own way")
    # with the user's own install step, the version is no SWE-bench recipe's: the user's repository
    own, _ = recipe_of(setup_of(repo, base, record={"repo": "astropy/astropy", "version": "4.3"}, env_setup="pip install -e ."))
    assert own.harness_specs is None and own.testbed.install == ("pip install -e .",)


def test_django_s_runner_without_the_harness_is_said_so(without_harness, user_repo):
    repo, base = user_repo
    why = prepared_output(setup_of(repo, base, sandbox="none", test_cmd="./tests/runtests.py --verbosity 2"))
    assert why.startswith("the test command runs Django's runner (tests/runtests.py), whose output is read with the "
                          "SWE-bench harness's parser") and "pip install 'magis-ray[grade]'" in why


def test_no_sandbox_is_said_in_words_about_the_run(user_repo, monkeypatch, tmp_path):
    repo, base = user_repo
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no bwrap on it
    monkeypatch.setenv("MAGIS_ENV_CACHE", str(tmp_path / "envs"))  # the node's own cache
    why = prepared_output(setup_of(repo, base))
    assert why == ("the tests run in a sandbox, and none can be made here: bubblewrap (bwrap) is not installed; install "
                   "it (apt-get install bubblewrap) or pass --sandbox none")


def test_no_interpreter_is_said_without_grading_s_flags(user_repo, monkeypatch, tmp_path):
    repo, base = user_repo
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    monkeypatch.setenv("MAGIS_ENV_CACHE", str(tmp_path / "envs"))
    why = prepared_output(setup_of(repo, base, sandbox="none", python="2.1"))
    assert why.startswith("no interpreter for the repository's tests: no Python 2.1 on this machine (looked in ")
    assert why.endswith("install one (e.g. `pyenv install 2.1`)") and "--python" not in why
