"""Environments as the official harness builds them, one mechanism at a time, on fixture
repositories that reproduce what the SWE-bench repositories do (tests/test_swebench_grading.py has
the same steps on the real ones, where the fetched repositories are present):

A  an exact pin of the spec wins over the date (flask pins setuptools==70.0.0 of May 2024)
B  tests that need the internet are recognized; --network gives them the network (requests)
C  the install writes files the tests import (setuptools_scm's version file: pytest)
D  the spec's pre-install file edits run; an apt-get names a system package (sphinx, astropy),
   required, or only for some tests and then named while grading goes on (matplotlib)
E  git submodules come from a local mirror, or "needs the internet" (astropy 1.3)
F  a conda environment.yml as pip packages (xarray)
G  the install runs at each instance's base commit (pylint-5859 needs toml there)
H  pip, setuptools and wheel keep to the date too (pylint's editable install)

Real throughout: virtual environments from PyPI, git repositories, the bubblewrap sandbox."""
from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from execfixtures import new_file_patch, pyproject
from gitfixtures import Submodule, commit_files, make_repo
from magis_ray.actors.execution.environments.conda import pip_equivalent
from magis_ray.actors.execution.environments import BuildFailed, EnvironmentCache, Recipe
from magis_ray.actors.execution.environments.installers import AUTO, PIP
from magis_ray.actors.execution.environments.interpreters import InterpreterMissing, find_python
from magis_ray.actors.execution.runner import TestRunner
from magis_ray.actors.execution.sandbox import BubblewrapSandbox, bwrap_path
from magis_ray.actors.execution.environments import SystemPackagesMissing
from magis_ray.actors.execution.testbeds import TestbedCache, TestbedRecipe
from magis_ray.actors.execution.runner import limits_for_test_runs
from magis_ray.actors.swebench.grading import grade
from magis_ray.events.settings import GradeSettings

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")
PY = "3.11"


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    root = tmp_path_factory.mktemp("fidelity")
    return TestbedCache(EnvironmentCache(root / "envs")), root


@pytest.fixture(scope="module")
def plain(caches):
    """A project of one package with no dependencies, which names a host its tests may reach: the
    instances of B, D and the isolated build differ in their patches alone, so they are graded on
    its one testbed (the same repository, commit and install), built once for the module."""
    _, root = caches
    _, base = make_repo(root / "repos" / "plain__plain", {"pyproject.toml": pyproject("pkg", []),
                                                          "pkg/__init__.py": "HOST = 'pypi.org'\n"})
    return "plain/plain", base


def site_packages(venv: str) -> list[str]:
    return sorted(p.name for p in next(Path(venv, "lib").glob("python*/site-packages")).iterdir())


def record(repo: str, base: str, tests: dict, patch: str = "", setup_commit: str = "", test_patch: str = "") -> dict:
    return {"repo": repo, "instance_id": f"{repo.replace('/', '__')}-1", "base_commit": base, "patch": patch,
            "test_patch": test_patch, "FAIL_TO_PASS": json.dumps(tests.get("f2p", [])),
            "PASS_TO_PASS": json.dumps(tests.get("p2p", [])), "environment_setup_commit": setup_commit or base,
            "version": "0.1"}


def grade_custom(caches, record_, patch, env_setup="python -m pip install -e . pytest", network=False):
    testbeds, root = caches
    runner = TestRunner(BubblewrapSandbox(), limits_for_test_runs(300, 4 * 1024 ** 3), network=network)
    return grade(record_, patch, root / "repos", testbeds, runner, model="fixture",
                 settings=GradeSettings(env_python=PY, env_setup=env_setup, test_cmd="pytest -rA"))


# --- A and H: the date, and what wins over it -------------------------------------------------


def test_h_packages_pip_setuptools_and_wheel_keep_to_the_date(caches):
    testbeds, _ = caches
    env = testbeds.envs.get(Recipe(python=PY, pip_packages=("attrs",), uploaded_before="2023-01-01T00:00:00Z", label="era"))
    installed = site_packages(env.venv)
    assert "attrs-22.2.0.dist-info" in installed  # the newest attrs of December 2022, not today's
    # pip, setuptools and wheel too: the pip of late 2022 (today's no longer runs `setup.py develop`).
    assert {"pip-22.3.1.dist-info", "setuptools-65.6.3.dist-info", "wheel-0.38.4.dist-info"} <= set(installed)
    assert "resolved everything as of 2023-01-01" in (Path(env.path) / "logs" / "era.log").read_text()


# slow: test_installers.py's test_uv_and_pip_build_the_same_distributions_from_one_recipe pins six
# 1.17.0 over the same date and reads the same log
@pytest.mark.slow
def test_a_an_exact_pin_wins_over_the_date_which_moves_to_its_release(caches):
    """six 1.17.0 came out on 2024-12-04: the spec pins it, so the environment cannot be older
    than that, and what it leaves free resolves as of then (attrs 24.2.0, not 24.3.0 of 2024-12-16)."""
    testbeds, _ = caches
    env = testbeds.envs.get(Recipe(python=PY, pip_packages=("six==1.17.0", "attrs"), uploaded_before="2023-01-01T00:00:00Z",
                                   label="era-pinned"))
    installed = site_packages(env.venv)
    assert "six-1.17.0.dist-info" in installed and "attrs-24.2.0.dist-info" in installed
    log = (Path(env.path) / "logs" / "era.log").read_text()
    assert "six==1.17.0 was released 2024-12-04" in log and env.uploaded_before.startswith("2024-12-04")


# pip's case is slow: the resolution from wheels for 3.8 that it wires in is tested in process
# (test_a_resolution_for_an_older_python_decides_its_markers_for_that_python); uv's case keeps a
# whole install on 3.8. pip's case keeps a later date: the resolution from wheels asks the
# environment's own pip what the install wants (`--report`, pip 22.2 of July 2022).
@pytest.mark.parametrize("installer, resolved_by, date", [
    pytest.param(PIP, "for Python 3.8", "2023-01-01T00:00:00Z", marks=pytest.mark.slow),
    (AUTO, "by uv", "2022-04-01T00:00:00Z")])
def test_h_an_install_on_a_python_too_old_for_a_resolver_keeps_to_the_date(caches, installer, resolved_by, date):
    """Below Python 3.9 no pip resolves as of a date in the environment itself (matplotlib 3.4 and
    Django 3.0 run 3.8 and 3.6): what the project's install adds is resolved as of the date all
    the same, by uv where it built the environment, else from wheels. matplotlib asks for
    setuptools_scm, whose today's release warns at import, and its tests turn warnings into errors.
    The project declares its requirements in setup.py, as SWE-bench's do, so uv builds it to read
    them, with the date's setuptools (62 in April 2022), which has no hooks for an editable install:
    they are read from the project as installed. Its setup.cfg tags the version with the build's
    date, as sphinx's did, in a form uv cannot read: they are read from a copy without the tags."""
    testbeds, root = caches
    try:
        find_python("3.8")
    except InterpreterMissing:
        pytest.skip("no Python 3.8 on this machine")
    setup = 'from setuptools import setup\nsetup(name="pkg", version="0.1", packages=["pkg"], install_requires=["six"])\n'
    tags = "[egg_info]\ntag_build = .dev\ntag_date = true\n"
    _, base = make_repo(root / "repos" / f"old__old-{installer}", {"setup.py": setup, "setup.cfg": tags, "pkg/__init__.py": ""})
    env = Recipe(python="3.8", pip_packages=("pytest",), uploaded_before=date, installer=installer,
                 label=f"era-38-{installer}")
    testbed = testbeds.get(TestbedRecipe(env=env, repo="old/old", commit=base, install=("python -m pip install -e .",)),
                           root / "repos" / f"old__old-{installer}")
    assert "six-1.16.0.dist-info" in site_packages(str(Path(testbed.path) / "python"))  # not 1.17.0 of 2024
    assert f"resolved as of {date} {resolved_by}" in (Path(testbed.path) / "logs" / "testbed.log").read_text()
    assert "read from a copy of the tree without the tags" in (Path(testbed.path) / "logs" / "testbed.log").read_text()
    assert not (Path(testbed.path) / "untagged-tree").exists()  # the copy uv read goes once the install ends


def test_h_a_test_run_installing_again_builds_with_the_tools_the_testbeds_install_built_with(caches):
    """The install's pip isolates its build with the index's newest setuptools, whatever the
    environment's date (its pip knows no dates); the test run installs again offline from the
    testbed's wheelhouse, as the harness's eval script does online: with the same setuptools."""
    testbeds, root = caches
    repo = root / "repos" / "tools__tools"
    setup = 'import pathlib, setuptools\npathlib.Path("built_with.txt").write_text(setuptools.__version__)\nsetuptools.setup()\n'
    _, base = make_repo(repo, {"pyproject.toml": pyproject("tools"), "setup.py": setup, "tools/__init__.py": ""})
    env = Recipe(python=PY, pip_packages=("attrs",), uploaded_before="2023-01-01T00:00:00Z", label="era")
    testbed = testbeds.get(TestbedRecipe(env=env, repo="tools/tools", commit=base, install=("python -m pip install -e .",)), repo)
    built_with = (Path(testbed.tree) / "built_with.txt").read_text()
    assert int(built_with.split(".")[0]) > 65  # newer than the date's (65.6.3 of December 2022)
    assert list(Path(testbed.wheelhouse).glob(f"setuptools-{built_with}-*.whl"))
    run = TestRunner(BubblewrapSandbox(), limits_for_test_runs(300, 4 * 1024 ** 3)).run(
        testbed, "rm built_with.txt && python -m pip install -e . >/dev/null && cat built_with.txt", None)
    assert run.exit_code == 0 and run.output.strip().endswith(built_with), run.output[-2000:]


def test_a_resolution_for_an_older_python_decides_its_markers_for_that_python(tmp_path):
    """pikepdf 8.11.1 asks for `lxml<5; python_version < "3.10"`: resolved for Python 3.8 from this
    3.11 process, the marker holds (lxml 5.0.0 of 2023-12-29 would conflict at the install)."""
    from magis_ray.actors.execution.environments.dated import pins_in, resolve_from_wheels

    pins = tmp_path / "pins.txt"
    ok, error = resolve_from_wheels(["pikepdf==8.11.1"], "3.8.18", "2024-01-01T00:00:00Z", str(tmp_path), pins, tmp_path / "cache")
    assert ok, error
    versions = dict(pin.split("==") for pin in pins_in(pins))
    assert versions["lxml"].startswith("4."), versions


def test_a_distribution_uploaded_again_is_offered_as_of_that_upload_from_pypi_named(tmp_path):
    """atomicwrites' every release was uploaded again in July 2022: as of July 2019, pytest 5.0.1
    (which needs it) is resolved, not pytest 3.5.1 (which did without it)."""
    from magis_ray.actors.execution.environments.dated import PYPI, dated_arguments, index_variables, pins_in, resolve_from_wheels

    pins = tmp_path / "pins.txt"
    ok, error = resolve_from_wheels(["pytest>=2.7.1"], "3.7.16", "2019-07-31T17:47:59Z", str(tmp_path), pins, tmp_path / "cache")
    assert ok, error
    versions = dict(pin.split("==") for pin in pins_in(pins))
    assert versions["pytest"] == "5.0.1" and "atomicwrites" in versions, versions
    # the index is named where the user names none: a pip before 10 would ask pypi.python.org
    assert index_variables({})["PIP_INDEX_URL"] == PYPI
    assert index_variables({"PIP_INDEX_URL": "https://mirror.example/simple"})["PIP_INDEX_URL"] == "https://mirror.example/simple"
    # a date after that upload, or an exact pin of its own, needs no word of it
    assert not any("atomicwrites" in a for a in dated_arguments("2023-01-01T00:00:00Z", set()))
    assert "--exclude-newer-package=atomicwrites=2999-01-01T00:00:00Z" in dated_arguments("2019-01-01T00:00:00Z", {"atomicwrites"})


def test_a_resolution_never_pins_the_project_from_its_folder(tmp_path):
    """pip's report names the project it installs from /testbed too, editable or not (`dir_info`
    empty for `pip install .`, as requests' specs install): no pin for it, or uv would install its
    namesake from PyPI before pip installs the commit's own."""
    from magis_ray.actors.execution.environments.dated import constraints_from_report

    report = tmp_path / "report.json"
    report.write_text(json.dumps({"install": [
        {"metadata": {"name": "requests", "version": "1.1.0"}, "download_info": {"url": "file:///testbed", "dir_info": {}}},
        {"metadata": {"name": "widget", "version": "0.1"},
         "download_info": {"url": "file:///testbed", "dir_info": {"editable": True}}},
        {"metadata": {"name": "lib", "version": "2.0"}, "download_info": {"url": "git+https://x/lib", "vcs_info": {}}},
        {"metadata": {"name": "six", "version": "1.16.0"},
         "download_info": {"url": "https://files.pythonhosted.org/six-1.16.0-py2.py3-none-any.whl", "archive_info": {}}}]}))
    assert constraints_from_report(report) == ["six==1.16.0"]


def test_what_an_install_asks_for_is_read_for_the_environment_s_python(tmp_path):
    from magis_ray.actors.execution.environments.dated import project_requirements_for

    report = {"install": [
        {"requested": True, "requested_extras": ["test"], "download_info": {"url": "file:///testbed", "dir_info": {"editable": True}},
         "metadata": {"name": "pkg", "requires_dist": ["numpy>=1.17", "importlib-metadata; python_version < '3.8'",
                                                       "typing-extensions; python_version < '3.10'", "pytest; extra == 'test'",
                                                       "sphinx; extra == 'docs'"]}},
        {"requested": True, "download_info": {"url": "https://files/pytest.whl"}, "metadata": {"name": "pytest"}},
        {"requested": False, "download_info": {"url": "https://files/six.whl"}, "metadata": {"name": "six"}}]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    # Python 3.8's markers, not this process's; the extra asked for, not the others; what was named.
    assert project_requirements_for(tmp_path / "r.json", "3.8.18") == ["numpy>=1.17", "pytest", "typing-extensions"]


# --- B: tests that need the internet ----------------------------------------------------------


def pypi_resolves() -> bool:
    try:
        socket.getaddrinfo("pypi.org", 443)
        return True
    except OSError:
        return False


def test_b_a_test_that_needs_the_internet_is_recognized_and_network_lets_it_run(caches, plain):
    test = new_file_patch("tests/test_net.py", "import socket\nfrom pkg import HOST\n\n\ndef test_dns():\n"
                                              "    assert socket.getaddrinfo(HOST, 443)\n")
    rec = record(*plain, {"f2p": ["tests/test_net.py::test_dns"]}, test_patch=test)
    offline = grade_custom(caches, rec, new_file_patch("NOTES", "a change\n"))
    assert offline.completed and not offline.resolved and offline.needs_internet
    if not pypi_resolves():
        pytest.skip("this machine cannot resolve pypi.org itself")
    online = grade_custom(caches, rec, new_file_patch("NOTES", "a change\n"), network=True)
    assert online.resolved and not online.needs_internet


def test_b_a_patch_that_adds_a_dependency_needs_the_internet_to_install_again(caches, plain):
    """pylint-4661's gold patch adds appdirs to setup.cfg: the eval script's install step needs the
    index, which a sandboxed test run does not reach."""
    patch = ("diff --git a/pyproject.toml b/pyproject.toml\n--- a/pyproject.toml\n+++ b/pyproject.toml\n"
             "@@ -7 +7 @@ version = \"0.1\"\n-dependencies = []\n+dependencies = [\"six\"]\n")
    test = new_file_patch("tests/test_six.py", "def test_six():\n    import six\n    assert six.PY3\n")
    rec = record(*plain, {"f2p": ["tests/test_six.py::test_six"]}, test_patch=test)
    offline = grade_custom(caches, rec, patch)
    assert offline.completed and not offline.resolved and offline.needs_internet, offline.output_tail
    if not pypi_resolves():
        pytest.skip("this machine cannot reach pypi.org itself")
    online = grade_custom(caches, rec, patch, network=True)
    assert online.resolved and not online.needs_internet


# --- C: what the install writes -------------------------------------------------------------

SCM_PYPROJECT = """[build-system]
requires = ["setuptools>=64", "setuptools_scm>=7"]
build-backend = "setuptools.build_meta"

[project]
name = "pkg"
dynamic = ["version"]

[tool.setuptools]
packages = ["pkg"]

[tool.setuptools_scm]
write_to = "pkg/_version.py"
"""


def test_c_a_file_the_install_writes_is_in_the_tests_checkout(caches):
    _, root = caches
    repo = root / "repos" / "scm__scm"
    _, base = make_repo(repo, {"pyproject.toml": SCM_PYPROJECT, "pkg/__init__.py": "from ._version import version\n",
                               ".gitignore": "pkg/_version.py\n"})
    test = new_file_patch("tests/test_version.py", "import pkg\n\n\ndef test_version():\n    assert pkg.version\n")
    rec = record("scm/scm", base, {"f2p": ["tests/test_version.py::test_version"]}, test_patch=test)
    result = grade_custom(caches, rec, new_file_patch("NOTES", "a change\n"))
    assert result.completed and result.resolved, (result.error, result.output_tail)


# --- D: the spec's pre-install steps -----------------------------------------------------------


def test_d_pre_install_edits_run_and_a_system_package_must_be_on_the_machine(caches):
    testbeds, root = caches
    repo = root / "repos" / "edit__edit"
    _, base = make_repo(repo, {"tox.ini": "[testenv]\ncommands = pytest {posargs}\n", "pkg/__init__.py": ""})
    env = Recipe(python=PY, label="plain")
    # The harness runs them as lines of one script: the `cd` carries to the line after it.
    recipe = TestbedRecipe(env=env, repo="edit/edit", commit=base,
                           pre_install=("sed -i 's/pytest/pytest -rA/' tox.ini", "cd pkg", "echo edited > marker.txt"))
    testbed = testbeds.get(recipe, repo)
    assert (Path(testbed.tree) / "tox.ini").read_text() == "[testenv]\ncommands = pytest -rA {posargs}\n"
    assert (Path(testbed.tree) / "pkg" / "marker.txt").read_text() == "edited\n"
    failing = TestbedRecipe(env=env, repo="edit/edit", commit=base,
                            pre_install=("sed -i 's/pytest/pytest -x/' tox.ini", "false", "echo never > never.txt"))
    with pytest.raises(BuildFailed, match="pre_install") as failed:
        testbeds.get(failing, repo)
    assert "+ false" in failed.value.log and "never.txt" not in failed.value.log
    missing = TestbedRecipe(env=env, repo="edit/edit", commit=base, system_packages=("magis-ray-no-such-package",))
    with pytest.raises(SystemPackagesMissing, match="needs system packages not on this machine: magis-ray-no-such-package"):
        testbeds.get(missing, repo)


def test_d_a_package_only_some_tests_use_is_named_and_grading_goes_on(caches, plain, monkeypatch):
    """matplotlib's spec installs texlive, ffmpeg and ImageMagick for some of its tests only: one
    missing is named with its install command, and the instance is graded (those tests skip)."""
    import dataclasses

    from magis_ray.actors.swebench import grading

    test = new_file_patch("tests/test_one.py", "def test_one():\n    assert True\n")
    rec = record(*plain, {"f2p": ["tests/test_one.py::test_one"]}, test_patch=test)
    spec_for = grading.spec_for
    monkeypatch.setattr(grading, "spec_for", lambda *args, **kwargs: dataclasses.replace(
        spec_for(*args, **kwargs), optional_packages=("bash", "magis-ray-no-such-package")))
    result = grade_custom(caches, rec, new_file_patch("NOTES", "a change\n"))
    assert result.resolved, (result.error, result.output_tail)
    assert result.warnings == ["some tests skip without the system packages magis-ray-no-such-package "
                               "(apt-get install magis-ray-no-such-package)"]


# --- E: git submodules ----------------------------------------------------------------------

SUBMODULE_SETUP = """from pathlib import Path
from setuptools import setup

assert Path("vendor/helpers/helpers.py").is_file(), "the helpers submodule is not checked out"
setup(name="pkg", version="0.1", packages=["pkg"])
"""


def test_e_submodules_come_from_a_local_mirror_or_need_the_internet(caches):
    testbeds, root = caches
    mirrors = root / "mirrors"
    helpers, helpers_commit = make_repo(mirrors / "calc__helpers", {"helpers.py": "def helper():\n    return 1\n"})
    repo = root / "repos" / "sub__sub"
    _, base = make_repo(repo, {
        ".gitmodules": '[submodule "vendor/helpers"]\n\tpath = vendor/helpers\n\turl = https://github.com/calc/helpers.git\n',
        "vendor/helpers": Submodule(helpers_commit), "setup.py": SUBMODULE_SETUP, "pkg/__init__.py": ""})
    env = Recipe(python=PY, label="plain")
    recipe = TestbedRecipe(env=env, repo="sub/sub", commit=base, install=("python -m pip install -e .",))
    testbed = testbeds.get(recipe, repo, mirrors=mirrors)
    assert (Path(testbed.tree) / "vendor" / "helpers" / "helpers.py").is_file()
    without = TestbedRecipe(env=env, repo="sub/sub", commit=base, install=("python -m pip install -e . --verbose",))
    with pytest.raises(BuildFailed, match="needs the internet.*vendor/helpers"):
        testbeds.get(without, repo, mirrors=root / "no-mirrors")


# --- F: conda's environment.yml ---------------------------------------------------------------


def test_f_an_environment_yml_becomes_pip_packages():
    mapped = pip_equivalent("""name: xarray-tests
channels: [conda-forge, nodefaults]
dependencies:
  - python=3.10
  - pip
  - numpy<1.24
  - matplotlib-base
  - netcdf4
  - hdf5
  - cdms2
  - cfgrib
  - iris
  - dask-core
  - pandas=1.5
  - pip:
    - numbagg
""")
    assert mapped.packages == ("numpy<1.24", "matplotlib", "netCDF4", "scitools-iris", "dask", "pandas==1.5.*", "numbagg")
    assert any(note.startswith("cdms2: on conda-forge only") for note in mapped.notes)
    assert any(note.startswith("hdf5: a C library") for note in mapped.notes)


# --- G: the install at each base commit --------------------------------------------------------


def test_g_the_install_runs_at_the_instances_base_commit(caches):
    _, root = caches
    path = root / "repos" / "later__later"
    repo, setup_commit = make_repo(path, {"pyproject.toml": pyproject("pkg", []), "pkg/__init__.py": ""})
    base = commit_files(repo, {"pyproject.toml": pyproject("pkg", ["six"]),
                               "pkg/__init__.py": "import six\n\nTEXT = six.text_type\n"}, "pkg needs six from here on")
    test = new_file_patch("tests/test_text.py", "from pkg import TEXT\n\n\ndef test_text():\n    assert TEXT is str\n")
    rec = record("later/later", base, {"f2p": ["tests/test_text.py::test_text"]}, setup_commit=setup_commit, test_patch=test)
    result = grade_custom(caches, rec, new_file_patch("NOTES", "a change\n"))
    assert result.completed and result.resolved, (result.error, result.output_tail)


def test_an_install_may_add_folders_to_the_interpreters_prefix(caches):
    """pvlib's [all] extras install data files beside the interpreter (prefix/man, prefix/share):
    the build's uid owns the testbed's prefix, not only its bin/ and site-packages."""
    _, root = caches
    repo = root / "repos" / "data__data"
    setup = ('from setuptools import setup\n\nsetup(name="pkg", version="0.1", packages=["pkg"],\n'
             '      data_files=[("man/man1", ["pkg.1"]), ("share/pkg", ["pkg.1"])])\n')
    _, base = make_repo(repo, {"setup.py": setup, "pkg/__init__.py": "", "pkg.1": ".TH PKG 1\n"})
    test = new_file_patch("tests/test_man.py", "import os, sys\n\n\ndef test_man():\n"
                                               "    assert os.path.isfile(os.path.join(sys.prefix, 'man', 'man1', 'pkg.1'))\n")
    rec = record("data/data", base, {"f2p": ["tests/test_man.py::test_man"]}, test_patch=test)
    result = grade_custom(caches, rec, new_file_patch("NOTES", "a change\n"), env_setup="python -m pip install . pytest")
    assert result.completed and result.resolved, (result.error, result.output_tail)



def test_h_pips_isolated_builds_do_not_see_the_environment(caches, plain, tmp_path):
    """pip builds a project in an environment of its own, from its build requirements (pylint 2.15
    asks for setuptools~=62.6, 3.0 for ~=66.1). Its sitecustomize hides the interpreter's own
    site-packages, but not what a .pth there adds: the testbed's link to its environment must
    stand down inside a pip build (PYTHONPATH names pip-build-env-*), or the environment's
    setuptools builds in place of the project's (pylint 3.0 then installed as UNKNOWN-0.0.0)."""
    testbeds, _ = caches
    test = new_file_patch("tests/test_ok.py", "def test_ok():\n    pass\n")
    rec = record(*plain, {"f2p": ["tests/test_ok.py::test_ok"]}, test_patch=test)
    result = grade_custom(caches, rec, new_file_patch("NOTES", "a change\n"))
    assert result.completed and result.resolved, (result.error, result.output_tail)
    python = testbeds.root / result.testbed.key / "python" / "bin" / "python"
    where = "import setuptools; print(setuptools.__file__)"
    outside = subprocess.run([str(python), "-c", where], capture_output=True, text=True)
    assert outside.returncode == 0 and "/venv/" in outside.stdout, outside  # the environment's setuptools
    site = tmp_path / "pip-build-env-x1" / "site"
    site.mkdir(parents=True)
    inside = subprocess.run([str(python), "-c", where], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(site)})
    assert "/venv/" not in inside.stdout and "No module named 'setuptools'" in inside.stderr, inside
