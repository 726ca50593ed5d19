"""Environments made with uv and with pip, and testbeds on them: the same recipe gives the same
distributions at the same versions, on a Python both serve. Real builds from PyPI in the bubblewrap sandbox."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from execfixtures import pyproject
from gitfixtures import make_repo
from magis_ray.actors.execution.environments import EnvironmentCache, EnvironmentUnsupported, Recipe
from magis_ray.actors.execution.environments.installers import AUTO, PIP, UV, installer_for
from magis_ray.actors.execution.environments.interpreters import InterpreterMissing, find_python
from magis_ray.actors.execution.sandbox import GiB, bwrap_path
from magis_ray.actors.execution.testbeds import TestbedCache, TestbedRecipe
from magis_ray.actors.execution.testbeds.install_steps import PIP_INSTALL, uv_requirements, without_version_tags

PY = "3.11"
LISTING = ("import importlib.metadata as m, json; "
           "print(json.dumps(sorted({(d.metadata['Name'].lower().replace('_', '-'), d.version) for d in m.distributions()})))")


def distributions(venv: str) -> list[tuple[str, str]]:
    done = subprocess.run([str(Path(venv) / "bin" / "python"), "-c", LISTING], capture_output=True, text=True, check=True)
    return [tuple(item) for item in json.loads(done.stdout)]


def test_uv_serves_python_3_6_and_later_and_pip_the_older():
    assert installer_for("3.6.15") == UV and installer_for("3.13.0") == UV
    assert installer_for("3.5.10") == PIP and installer_for("2.7.18") == PIP
    assert installer_for("3.11.7", PIP) == PIP
    with pytest.raises(ValueError, match="uv cannot install into Python 2.7.18"):
        installer_for("2.7.18", UV)
    with pytest.raises(EnvironmentUnsupported, match="uv cannot install"):
        Recipe(python="2.7", installer=UV).key("2.7.18")


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")
def test_uv_and_pip_build_the_same_distributions_from_one_recipe(tmp_path):
    """A requirements file, packages and pip packages as of a date, with an exact pin released
    after it (six 1.17.0 of 2024-12-04 moves the date there) and one of the requirements file
    overridden by a later step's pin (iniconfig). Then a testbed on each, of a project asking for
    what the environment lacks (idna, tomli): on the uv environment uv installs them at the
    versions the date resolved and the spec's pip command installs the project alone; on the pip
    environment pip installs all. What the project adds is resolved as of the date by uv on the
    one and by a pip that knows dates on the other. The testbeds hold the same distributions too."""
    cache = EnvironmentCache(tmp_path / "envs")
    recipe = dict(python=PY, requirements="iniconfig\npluggy<2\n", packages=("attrs",),
                  pip_packages=("six==1.17.0", "iniconfig==1.1.1"), uploaded_before="2023-01-01T00:00:00Z")
    with_pip = cache.get(Recipe(**recipe, installer=PIP, label="pip"))
    with_uv = cache.get(Recipe(**recipe, label="auto"))
    assert (with_pip.installer, with_uv.installer) == (PIP, UV)
    assert with_pip.key != with_uv.key  # the installer is part of what the key names
    found = distributions(with_uv.venv)
    assert found == distributions(with_pip.venv)
    assert {("six", "1.17.0"), ("iniconfig", "1.1.1"), ("attrs", "24.2.0"), ("pip", "24.3.1")} <= set(found), found
    dated = (Path(with_uv.path) / "logs" / "era.log").read_text()
    assert "six==1.17.0 was released 2024-12-04" in dated and "resolved everything as of 2024-12-04" in dated
    assert with_uv.uploaded_before.startswith("2024-12-04")
    # uv's files come from its cache by hard links, and the modules are compiled as pip's are.
    attrs = next(Path(with_uv.venv).glob("lib/python*/site-packages/attr/__init__.py"))
    assert attrs.stat().st_nlink > 1
    assert list(attrs.parent.glob("__pycache__/__init__.*.pyc"))

    repo = tmp_path / "repos" / "dep__dep"
    _, commit = make_repo(repo, {"pyproject.toml": pyproject("dep", ["idna", "tomli"]), "dep/__init__.py": "import idna, tomli\n"})
    testbeds = TestbedCache(cache)
    made = {}
    for name, installer in (("pip", PIP), ("auto", AUTO)):
        testbed = testbeds.get(TestbedRecipe(env=Recipe(**recipe, installer=installer, label=name), repo="dep/dep",
                                             commit=commit, install=("python -m pip install -e .",)), repo)
        prefix, logs = Path(testbed.path) / "python", Path(testbed.path) / "logs"
        done = subprocess.run([str(prefix / "bin" / "python"), "-c", "import dep, idna; print(idna.__version__)"],
                              capture_output=True, text=True, cwd=Path(testbed.path) / "tree")
        assert done.stdout.strip() == "3.10", done.stderr  # the newest idna as of the date six's pin moved to
        made[name] = (distributions(str(prefix)), {log.name for log in logs.iterdir()}, (logs / "testbed.log").read_text())
    (pip_found, pip_logs, pip_notes), (uv_found, uv_logs, uv_notes) = made["pip"], made["auto"]
    assert uv_found == pip_found
    assert {("idna", "3.10"), ("dep", "0.1")} <= set(uv_found) and "tomli" in dict(uv_found), uv_found
    assert any(log.endswith("install-1-dependencies.log") for log in uv_logs), uv_logs
    assert "its 2 dependencies installed by uv at the resolved versions" in uv_notes
    assert "by uv, with the environment as it is" in uv_notes and "by pip, with the environment as it is" in pip_notes
    assert not any("dependencies" in log for log in pip_logs) and "installed by uv" not in pip_notes


@pytest.mark.slow
@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")
def test_uv_serves_python_3_6_whose_bytecode_the_environment_compiles_itself(tmp_path):
    """uv's own bytecode compiler needs Python 3.7 (py_compile.PycInvalidationMode): on 3.6 the
    environment's interpreter compiles what uv installed (Django 3.0's specs run 3.6)."""
    try:
        find_python("3.6")
    except InterpreterMissing:
        pytest.skip("no Python 3.6 on this machine")
    env = EnvironmentCache(tmp_path / "envs").get(Recipe(python="3.6", pip_packages=("six",), uploaded_before="2024-01-01T00:00:00Z"))
    assert env.installer == UV
    site = Path(env.venv) / "lib" / "python3.6" / "site-packages"  # no importlib.metadata before 3.8
    assert {"six-1.16.0.dist-info", "pip-21.3.1.dist-info", "setuptools-59.6.0.dist-info"} <= {p.name for p in site.iterdir()}
    assert (site / "__pycache__" / "six.cpython-36.pyc").is_file()


@pytest.mark.slow
@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")
def test_an_environment_uv_cannot_build_is_built_by_pip(tmp_path):
    """astropy 1.3's recipe: MarkupSafe 1.0 is an sdist whose setup.py imports setuptools' `Feature`
    (gone in setuptools 46), and the environment installs its era's setuptools 38.2.4 first. pip builds a
    project without pyproject.toml with the environment's own setuptools; uv builds every sdist
    in isolation with setuptools >= 40.8, which the date does not offer. So "auto" tries uv, then
    builds the environment with pip, and says so."""
    try:
        find_python("3.6")
    except InterpreterMissing:
        pytest.skip("no Python 3.6 on this machine")
    env = EnvironmentCache(tmp_path / "envs").get(Recipe(
        python="3.6", packages=("setuptools==38.2.4",), pip_packages=("MarkupSafe==1.0",), uploaded_before="2017-12-26T00:00:00Z"))
    assert env.installer == PIP
    site = Path(env.venv) / "lib" / "python3.6" / "site-packages"
    assert {"MarkupSafe-1.0-py3.6.egg-info", "setuptools-38.2.4.dist-info"} & {p.name for p in site.iterdir()}, sorted(p.name for p in site.iterdir())
    done = subprocess.run([str(Path(env.venv) / "bin" / "python"), "-c", "import markupsafe; print(markupsafe.__version__)"],
                          capture_output=True, text=True)
    assert done.stdout.strip() == "1.0", done.stderr
    assert "uv could not build this environment, so pip built it" in (Path(env.path) / "logs" / "installer.log").read_text()
    assert any("markupsafe" in log.read_text().lower() for log in (Path(env.path) / "uv-logs").glob("*.log"))


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")
def test_a_build_goes_on_when_another_entry_of_the_cache_goes_away(tmp_path):
    """A uv build shows the node's other cache entries read-only; one removed while the build runs
    (another build's failure, the cache's bound) does not fail the build's later steps."""
    from magis_ray.actors.execution.environments.installers import UvInstaller
    from magis_ray.actors.execution.sandbox import Limits, BubblewrapSandbox

    root = tmp_path / "envs"
    (root / "other-environment").mkdir(parents=True)
    (root / "building").mkdir()
    (root / "building").chmod(0o777)  # the builds' uid writes in it
    mounts = UvInstaller(root, root / "pip-cache").mounts(root / "building")
    assert any(m.source == str(root / "other-environment") and not m.writable for m in mounts)
    shutil.rmtree(root / "other-environment")
    outcome = BubblewrapSandbox().run(f"touch {root}/building/step-ran", cwd="/", mounts=mounts, limits=Limits(wall_seconds=120, memory_bytes=8 * GiB), build=True)
    assert outcome.ok, outcome.output
    assert (root / "building" / "step-ran").is_file()


def test_every_pip_install_of_swebench_s_specs_is_resolved_by_uv_with_the_project_by_its_own_path():
    """uv resolves a testbed's install step from its arguments: the spec table's every pip install
    translates (verbosity and pip's choice of build interface dropped), the project named by the
    tree's path; an argument it does not know leaves the resolution to pip."""
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

    tree = Path("/cache/testbeds/KEY/tree")
    commands = {command for versions in MAP_REPO_VERSION_TO_SPECS.values() for spec in versions.values()
                for command in ([spec["install"]] if isinstance(spec.get("install"), str) else [])
                if PIP_INSTALL.match(command)}
    assert len(commands) >= 8
    for command in commands:
        assert uv_requirements(PIP_INSTALL.match(command).group(1), tree) is not None, command
    assert uv_requirements("-v --no-use-pep517 --no-build-isolation -e .", tree) == \
        ([str(tree)], ("--no-build-isolation",))
    # the project resolved as installed: an editable one's metadata needs PEP 660 hooks
    assert uv_requirements("-e '.[dev]'", tree) == ([f"{tree}[dev]"], ())
    vcs = "git+https://example.org/lib#egg=lib"
    assert uv_requirements(f"-e {vcs}", tree) == ([f"-e {vcs}"], ())
    assert uv_requirements(".", tree) == ([str(tree)], ())
    assert uv_requirements("-r requirements.txt", tree) is None
    assert uv_requirements("-e 'unclosed", tree) is None


def test_a_setup_cfg_that_tags_the_version_is_read_by_uv_without_its_tags():
    """sphinx's setup.cfg until 2023: only [egg_info]'s tags go, whatever else the file says."""
    sphinx = ("[metadata]\nlicense_files = LICENSE\n\n[egg_info]\ntag_build = .dev\nTag-Date = true\n\n"
              "[aliases]\nrelease = egg_info -Db ''\n\n[flake8]\ntag_date = not egg_info's\n")
    assert without_version_tags(sphinx) == ("[metadata]\nlicense_files = LICENSE\n\n[egg_info]\n\n"
                                            "[aliases]\nrelease = egg_info -Db ''\n\n[flake8]\ntag_date = not egg_info's\n")
    assert without_version_tags("[metadata]\nname = calc\n[egg_info]\negg_base = build\n") is None
    # boilerplate that tags nothing stays as it is
    assert without_version_tags("[egg_info]\ntag_build =\ntag_date = 0\n") is None
