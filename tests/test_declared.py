"""What a project declares for its tests, read from real files in a folder or at a commit of a real
git repository: each place in its order, the test entries over the dev ones, the Python, pytest's
pin, and one problem line (never an exception) for each thing that cannot be read."""
from __future__ import annotations

import textwrap
from pathlib import Path

from gitfixtures import commit_files, make_repo

from magis_ray.actors.code.repository import RepoSnapshot
from magis_ray.actors.execution.environments.declared import DEV, TEST, files_in_folder, files_in_snapshot, read_declared

PYTHONS = ("3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12", "3.13")


def declared_in(folder: Path, files: dict[str, str], pythons=PYTHONS):
    for path, text in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(textwrap.dedent(text))
    read, listdir = files_in_folder(folder)
    return read_declared(read, listdir, pythons=pythons)


def source(declared, name):
    found = [s for s in declared.sources if s.name == name]
    assert found, f"no source {name!r} among {[s.name for s in declared.sources]}"
    return found[0]


PROJECT = """\
    [build-system]
    requires = ["hatchling"]
    build-backend = "hatchling.build"

    [project]
    name = "Demo_Pkg"
    version = "1"
    requires-python = ">=3.8"
"""


# --- 1. dependency groups ---------------------------------------------------------------------------


def test_the_tests_group_is_resolved_through_its_include_groups_and_the_dev_group_is_left(tmp_path):
    declared = declared_in(tmp_path, {"pyproject.toml": PROJECT + """
        [dependency-groups]
        cov = ["coverage[toml]>=7"]
        tests = [{include-group = "cov"}, "hypothesis", "pytest>=8,<9", "shades @ https://example.invalid/s.zip"]
        dev = [{include-group = "tests"}, "ruff"]
        docs = ["sphinx"]
    """})
    tests = source(declared, "pyproject.toml [dependency-groups] tests")
    assert tests.role == TEST and tests.chosen
    assert tests.requirements == ("coverage[toml]>=7", "hypothesis", "pytest<9,>=8")
    dev = source(declared, "pyproject.toml [dependency-groups] dev")
    assert dev.role == DEV and not dev.chosen and "ruff" in dev.requirements
    assert not [s for s in declared.sources if "docs" in s.name]
    assert declared.install_args == ("-e", ".", "coverage[toml]>=7", "hypothesis", "pytest<9,>=8")
    assert declared.pytest == "pytest<9,>=8"
    assert declared.project_name == "demo-pkg" and declared.build_backend == "hatchling.build"
    # dev includes tests, so both say so
    assert declared.problems == tuple(
        f"pyproject.toml [dependency-groups] {group}: shades from https://example.invalid/s.zip left out (not from a package index)"
        for group in ("tests", "dev"))


def test_a_dev_group_is_taken_when_nothing_is_named_for_tests(tmp_path):
    declared = declared_in(tmp_path, {"pyproject.toml": PROJECT + """
        [dependency-groups]
        dev = ["pytest", "mypy"]
        lint = ["ruff"]
    """})
    assert [s.name for s in declared.chosen()] == ["pyproject.toml [dependency-groups] dev"]
    assert declared.requirements == ("pytest", "mypy")


def test_test_something_groups_count_when_no_group_is_plainly_named_for_tests(tmp_path):
    declared = declared_in(tmp_path, {"pyproject.toml": PROJECT + """
        [dependency-groups]
        test-base = ["pytest>=9"]
        test-unit = [{include-group = "test-base"}, "attrs"]
        test-typing = [{include-group = "test-base"}, "mypy"]
        unit-tests = ["msgpack"]
    """})
    assert [s.name.split()[-1] for s in declared.chosen()] == ["test-base", "test-unit", "unit-tests"]
    assert "mypy" not in declared.requirements
    assert declared.requirements == ("pytest>=9", "attrs", "msgpack")


def test_an_include_group_cycle_is_one_problem_and_the_other_places_are_still_read(tmp_path):
    declared = declared_in(tmp_path, {"pyproject.toml": PROJECT + """
        [dependency-groups]
        tests = [{include-group = "more"}, "pytest"]
        more = [{include-group = "tests"}]

        [project.optional-dependencies]
        testing = ["hypothesis"]
    """})
    assert [p for p in declared.problems if "Cyclic dependency group include" in p and "tests" in p]
    assert not [s for s in declared.sources if s.kind == "dependency-groups"]
    assert declared.extras == ("testing",) and declared.install_args == ("-e", ".[testing]")


# --- 2. extras --------------------------------------------------------------------------------------


def test_extras_install_with_the_project_and_an_extra_naming_the_project_brings_its_extras(tmp_path):
    declared = declared_in(tmp_path, {"pyproject.toml": PROJECT + """
        [project.optional-dependencies]
        tests = ["demo-pkg[speedups]", "pytest>=7,<8; python_version >= '3.8'", "pytest<7; python_version < '3.8'"]
        speedups = ["orjson"]
        dev = ["demo_pkg[tests]", "pre-commit"]
    """})
    tests = source(declared, "pyproject.toml [project.optional-dependencies] tests")
    assert tests.chosen and tests.through_extras and tests.extras == ("tests", "speedups")
    assert declared.install_args == ("-e", ".[tests,speedups]")  # the lines come with the extras
    assert declared.requirements == ()
    assert declared.pytest == "pytest>=7,<8"  # the marker for Python 3.13 decides which line counts
    assert not source(declared, "pyproject.toml [project.optional-dependencies] dev").chosen


def test_setuptools_dynamic_extras_are_read_from_their_files(tmp_path):
    declared = declared_in(tmp_path, {
        "pyproject.toml": """\
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "demo"
            version = "1"
            dynamic = ["optional-dependencies"]
            [tool.setuptools.dynamic]
            optional-dependencies.test = {file = ["deps/testing.in"]}
        """,
        "deps/testing.in": "pytest==8.2.0\nfreezegun\n",
    })
    extra = source(declared, "pyproject.toml [tool.setuptools.dynamic] optional-dependencies test")
    assert extra.requirements == ("pytest==8.2.0", "freezegun")
    assert declared.install_args == ("-e", ".[test]") and declared.pytest == "pytest==8.2.0"


# --- 3. requirement files -------------------------------------------------------------------------


def test_requirement_files_follow_r_and_c_relative_to_the_file_and_keep_options_out(tmp_path):
    declared = declared_in(tmp_path, {
        "pyproject.toml": PROJECT,
        "requirements/tests.txt": """\
            # pinned by pip-compile
            --index-url https://example.invalid/simple
            -r base.txt
            -c ../constraints.txt
            -e .[cli]
            pytest==8.1.1 \\
                --hash=sha256:0000000000000000000000000000000000000000000000000000000000000000
            trio>=0.25  # the async tests
            git+https://github.com/x/y.git#egg=y
            ${TOKEN}
        """,
        "requirements/base.txt": "idna\n--pre\n",
        "constraints.txt": "trio<0.26\n",
        "requirements/docs.txt": "sphinx\n",
    })
    tests = source(declared, "requirements/tests.txt")
    assert tests.role == TEST and tests.chosen
    assert tests.files == ("requirements/tests.txt", "requirements/base.txt", "constraints.txt")
    assert tests.requirements == ("idna", "pytest==8.1.1", "trio>=0.25")
    assert tests.constraints == ("trio<0.26",) and tests.extras == ("cli",)
    assert declared.install_args == ("-e", ".[cli]", "idna", "pytest==8.1.1", "trio>=0.25")
    assert declared.constraints == ("trio<0.26",)
    assert any("git+https://github.com/x/y.git" in p and "package index" in p for p in declared.problems)
    assert any("${TOKEN}" in p for p in declared.problems)
    assert not [s for s in declared.sources if "docs" in s.name]


def test_an_r_loop_is_cut_with_one_problem(tmp_path):
    declared = declared_in(tmp_path, {
        "test-requirements.txt": "-r dev-requirements.txt\npytest\n",
        "dev-requirements.txt": "-r test-requirements.txt\nblack\n",
    })
    tests = source(declared, "test-requirements.txt")
    assert tests.requirements == ("black", "pytest") and tests.files == ("test-requirements.txt", "dev-requirements.txt")
    assert any("included again" in p and "the loop is cut" in p for p in declared.problems)
    assert not declared.installable and declared.install_args == ("black", "pytest")


def test_a_root_requirements_txt_counts_only_when_it_names_pytest(tmp_path):
    runtime_only = declared_in(tmp_path / "a", {"setup.py": "from setuptools import setup\nsetup(name='a')\n",
                                                "requirements.txt": "requests\n"})
    assert runtime_only.sources == () and runtime_only.install_args == ("-e", ".")
    dev = declared_in(tmp_path / "b", {"setup.py": "from setuptools import setup\nsetup(name='b')\n",
                                       "requirements.txt": "-e .[http2]\nmkdocs\n-r tests/requirements.txt\n",
                                       "tests/requirements.txt": "pytest\ntrio\n"})
    assert source(dev, "requirements.txt").role == DEV
    # the test folder's file is a test entry, so the dev file is not installed
    assert [s.name for s in dev.chosen()] == ["tests/requirements.txt"]
    assert dev.install_args == ("-e", ".", "pytest", "trio")


def test_a_variant_file_is_taken_only_when_its_folder_has_no_plain_one(tmp_path):
    both = declared_in(tmp_path / "a", {"requirements/tests.txt": "pytest\n", "requirements/tests-min.txt": "pytest==6.0\n"})
    assert [s.name for s in both.sources] == ["requirements/tests.txt"]
    only = declared_in(tmp_path / "b", {"requirements/tests-py38.txt": "pytest<8\n"})
    assert [s.name for s in only.sources] == ["requirements/tests-py38.txt"]


# --- 4. tox -------------------------------------------------------------------------------------------


def test_tox_ini_substitutions_file_references_and_factor_conditions(tmp_path):
    declared = declared_in(tmp_path, {
        "setup.py": "from setuptools import setup\nsetup(name='demo', python_requires='>=3.8')\n",
        "tox.ini": """\
            [tox]
            envlist = lint, py3{8,13}-{tests,slow}

            [base]
            deps =
                pytest>=7
                -r{toxinidir}/requirements/extra.txt

            [testenv]
            deps =
                {[base]deps}
                py38: importlib-metadata
                py313: tomli-w
                !py313: tomli
                slow: pytest-timeout
                tests,cov: pytest-cov
            extras = {env:DEMO_EXTRAS:speedups}
            commands = pytest {posargs:tests}

            [testenv:lint]
            deps = ruff
            commands = ruff check
        """,
        "requirements/extra.txt": "hypothesis\n",
    })
    tox = source(declared, "tox.ini [testenv]")
    assert tox.role == TEST and tox.chosen
    # the environment is py313-tests: its own factors and the chosen Python's decide the lines
    assert tox.requirements == ("pytest>=7", "hypothesis", "tomli-w", "pytest-cov")
    assert tox.extras == ("speedups",) and tox.files == ("requirements/extra.txt",)
    assert declared.python == "3.13" and declared.pytest == "pytest>=7"


def test_a_version_two_places_give_differently_is_the_earlier_place_s(tmp_path):
    """requests of 2021: tox installs requirements-dev.txt (pytest-httpbin==1.0.0), setup.py's
    tests_require says 0.0.7. Both are test entries; held together, no resolution exists."""
    declared = declared_in(tmp_path, {
        "setup.py": "from setuptools import setup\nsetup(name='requests', tests_require=['pytest-httpbin==0.0.7', "
                    "'pytest-mock', 'pytest>=3'])\n",
        "tox.ini": "[testenv]\ndeps = -rrequirements-dev.txt\ncommands = pytest tests\n",
        "requirements-dev.txt": "pytest>=2.8.0,<=6.2.5\npytest-httpbin==1.0.0\npytest-mock==2.0.0\n",
    })
    assert {s.name for s in declared.chosen()} == {"tox.ini [testenv]", "setup.py tests_require"}
    assert declared.requirements == ("pytest<=6.2.5,>=2.8.0", "pytest-httpbin==1.0.0", "pytest-mock==2.0.0", "pytest-mock",
                                     "pytest>=3")
    assert "setup.py tests_require: pytest-httpbin==0.0.7 left out: tox.ini [testenv] asks for pytest-httpbin==1.0.0" \
        in declared.problems
    # limits that can hold together stay, from one place or two; one under another marker is its own
    other = declared_in(tmp_path / "b", {
        "setup.py": "from setuptools import setup\nsetup(name='b', tests_require=['attrs>=20', 'mock<4', "
                    "'mock<4; python_version < \"3.6\"'])\n",
        "tox.ini": "[testenv]\ndeps =\n    mock==4.0\n    attrs\n    pytest>=3\n    pytest<6\ncommands = pytest\n",
    })
    assert other.requirements == ("mock==4.0", "attrs", "pytest>=3", "pytest<6", "attrs>=20", 'mock<4; python_version < "3.6"')
    assert [p for p in other.problems if "left out" in p] == [
        "setup.py tests_require: mock<4 left out: tox.ini [testenv] asks for mock==4.0"]


def test_a_tox_environment_section_is_found_through_its_braces_and_its_commands_installs(tmp_path):
    declared = declared_in(tmp_path, {
        "pyproject.toml": PROJECT + """
            [project.optional-dependencies]
            d = ["aiohttp"]
            [dependency-groups]
            cov-tests = ["pytest", "coverage"]
        """,
        "tox.ini": """\
            [tox]
            env_list = 3.1{0-3}-tests, docs

            [testenv]
            deps = sphinx
            commands = sphinx-build docs

            [testenv:3.1{0,3}-tests]
            skip_install = true
            dependency_groups = cov-tests
            commands =
                pip install -e .[d] --no-deps
                - python -m pip install "trustme>=1" -c constraints.txt
                coverage run -m pytest {posargs}
        """,
        "constraints.txt": "trustme==1.1.0\n",
    })
    tox = source(declared, "tox.ini [testenv:3.1{0,3}-tests]")
    # deps it does not set itself come from [testenv], as in tox; tox installs no project here
    # (skip_install), its commands do, with the extra
    assert tox.requirements == ("sphinx", "pytest", "coverage", "trustme>=1") and tox.extras == ("d",)
    assert tox.constraints == ("trustme==1.1.0",)
    # the cov-tests group is a test entry of its own, read first
    assert source(declared, "pyproject.toml [dependency-groups] cov-tests").chosen
    assert declared.install_args == ("-e", ".[d]", "pytest", "coverage", "sphinx", "trustme>=1")


def test_a_tox_environment_that_runs_poetry_install_takes_poetry_s_test_group(tmp_path):
    declared = declared_in(tmp_path, {
        "pyproject.toml": """\
            [tool.poetry]
            name = "demo"
            version = "1"
            [tool.poetry.dependencies]
            python = "^3.9"
            [tool.poetry.group.test.dependencies]
            pytest = "^7.1.2"
            [tool.poetry.group.docs.dependencies]
            mkdocs = "*"
            [build-system]
            requires = ["poetry-core"]
            build-backend = "poetry.core.masonry.api"
        """,
        "tox.ini": "[testenv]\ndeps = poetry\ncommands =\n    poetry install -v\n    poetry run pytest tests/\n",
    })
    tox = source(declared, "tox.ini [testenv]")
    assert tox.requirements == ("pytest>=7.1.2,<8.0",)  # not poetry itself, not the docs group
    assert declared.requires_python == "<4.0,>=3.9" and declared.python == "3.13"


def test_tox_toml_env_run_base_with_groups_and_a_replaced_reference(tmp_path):
    declared = declared_in(tmp_path, {
        "pyproject.toml": PROJECT + '\n[dependency-groups]\ntest = ["pytest>=9"]\n',
        "tox.toml": """\
            env_list = ["3.13", "lint"]
            [env_run_base]
            deps = ["pytest-mock", "-r {tox_root}/requirements/more.txt"]
            extras = ["trio"]
            dependency_groups = ["test"]
            commands = [["pytest", { replace = "posargs", default = ["tests"], extend = true }]]
            [env.lint]
            deps = [{ replace = "ref", of = ["env_run_base", "deps"] }, "ruff"]
            commands = [["ruff", "check"]]
        """,
        "requirements/more.txt": "hypothesis\n",
    })
    tox = source(declared, "tox.toml [env_run_base]")
    assert tox.requirements == ("pytest-mock", "hypothesis", "pytest>=9") and tox.extras == ("trio",)
    assert declared.problems == ()


def test_legacy_tox_ini_in_pyproject_and_tox_in_setup_cfg(tmp_path):
    legacy = declared_in(tmp_path / "a", {"pyproject.toml": PROJECT + '''
        [tool.tox]
        legacy_tox_ini = """
        [testenv]
        deps = pytest<8
        commands = pytest
        """
    '''})
    assert source(legacy, "pyproject.toml [tool.tox] legacy_tox_ini [testenv]").requirements == ("pytest<8",)
    in_setup_cfg = declared_in(tmp_path / "b", {
        "setup.py": "from setuptools import setup\nsetup()\n",
        "setup.cfg": "[metadata]\nname = demo\n[tox:tox]\nenvlist = py311\n[testenv]\ndeps = pytest\ncommands = pytest\n",
    })
    assert source(in_setup_cfg, "setup.cfg [testenv]").requirements == ("pytest",)


# --- 5. hatch, pdm, poetry ----------------------------------------------------------------------------


def test_hatch_s_test_environment_over_its_default_template(tmp_path):
    declared = declared_in(tmp_path, {"pyproject.toml": PROJECT + """
        [project.optional-dependencies]
        i18n = ["babel"]
        [tool.hatch.envs.default]
        dependencies = ["coverage"]
        [tool.hatch.envs.test]
        extra-dependencies = ["pytest-xdist"]
        features = ["i18n"]
        [tool.hatch.envs.docs]
        dependencies = ["mkdocs"]
    """})
    test = source(declared, "pyproject.toml [tool.hatch.envs.test]")
    assert test.requirements == ("coverage", "pytest-xdist") and test.extras == ("i18n",) and test.chosen
    assert not source(declared, "pyproject.toml [tool.hatch.envs.default]").chosen
    assert declared.install_args == ("-e", ".[i18n]", "coverage", "pytest-xdist")


def test_pdm_dev_dependencies_with_the_project_itself_as_an_editable_line(tmp_path):
    declared = declared_in(tmp_path, {"pyproject.toml": PROJECT + """
        [project.optional-dependencies]
        toc = ["python-slugify"]
        [tool.pdm.dev-dependencies]
        test = ["pytest>=6.1", "-e file:///${PROJECT_ROOT}/#egg=demo-pkg[toc]", "-e ../elsewhere"]
        doc = ["sphinx"]
    """})
    test = source(declared, "pyproject.toml [tool.pdm.dev-dependencies] test")
    assert test.requirements == ("pytest>=6.1",) and test.extras == ("toc",)
    assert any("../elsewhere" in p for p in declared.problems)
    assert declared.install_args == ("-e", ".[toc]", "pytest>=6.1")


def test_poetry_constraints_become_pep_440(tmp_path):
    declared = declared_in(tmp_path, {"pyproject.toml": """\
        [tool.poetry]
        name = "demo"
        version = "1"
        [tool.poetry.dependencies]
        python = "~3.8"
        [tool.poetry.group.dev.dependencies]
        a = "^1.2.3"
        b = "^0.2"
        c = "^0.0.3"
        d = "~1.2"
        e = "1.2.*"
        f = "2.0.1"
        g = ">=1.2 <2.0"
        h = "^2.0 || ^3.1"
        i = "*"
        j = { version = "^4.0", extras = ["x", "y"], python = ">=3.8,<3.11", markers = "sys_platform == 'linux'" }
        k = [{ version = "^1.0", python = "<3.9" }, { version = "^2.0", python = ">=3.9" }]
        l = { git = "https://github.com/x/l.git" }
        m = "^~1"
        [build-system]
        requires = ["poetry-core"]
        build-backend = "poetry.core.masonry.api"
    """})
    dev = source(declared, "pyproject.toml [tool.poetry.group.dev.dependencies]")
    assert dev.requirements == (
        "a>=1.2.3,<2.0", "b>=0.2,<0.3", "c>=0.0.3,<0.0.4", "d>=1.2,<1.3", "e==1.2.*", "f==2.0.1", "g>=1.2,<2.0",
        "h>=2.0,<4.0", "i",
        'j[x,y]>=4.0,<5.0; (sys_platform == \'linux\') and (python_version >= "3.8" and python_version < "3.11")',
        'k>=1.0,<2.0; (python_version < "3.9")', 'k>=2.0,<3.0; (python_version >= "3.9")',
    )
    assert any("l from git" in p for p in declared.problems) and any("'^~1'" in p for p in declared.problems)
    assert declared.requires_python == "<3.9,>=3.8" and declared.python == "3.8"


def test_poetry_s_legacy_dev_dependencies_are_a_dev_entry(tmp_path):
    declared = declared_in(tmp_path, {"pyproject.toml": """\
        [tool.poetry]
        name = "demo"
        version = "1"
        [tool.poetry.dev-dependencies]
        pytest = "^7.0"
        [build-system]
        requires = ["poetry-core"]
        build-backend = "poetry.core.masonry.api"
    """})
    legacy = source(declared, "pyproject.toml [tool.poetry.dev-dependencies]")
    assert legacy.role == DEV and legacy.chosen and declared.pytest == "pytest>=7.0,<8.0"


# --- 6. setup.cfg and setup.py -------------------------------------------------------------------------


def test_setup_cfg_extras_python_requires_and_setup_requires(tmp_path):
    declared = declared_in(tmp_path, {
        "setup.py": "from setuptools import setup\nsetup()\n",
        "setup.cfg": """\
            [metadata]
            name = demo
            [options]
            python_requires = >=3.7, <3.11
            setup_requires =
                setuptools_scm
            [options.extras_require]
            testing =
                pytest>=6
                pytest-benchmark
            dev =
                pre-commit
        """,
    })
    testing = source(declared, "setup.cfg [options.extras_require] testing")
    assert testing.requirements == ("pytest>=6", "pytest-benchmark") and testing.chosen
    # what setuptools would fetch itself, at today's release, is installed with the rest, as of the date
    assert source(declared, "setup.cfg [options] setup_requires").chosen
    assert declared.install_args == ("-e", ".[testing]", "setuptools_scm") and declared.requirements == ("setuptools_scm",)
    assert declared.requires_python_from == "setup.cfg [options] python_requires" and declared.python == "3.10"


def test_setup_py_is_read_as_a_syntax_tree_and_never_run(tmp_path):
    marker = tmp_path / "ran"
    declared = declared_in(tmp_path, {
        "setup.py": f"""\
            import pathlib
            pathlib.Path({str(marker)!r}).write_text("setup.py ran")
            from setuptools import setup
            yaml_deps = ["pyyaml"]
            test_deps = ["pytest<8", *yaml_deps]
            extras = dict(yaml=yaml_deps)
            extras["tests"] = test_deps + ["hypothesis"]
            options = {{"python_requires": ">=3.6", "tests_require": ["mock"], "setup_requires": ["pytest-runner"]}}
            setup(name="demo", extras_require={{**extras, "dev": [f"x{{1}}"]}}, **options,
                  classifiers=["Programming Language :: Python :: 3.9"])
        """,
    })
    assert not marker.exists()
    tests = source(declared, "setup.py extras_require tests")
    assert tests.requirements == ("pytest<8", "pyyaml", "hypothesis") and tests.chosen
    assert source(declared, "setup.py tests_require").requirements == ("mock",)
    assert any("extras_require dev is computed" in p for p in declared.problems)
    # the classifiers cap an open-ended python_requires
    assert declared.requires_python == ">=3.6" and declared.python == "3.9"
    assert declared.install_args == ("-e", ".[tests]", "mock", "pytest-runner") and declared.pytest == "pytest<8"


def test_setup_py_extras_read_from_a_named_requirement_file(tmp_path):
    declared = declared_in(tmp_path, {
        "setup.py": "from setuptools import setup\n"
                    "def read(path):\n    return open(path).read().splitlines()\n"
                    "setup(name='demo', extras_require={'test': read('requirements/test.txt')})\n",
        "requirements/test.txt": "pytest==7.4.0\n",
    })
    extra = source(declared, "setup.py extras_require test (requirements/test.txt)")
    assert extra.requirements == ("pytest==7.4.0",) and declared.install_args[:2] == ("-e", ".[test]")


# --- the Python, the project, bad files ---------------------------------------------------------------


def test_the_newest_offered_python_that_requires_python_allows(tmp_path):
    assert declared_in(tmp_path / "a", {"pyproject.toml": PROJECT.replace(">=3.8", ">=3.8.1,<3.12")}).python == "3.11"
    assert declared_in(tmp_path / "b", {"pyproject.toml": PROJECT}, pythons=("3.9.18", "3.12.1")).python == "3.12.1"
    none = declared_in(tmp_path / "c", {"pyproject.toml": PROJECT.replace(">=3.8", ">=3.14")})
    assert none.python == "" and any("satisfies requires-python >=3.14" in p for p in none.problems)
    classifiers = declared_in(tmp_path / "d", {"setup.py": (
        "from setuptools import setup\nsetup(name='d', classifiers=['Programming Language :: Python :: 3.7',"
        " 'Programming Language :: Python :: 3.10'])\n")})
    assert classifiers.python == "3.10" and classifiers.requires_python_from == "classifiers (Python 3.7, 3.10)"


def test_a_broken_pyproject_is_one_line_and_the_other_places_are_read(tmp_path):
    declared = declared_in(tmp_path, {
        "pyproject.toml": "[project\nname = 'broken'\n",
        "tox.ini": "[testenv]\ndeps = pytest\ncommands = pytest\n",
        "setup.cfg": "[options.extras_require]\ntest = hypothesis\n",
    })
    assert [p for p in declared.problems if p.startswith("pyproject.toml is not valid TOML")]
    assert {s.name for s in declared.chosen()} == {"tox.ini [testenv]", "setup.cfg [options.extras_require] test"}


def test_unreadable_files_give_problems_not_exceptions(tmp_path):
    declared = declared_in(tmp_path, {
        "setup.py": "def broken(:\n",
        "tox.ini": "deps = before any section\n",
        "setup.cfg": "[options.extras_require]\ntest = not a ( requirement\n",
        "pyproject.toml": '[dependency-groups]\ntests = "pytest"\n',
    })
    assert any(p.startswith("setup.py does not parse") for p in declared.problems)
    assert any(p.startswith("tox.ini is not a valid INI file") for p in declared.problems)
    assert any("'not a ( requirement' is not a requirement" in p for p in declared.problems)
    assert any("[dependency-groups] tests" in p and "string rather than a sequence" in p for p in declared.problems)


def test_a_project_with_nothing_to_build_installs_its_extras_lines_itself(tmp_path):
    declared = declared_in(tmp_path, {"setup.cfg": "[options.extras_require]\ntest = pytest\n"})
    assert not declared.installable and declared.build_backend == ""
    assert declared.install_args == ("pytest",)
    named = declared_in(tmp_path / "b", {"pyproject.toml": '[build-system]\nbuild-backend = "my_backend"\n'})
    assert named.installable and named.build_backend == "my_backend"


def test_at_a_commit_the_files_of_that_commit_are_read(tmp_path):
    repo, old = make_repo(tmp_path / "repo", {
        "setup.py": "from setuptools import setup\nsetup(name='demo', python_requires='>=3.6')\n",
        "requirements-test.txt": "pytest<7\n",
    })
    new = commit_files(repo, {"requirements-test.txt": None, "setup.py": None, "pyproject.toml": PROJECT + """
        [dependency-groups]
        tests = ["pytest>=8"]
    """.replace("\n        ", "\n")}, "to pyproject")
    at_old = read_declared(*files_in_snapshot(RepoSnapshot.open(tmp_path / "repo", old)), pythons=PYTHONS)
    at_new = read_declared(*files_in_snapshot(RepoSnapshot.open(tmp_path / "repo", new)), pythons=PYTHONS)
    assert [s.name for s in at_old.chosen()] == ["requirements-test.txt"] and at_old.pytest == "pytest<7"
    assert [s.name for s in at_new.chosen()] == ["pyproject.toml [dependency-groups] tests"] and at_new.pytest == "pytest>=8"
    assert at_old.build_backend == "setuptools.build_meta:__legacy__" and at_new.build_backend == "hatchling.build"
