"""Django, scikit-learn and matplotlib: their swebench 4.1.0 specs as our recipes, and grading them.

The spec tests read small fixture repositories that carry the files a spec reads (Django's
tests/requirements/py3.txt, matplotlib's environment.yml). The gradings (marked `swebench`; they
build real environments, minutes each) run on an instance rebuilt from its PyPI source release
(tests/rebuilt.py), a stand-in for the real clone:

- Django: its runner (tests/runtests.py with the test patch's labels) and its parser, in grading;
- scikit-learn: its Cython build on Python 3.6 with the spec's NumPy and SciPy;
- matplotlib: its build with the system's FreeType and Qhull, offline, and its baseline images."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gitfixtures import make_repo
from magis_ray.actors.execution.conda import pip_equivalent, with_wheel
from magis_ray.actors.execution.specs import END_OF_LIFE, SWEBENCH_ERA, instance_spec
from magis_ray.actors.execution.testbeds import (SystemPackagesMissing, _check_system_locales, _check_system_packages,
                                                 missing_system_packages, system_packages_of)

DJANGO_REQUIREMENTS = "asgiref >= 3.2\nargon2-cffi >= 16.1.0\npytz\nsqlparse\n"
MATPLOTLIB_ENVIRONMENT = """name: mpl-dev
channels:
  - conda-forge
dependencies:
  - cairocffi
  - numpy>=1.21
  - pygobject
  - pyqt
  - wxpython
  - graphviz
  - gtk4
  - pip
  - pip:
      - mpl-sphinx-theme
  - pytest!=4.6.0,!=5.4.0
"""


def record(repo: str, version: str, base: str, test_patch: str = "") -> dict:
    return {"repo": repo, "instance_id": f"{repo.split('/')[1]}-1", "base_commit": base, "environment_setup_commit": base,
            "version": version, "patch": "", "test_patch": test_patch, "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}


def touching(path: str) -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1,2 @@\n x = 1\n+y = 2\n"


@pytest.fixture(scope="module")
def fixture_repo(tmp_path_factory):
    path = tmp_path_factory.mktemp("big3") / "repo"
    _, commit = make_repo(path, {"tests/requirements/py3.txt": DJANGO_REQUIREMENTS, "environment.yml": MATPLOTLIB_ENVIRONMENT,
                                 "setup.py": "from setuptools import setup\nsetup()\n"})
    return path, commit


# --- the runner chosen from the spec -------------------------------------------------------------


def test_django_runs_its_own_runner_with_the_test_patch_s_labels(fixture_repo):
    path, commit = fixture_repo
    rec = record("django/django", "3.0", commit, touching("tests/queries/test_qs_combinators.py"))
    spec = instance_spec(rec, path)
    assert spec.test_command == "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 queries.test_qs_combinators"
    assert "sqlparse" in spec.recipe.requirements and spec.recipe.python == "3.6"
    assert spec.testbed.install == ("python -m pip install -e .",)


def test_scikit_learn_and_matplotlib_run_pytest_on_the_test_patch_s_files(fixture_repo):
    path, commit = fixture_repo
    sklearn = instance_spec(record("scikit-learn/scikit-learn", "0.21", commit, touching("sklearn/tests/test_base.py")), path)
    assert sklearn.test_command == "pytest -rA sklearn/tests/test_base.py"
    mpl = instance_spec(record("matplotlib/matplotlib", "3.7", commit, touching("lib/matplotlib/tests/test_axes.py")), path)
    assert mpl.test_command == "pytest -rA lib/matplotlib/tests/test_axes.py"


def test_django_s_parser_reads_its_runner_s_verbose_output(fixture_repo):
    path, commit = fixture_repo
    spec = instance_spec(record("django/django", "4.0", commit, touching("tests/queries/test_qs_combinators.py")), path)
    output = ("test_limits (queries.test_qs_combinators.QuerySetSetOperationTests) ... ok\n"
              "test_ordering_subqueries (queries.test_qs_combinators.QuerySetSetOperationTests) ... skipped "
              "\"Database doesn't support feature(s): supports_slicing_ordering_in_compound\"\n"
              "test_union_with_values_list_and_order (queries.test_qs_combinators.QuerySetSetOperationTests) ... FAIL\n"
              "Ensure the union keeps the order. ... ERROR\n")
    parsed = spec.parse(output)
    assert parsed["test_limits (queries.test_qs_combinators.QuerySetSetOperationTests)"] == "PASSED"
    assert parsed["test_ordering_subqueries (queries.test_qs_combinators.QuerySetSetOperationTests)"] == "SKIPPED"
    assert parsed["test_union_with_values_list_and_order (queries.test_qs_combinators.QuerySetSetOperationTests)"] == "FAILED"
    assert parsed["Ensure the union keeps the order."] == "ERROR"


# --- Django's locale -----------------------------------------------------------------------------


def test_django_s_locale_is_a_requirement_of_the_machine_not_a_step(fixture_repo):
    path, commit = fixture_repo
    three = instance_spec(record("django/django", "3.0", commit), path)
    assert three.testbed.system_locales == ("en_US.UTF-8",) and three.testbed.pre_install == ()
    assert any("locale-gen" in c for c in three.eval_commands)  # the harness's eval script keeps its own steps
    four = instance_spec(record("django/django", "4.0", commit), path)
    assert four.testbed.system_locales == ()
    # Django 1.x/2.x: apt-get install locales, then /etc/locale.gen and locale-gen, in its image
    old = instance_spec(record("django/django", "2.2", commit), path)
    assert old.testbed.system_packages == ("locales",) and old.testbed.system_locales == ("en_US.UTF-8",)
    assert old.testbed.pre_install == () and old.recipe.python == "3.5"


def test_a_missing_locale_is_named_with_the_commands_that_make_it():
    with pytest.raises(SystemPackagesMissing, match=r"needs the locale xx_XX\.UTF-8, which this machine has not generated "
                                                    r"\(.*sed -i '/\^# \*xx_XX\[\.\]UTF-8 /s/\^# \*//' /etc/locale\.gen && locale-gen\)"):
        _check_system_locales(("xx_XX.UTF-8",))
    _check_system_locales(("C.UTF-8",))  # every glibc has it


# --- scikit-learn's environments -----------------------------------------------------------------


def test_scikit_learn_0_2x_resolves_as_of_python_3_6_s_end_of_life(fixture_repo):
    """Its conda list on an end-of-life Python: conda's channels stopped building for 3.6 then, so
    Cython is 0.29 (its .pyx files need it), not the era's Cython 3."""
    path, commit = fixture_repo
    spec = instance_spec(record("scikit-learn/scikit-learn", "0.22", commit), path)
    assert spec.recipe.python == "3.6" and spec.recipe.uploaded_before == END_OF_LIFE["3.6"] < SWEBENCH_ERA
    assert spec.recipe.packages == ("numpy", "scipy", "cython", "pytest", "pandas", "matplotlib")
    assert "numpy==1.19.2" in spec.recipe.pip_packages and "scipy==1.5.2" in spec.recipe.pip_packages
    assert spec.testbed.install == ("python -m pip install -v --no-use-pep517 --no-build-isolation -e .",)
    # a requirements file or an environment.yml is pip's to resolve: the era's date
    assert instance_spec(record("django/django", "3.0", commit), path).recipe.uploaded_before == SWEBENCH_ERA


def test_scikit_learn_1_3_s_quoted_conda_pins_and_their_first_wheels(fixture_repo):
    path, commit = fixture_repo
    spec = instance_spec(record("scikit-learn/scikit-learn", "1.3", commit), path)
    assert spec.recipe.python == "3.9" and spec.recipe.uploaded_before == SWEBENCH_ERA
    # the spec writes 'numpy==1.19.2' with the shell's quotes; PyPI's first 3.9 wheels of those lines
    assert spec.recipe.packages[:3] == ("numpy==1.19.3", "scipy==1.5.3", "cython==3.0.10")
    assert "pandas<2.0.0" in spec.recipe.packages and not any("'" in p for p in spec.recipe.packages)
    assert with_wheel("numpy==1.19.2", "3.6") == "numpy==1.19.2"  # 3.6 has its wheel
    assert with_wheel("numpy==1.18.5", "3.9") == "numpy==1.18.5"  # another line: as asked
    assert with_wheel("numpy==1.19.4", "3.9") == "numpy==1.19.4"


# --- matplotlib's build and its system packages --------------------------------------------------


def test_matplotlib_builds_with_the_system_s_freetype_and_qhull(fixture_repo):
    path, commit = fixture_repo
    spec = instance_spec(record("matplotlib/matplotlib", "3.7", commit), path)
    testbed = spec.testbed
    assert not any("qhull" in c.lower() and "system_qhull" not in c for c in testbed.pre_install)  # no wget of Qhull
    assert testbed.pre_install[0].endswith("> mplsetup.cfg") and "system_freetype = True" in testbed.pre_install[0]
    assert testbed.system_packages == ("libfreetype-dev", "libqhull-dev", "pkg-config")
    assert "texlive" in spec.optional_packages and "ffmpeg" in spec.optional_packages
    assert not set(spec.optional_packages) & set(testbed.system_packages)
    # the 3.1-3.4 specs name libfreetype6-dev themselves, behind DEBIAN_FRONTEND=noninteractive
    older = instance_spec(record("matplotlib/matplotlib", "3.4", commit), path).testbed
    assert older.system_packages == ("libfreetype6-dev", "pkg-config", "libqhull-dev")


def test_the_pre_install_line_s_packages_behind_a_variable():
    assert system_packages_of("apt-get -y update && DEBIAN_FRONTEND=noninteractive apt-get install -y ffmpeg dvipng") == \
        ("ffmpeg", "dvipng")


def test_matplotlib_s_environment_yml_without_its_conda_only_gui_toolkits():
    mapped = pip_equivalent(MATPLOTLIB_ENVIRONMENT)
    assert mapped.packages == ("cairocffi", "numpy>=1.21", "PyQt5", "mpl-sphinx-theme", "pytest!=4.6.0,!=5.4.0")
    for name in ("pygobject", "wxpython", "graphviz", "gtk4"):
        assert any(note.startswith(f"{name}: ") for note in mapped.notes)


def test_a_missing_system_package_is_named_with_its_install_command():
    with pytest.raises(SystemPackagesMissing, match=r"needs system packages not on this machine: magis-no-such-package "
                                                    r"\(apt-get install magis-no-such-package\)"):
        _check_system_packages(("magis-no-such-package",))


@pytest.mark.skipif(missing_system_packages(("libfreetype-dev",)) != [], reason="Debian's libfreetype-dev is not installed")
def test_a_package_another_provides_is_not_missing():
    assert missing_system_packages(("libfreetype6-dev", "libfreetype-dev", "magis-no-such-package")) == ["magis-no-such-package"]
