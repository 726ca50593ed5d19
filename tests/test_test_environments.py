"""The test environment of a repository no one wrote down, from what it declares: the recipe
(interpreter, date, requirements, install), its suite collected with what is missing added, run
once at the base, and `magis-ray tests` saying so. Real git repositories, the real sandbox, real
packages from the index (as of the fixtures' commit date, 2023-11-14)."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pygit2
import pytest
from commands import Done, in_process
from gitfixtures import commit_files, make_repo

from magis_ray.actors.code.pytest_log import read_collection
from magis_ray.actors.execution.environments import EnvironmentCache
from magis_ray.actors.execution.environments.interpreters import available_versions
from magis_ray.actors.execution.inferred import inferred_spec, released_by
from magis_ray.actors.execution.preparation import prepare_suite
from magis_ray.actors.execution.runner import TestRunner, limits_for_test_runs
from magis_ray.actors.execution.sandbox import GiB, BubblewrapSandbox, bwrap_path
from magis_ray.actors.execution.testbeds import TestbedCache

needs_sandbox = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")

PACKAGE = {"calc/__init__.py": "", "calc/stats.py": "def mean(values):\n    return sum(values) / len(values)\n"}
TESTS = {"tests/test_stats.py": "from calc.stats import mean\n\n\ndef test_mean():\n    assert mean([1, 3]) == 2\n"}
PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "calc"
version = "1.0"
requires-python = ">=3.8"
classifiers = ["Programming Language :: Python :: 3.11"]

[project.optional-dependencies]
test = ["iniconfig"]

[dependency-groups]
tests = ["pytest>=7,<8", "six"]

[tool.setuptools]
packages = ["calc"]
"""


def record_of(base: str, repo: str = "example/calc") -> dict:
    return {"repo": repo, "instance_id": "calc-1", "base_commit": base, "version": ""}


def test_the_recipe_is_the_declarations_at_the_commit_and_its_date(tmp_path):
    _, base = make_repo(tmp_path / "calc", {**PACKAGE, **TESTS, "pyproject.toml": PYPROJECT})
    inference = inferred_spec(record_of(base), tmp_path / "calc")
    env, testbed = inference.spec.testbed.env, inference.spec.testbed
    # the newest Python its classifiers name (3.11), not the newest it allows; as of the commit's date
    assert (inference.python, env.python, env.uploaded_before) == ("3.11", "3.11", "2023-11-14T22:13:20Z")
    # the dependency group's requirements, its own pytest pin; the project installed with its test extra
    assert env.requirements.split("\n")[:2] == ["pytest<8,>=7", "six"] and testbed.install == ("python -m pip install -e '.[test]'",)
    assert [s.name for s in inference.declared.chosen()] == ["pyproject.toml [dependency-groups] tests",
                                                             "pyproject.toml [project.optional-dependencies] test"]
    # the python setting wins; what a collection adds is another recipe
    assert inferred_spec(record_of(base), tmp_path / "calc", python="3.12").spec.testbed.env.python == "3.12"
    more = inference.with_added(("attrs",))
    assert more.spec.testbed.env.requirements.endswith("attrs\n") and more.spec.testbed.env != env


def test_a_folder_of_modules_no_pip_can_build_is_not_installed(tmp_path):
    # a setup.cfg alone is no project pip can build: pytest imports the checkout as it is
    _, base = make_repo(tmp_path / "calc", {**PACKAGE, **TESTS, "setup.cfg": "[metadata]\nname = calc\n"})
    inference = inferred_spec(record_of(base), tmp_path / "calc")
    assert inference.spec.testbed.install == () and inference.spec.testbed.env.requirements == "pytest\n"
    assert inference.sources_line() == "nothing declared"


def test_a_line_left_out_for_clashing_with_an_earlier_place_is_not_said_to_be_installed(tmp_path):
    from magis_ray.actors.execution.preparation import sources_read

    files = {**PACKAGE, **TESTS, "pyproject.toml": PYPROJECT,
             "tox.ini": "[testenv]\ndeps = six==1.16.0\ncommands = pytest\n",
             "setup.py": "from setuptools import setup\nsetup(tests_require=['six==1.15.0', 'attrs'])\n"}
    _, base = make_repo(tmp_path / "calc", files)
    read = {s.name: s.installed for s in sources_read(inferred_spec(record_of(base), tmp_path / "calc"))}
    assert read["tox.ini [testenv]"] == ["six==1.16.0"] and read["setup.py tests_require"] == ["attrs"], read
    # the extras come with the project: all their lines are installed
    assert read["pyproject.toml [project.optional-dependencies] test"] == ["iniconfig", ".[test]"], read


def test_a_python_younger_than_the_commit_is_never_chosen():
    made = datetime(2023, 11, 14, tzinfo=timezone.utc)
    assert released_by("3.12", made) and not released_by("3.13", made) and not released_by("3.99", made)


COLLECTED = """tests/test_a.py::test_one
tests/test_a.py::TestB::test_two

==================================== ERRORS ====================================
____________________ ERROR collecting tests/test_trio.py ____________________
ImportError while importing test module '/testbed/tests/test_trio.py'.
tests/test_trio.py:1: in <module>
    import trio.lowlevel
E   ModuleNotFoundError: No module named 'trio'
=========================== short test summary info ============================
ERROR tests/test_trio.py
2 tests collected, 1 error in 0.12s
"""


def test_a_collection_says_its_tests_and_why_a_file_did_not_load():
    collection = read_collection(COLLECTED)
    assert collection.tests == ("tests/test_a.py::test_one", "tests/test_a.py::TestB::test_two")
    assert collection.errors == (("tests/test_trio.py", "ModuleNotFoundError: No module named 'trio'"),)
    assert collection.missing_modules == ("trio",)
    conftest = read_collection("ImportError while loading conftest '/testbed/tests/conftest.py'.\n"
                               "tests/conftest.py:1: in <module>\n    import hypothesis\n"
                               "E   ModuleNotFoundError: No module named 'hypothesis'\n")
    assert conftest.tests == () and conftest.missing_modules == ("hypothesis",)


@pytest.fixture(scope="module")
def testbeds(env_cache):
    """The module's environment cache (conftest.py's env_cache), which `magis-ray tests` below uses
    too: an environment one test builds, another finds built."""
    sandbox = BubblewrapSandbox()
    return TestbedCache(EnvironmentCache(env_cache, sandbox)), TestRunner(sandbox, limits_for_test_runs(300, 4 * GiB))


@needs_sandbox
def test_what_the_collection_finds_missing_is_added_and_the_suite_runs_at_the_base(tmp_path, testbeds):
    """A test module imports a distribution the project declares nowhere (`yaml`, PyYAML by
    pipreqs' map); another needs the network; the project's addopts make pytest quiet (with a
    `-q` of the collection's own, pytest would print counts per file, not the tests). The
    collection adds PyYAML and collects again; the run at the base counts the network's failure
    apart."""
    tests = {**TESTS,
             "tests/test_yaml.py": "import yaml\n\n\ndef test_load():\n    assert yaml.safe_load('a: 1') == {'a': 1}\n",
             "tests/test_network.py": "import socket\n\n\ndef test_resolve():\n    socket.getaddrinfo('pypi.org', 443)\n"}
    quiet = PYPROJECT + '\n[tool.pytest.ini_options]\naddopts = "-q"\n'
    _, base = make_repo(tmp_path / "calc", {**PACKAGE, **tests, "pyproject.toml": quiet})
    cache, runner = testbeds
    inference = inferred_spec(record_of(base), tmp_path / "calc")
    prepared = prepare_suite(inference.spec, cache, runner, tmp_path / "calc", inference=inference)
    report = prepared.report
    assert report.added == ["PyYAML"] and report.collected == 3 and report.collection_errors == []
    assert (report.ran, report.passed, report.failed) == (True, 2, 1)
    assert report.known_failures == ["tests/test_network.py::test_resolve"] and report.left_out == ["1 need the network"]
    assert prepared.line() == ("on: 3 collected (pyproject.toml [dependency-groups] tests, pyproject.toml "
                               "[project.optional-dependencies] test; Python 3.11)")
    assert [s.installed for s in report.sources if s.installed][0] == ["pytest<8,>=7", "six"]


@needs_sandbox
def test_magis_ray_tests_prints_and_exits_by_what_the_suite_did(tmp_path, env_cache, capsys, monkeypatch):
    """0 when the suite ran, 1 when it could not (no test at all, a build that fails: each one line,
    the reason), 2 on bad input; --json's object has its keys whatever happened."""
    monkeypatch.setenv("MAGIS_ENV_CACHE", str(env_cache))
    _, base = make_repo(tmp_path / "calc", {**PACKAGE, **TESTS, "pyproject.toml": PYPROJECT})

    def tests(repo: str, *args: str) -> Done:
        return in_process(capsys, "tests", "--repo", tmp_path / repo, *args)

    done = tests("calc", "--collect-only", "--json")
    assert done.code == 0, done.err
    found = json.loads(done.out)
    assert (found["collected"], found["python"], found["ran"]) == (1, "3.11", True)
    assert {"collected", "passed", "failed", "errors", "skipped", "deselected", "python", "sources", "seconds"} <= set(found)
    assert found["sources"][0] == {"name": "pyproject.toml [dependency-groups] tests", "installed": ["pytest<8,>=7", "six"]}

    # a repository with no tests, and one whose pyproject.toml is broken: each says why, exit 1
    make_repo(tmp_path / "none", {**PACKAGE, "pyproject.toml": PYPROJECT})
    empty = tests("none")
    assert empty.code == 1 and "tests off: pytest collected no test" in empty.out
    # a pyproject.toml that is not TOML: said where it is read, and pytest's own reason for collecting nothing
    make_repo(tmp_path / "broken", {**PACKAGE, **TESTS, "pyproject.toml": "[project\nname = 'calc'\n"})
    broken = tests("broken")
    said = [line for line in broken.out.splitlines() if line.startswith("tests ")]
    assert broken.code == 1 and len(said) == 1 and said[0].startswith("tests off: pytest: ") and "pyproject.toml" in said[0]
    assert any(line.startswith("  not read: pyproject.toml") for line in broken.out.splitlines()), broken.out
    # an unknown build backend: the same, naming it
    unknown = PYPROJECT.replace('build-backend = "setuptools.build_meta"', 'build-backend = "no_such.backend"')
    make_repo(tmp_path / "unknown", {**PACKAGE, **TESTS, "pyproject.toml": unknown})
    refused = tests("unknown")
    assert refused.code == 1 and "no_such" in refused.out

    # bad input: no repository, an unknown commit; one line each, exit 2
    for done in (tests("nowhere"), tests("calc", "--base", "f" * 40)):
        assert done.code == 2 and len(done.error_lines) == 1, done.err


@needs_sandbox
def test_a_project_the_environment_also_holds_is_tested_from_its_checkout(tmp_path, testbeds):
    """A test requirement brings a release of the project itself (here its own test group asks for
    six, and the project is six; pytest brings packaging, pluggy and iniconfig alike): the
    environment is made without it, and the project is tested from its checkout, as in the
    harness's one environment, where pip replaced the release with it."""
    project = {"pyproject.toml": PYPROJECT.replace('name = "calc"', 'name = "six"').replace('packages = ["calc"]',
                                                                                           'py-modules = ["six"]'),
               "six.py": "CHECKOUT = True\n",
               "tests/test_own.py": "import six\n\n\ndef test_the_checkout():\n    assert six.CHECKOUT\n"}
    _, base = make_repo(tmp_path / "six", project)
    cache, runner = testbeds
    inference = inferred_spec(record_of(base, "example/six"), tmp_path / "six")
    assert inference.spec.testbed.env.without == ("six",)
    prepared = prepare_suite(inference.spec, cache, runner, tmp_path / "six", inference=inference)
    assert (prepared.report.passed, prepared.report.failed) == (1, 0), prepared.report


@needs_sandbox
@pytest.mark.skipif("3.6" not in available_versions(), reason="needs CPython 3.6 (pyenv install 3.6)")
def test_a_commit_of_2017_is_built_and_read_with_the_tools_of_its_date(tmp_path, testbeds):
    """A project of June 2017 gets Python 3.6, the pip of its date (9, which fails to uninstall
    what is not installed, and whose own index is pypi.python.org) and its pytest (3.1, older than
    `-rA`): the environment is made without the project, which nothing there brought; its install
    fetches mpmath from PyPI; and the team's command names the outcomes letter by letter, so each
    passing test has its line (pytest 3 says FAIL, which the harness's rules do not read: a
    failing test counts as failed by being missing)."""
    setup = "from setuptools import setup\n\nsetup(name='calc', version='1.0', packages=['calc'], install_requires=['mpmath<1.1'])\n"
    tests = {"tests/test_stats.py": TESTS["tests/test_stats.py"] + "\n\ndef test_empty():\n    assert mean([]) == 0\n"}
    repo = pygit2.init_repository(str(tmp_path / "calc"))
    june_2017 = int(datetime(2017, 6, 1, tzinfo=timezone.utc).timestamp())
    base = commit_files(repo, {**PACKAGE, **tests, "setup.py": setup}, "initial", at=june_2017)
    cache, runner = testbeds
    inference = inferred_spec(record_of(base), tmp_path / "calc")
    assert (inference.python, inference.spec.testbed.env.without) == ("3.6", ("calc",))
    testbed = cache.get(inference.spec.testbed, tmp_path / "calc")
    run = runner.run(testbed, f"{inference.spec.test_command} tests", inference.spec.parse, installs=False)
    assert "pytest-3.1" in run.output and "FAIL tests/test_stats.py::test_empty" in run.output, run.output[-2000:]
    assert run.results == {"tests/test_stats.py::test_mean": "PASSED"}, run.output[-2000:]


def test_a_run_cut_off_before_its_summary_still_says_what_ran():
    from magis_ray.actors.code.pytest_log import read_progress

    cut = ("tests/test_a.py::test_one PASSED                                         [ 33%]\n"
           "tests/test_a.py::test_two[x-1] FAILED                                    [ 66%]\n"
           "tests/test_b.py::test_three ")
    assert read_progress(cut) == {"tests/test_a.py::test_one": "PASSED", "tests/test_a.py::test_two[x-1]": "FAILED"}


def test_a_run_is_counted_by_pytests_own_last_line_and_an_unknown_option_names_its_plugin():
    from magis_ray.actors.code.pytest_log import read_counts

    # a log line of the run that starts ERROR counts for nothing: the last line says what ran
    assert read_counts("PASSED a.py::t\nERROR    logger:log.py:3 a log line\n"
                       "== 1646 passed, 46 skipped, 2 errors, 3 xfailed, 1 warning in 12.34s ==\n") == {
        "passed": 1646, "skipped": 46, "error": 2, "xfailed": 3}
    assert read_counts("tests/x.py::t PASSED [ 50%]\n") is None
    refused = read_collection("ERROR: usage: __main__.py [options] [file_or_dir] [file_or_dir] [...]\n"
                              "__main__.py: error: unrecognized arguments: --cov=arrow --cov-report=xml --asyncio-mode=auto\n"
                              "  inifile: /testbed/tox.ini\n")
    assert refused.collected == 0 and refused.plugin_options == ("cov", "asyncio")
