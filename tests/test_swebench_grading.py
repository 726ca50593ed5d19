"""SWE-bench's own specs for the dev instances and for the repositories users grade (read from the
swebench package and the fetched repositories), and, on demand (MAGIS_SWEBENCH=1: it builds real
environments), real grading of gold and empty patches."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from magis_ray.actors.execution.specs import SWEBENCH_ERA, instance_spec

DATASET = Path(__file__).resolve().parents[2] / "shared" / "swebench" / "lite-dev.jsonl"
TUNING = DATASET.with_name("verified-tuning.jsonl")
REPOS = Path(os.environ.get("MAGIS_REPOS_DIR", "/work/repos"))
pytestmark = pytest.mark.skipif(not DATASET.is_file() or not REPOS.is_dir(), reason="the dev dataset or the fetched repositories are absent")


def records(dataset: Path = DATASET) -> dict[str, dict]:
    return {r["instance_id"]: r for r in map(json.loads, dataset.read_text().splitlines())}


def repo_of(record: dict, required: bool = True) -> Path:
    """The record's repository in REPOS; the test is skipped when it reads one not fetched there."""
    path = REPOS / record["repo"].replace("/", "__")
    if required and not path.is_dir():
        pytest.skip(f"{record['repo']} is not fetched into {REPOS}")
    return path


def test_specs_come_from_the_swebench_package_and_the_repository():
    recs = records()
    sqlfluff = instance_spec(recs["sqlfluff__sqlfluff-1625"], repo_of(recs["sqlfluff__sqlfluff-1625"]))
    assert sqlfluff.recipe.python == "3.9" and sqlfluff.testbed.install == ("python -m pip install -e .",)
    assert "pytest" in sqlfluff.recipe.requirements  # requirements_dev.txt at the setup commit, read from git
    assert sqlfluff.testbed.commit == recs["sqlfluff__sqlfluff-1625"]["base_commit"]  # installed at the base commit
    assert sqlfluff.test_command.startswith("pytest -rA test/") and sqlfluff.recipe.uploaded_before == SWEBENCH_ERA
    pvlib = instance_spec(recs["pvlib__pvlib-python-1072"], repo_of(recs["pvlib__pvlib-python-1072"]))
    assert pvlib.recipe.packages == ("pandas", "scipy")  # the spec's conda list, as pip packages
    assert "matplotlib" in pvlib.recipe.pip_packages and not pvlib.recipe.unsupported
    pydicom = instance_spec(recs["pydicom__pydicom-901"], repo_of(recs["pydicom__pydicom-901"]))
    assert pydicom.recipe.python == "3.6"
    pyvista = instance_spec(recs["pyvista__pyvista-4315"], repo_of(recs["pyvista__pyvista-4315"], required=False))
    assert pyvista.recipe.unsupported.startswith("no requirements file") or pyvista.testbed.system_packages
    parsed = sqlfluff.parse("PASSED test/a.py::test_x\nFAILED test/a.py::test_y - assert 1\n")
    assert parsed == {"test/a.py::test_x": "PASSED", "test/a.py::test_y": "FAILED"}



@pytest.mark.skipif(not TUNING.is_file(), reason="the verified-tuning dataset is absent")
def test_the_specs_of_the_repositories_users_grade():
    """The harness's steps for the repositories of Lite test, as the swebench package gives them."""
    from magis_ray.actors.execution.environments.dated import Stages

    recs = records(TUNING)

    def spec(instance_id):
        return instance_spec(recs[instance_id], repo_of(recs[instance_id]))

    # A: flask pins setuptools==70.0.0, released after the environments' date; it wins over the date.
    flask = spec("pallets__flask-5014").recipe
    assert "setuptools==70.0.0" in Stages(flask.requirements, flask.packages, flask.pip_packages).pins()
    # D: sphinx's and astropy's pre-install steps are file edits, run; an apt-get is a system package.
    sphinx = spec("sphinx-doc__sphinx-10323").testbed
    assert sphinx.pre_install == ("sed -i 's/pytest/pytest -rA/' tox.ini",) and not sphinx.system_packages
    graphviz = next(spec(i).testbed for i in recs if recs[i]["repo"] == "sphinx-doc/sphinx" and recs[i]["version"] == "7.2")
    assert graphviz.system_packages == ("graphviz",) and all("apt-get" not in c for c in graphviz.pre_install)
    astropy = spec("astropy__astropy-13033").testbed
    assert astropy.pre_install and astropy.pre_install[0].startswith("sed -i") and not astropy.env.unsupported
    # F: xarray's environment.yml, as pip packages.
    xarray = spec("pydata__xarray-2905").recipe
    assert not xarray.unsupported and "matplotlib" in xarray.packages and "netCDF4" in xarray.packages
    assert not any(p.startswith(("cdms2", "hdf5", "cfgrib", "python", "pip")) for p in xarray.packages)
    # G: the install runs at each instance's own base commit; the environment is the version's.
    one, other = (spec(i) for i in ("pylint-dev__pylint-4551", "pylint-dev__pylint-4604"))
    assert one.testbed.commit == recs["pylint-dev__pylint-4551"]["base_commit"] != other.testbed.commit
    # C: pytest's install (setuptools_scm writes src/_pytest/_version.py) is a testbed step.
    assert spec("pytest-dev__pytest-10051").testbed.install == ("python -m pip install -e .",)


def test_a_run_of_a_swebench_issue_tests_in_the_spec_s_environment():
    """A run's issue carries no test patch; its bench still takes the spec's environment and
    testbed, the very ones grading builds; where the install brings no pytest (sympy's runner is
    bin/test) pytest goes into the testbed, never into the shared environment."""
    from magis_ray.actors.runtime.bench import BenchSetup, recipe_of, with_pytest
    from magis_ray.events.settings import RunSettings

    def of(record):
        kept = {k: record[k] for k in ("repo", "instance_id", "base_commit", "version", "environment_setup_commit")}
        spec, _inference = recipe_of(BenchSetup(record=kept, repo_path=str(repo_of(record, required=False)), settings=RunSettings()))
        return spec

    recs = records()
    sqlfluff = of(recs["sqlfluff__sqlfluff-1625"])
    assert sqlfluff.testbed == instance_spec(recs["sqlfluff__sqlfluff-1625"], repo_of(recs["sqlfluff__sqlfluff-1625"])).testbed
    sympy = of({"repo": "sympy/sympy", "instance_id": "sympy__sympy-1", "base_commit": "0" * 40, "version": "1.1",
                "environment_setup_commit": "0" * 40})
    assert (sympy.recipe.label, sympy.recipe.python) == ("sympy/sympy 1.1", "3.9")
    added = with_pytest(sympy)
    assert added.recipe == sympy.recipe and added.testbed.install[-1] == "python -m pip install pytest"


@pytest.mark.swebench
@pytest.mark.skipif(not os.environ.get("MAGIS_SWEBENCH"), reason="builds real SWE-bench environments: MAGIS_SWEBENCH=1")
@pytest.mark.parametrize("instance_id", ["marshmallow-code__marshmallow-1343", "pydicom__pydicom-1256"])
def test_gold_resolves_and_empty_does_not(instance_id):
    from magis_ray.actors.execution.environments import EnvironmentCache
    from magis_ray.actors.execution.runner import TestRunner
    from magis_ray.actors.swebench.grading import grade

    record = records()[instance_id]
    from magis_ray.actors.execution.testbeds import TestbedCache
    from magis_ray.actors.swebench.grading import grading_limits

    testbeds, runner = TestbedCache(EnvironmentCache()), TestRunner(limits=grading_limits(1800, 8 * 1024 ** 3))
    gold = grade(record, record["patch"], REPOS, testbeds, runner)
    empty = grade(record, "", REPOS, testbeds, runner, run_empty=True)
    assert gold.resolved and not gold.error_step
    assert not empty.resolved and empty.tests_status.fail_to_pass.failure == json.loads(record["FAIL_TO_PASS"])
