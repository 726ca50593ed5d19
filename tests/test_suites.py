"""The suite a repository's tests run in (actors/code/suites.py): chosen from the test command,
how a suite addresses, runs and reads its tests, and where it puts a reproduction test.

The Django layout is a repository made here with Django's shape (a tests/ folder of test apps
beside the package); Django's output is Django's own, as its runner prints it. A real Django run
on a rebuilt repository is at the end (on demand, marked swebench)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from gitfixtures import make_repo

from magis_ray.actors.code.regression import nearest_tests
from magis_ray.actors.code.repository import RepoSnapshot
from magis_ray.actors.code.suites import PYTEST_COMMAND, DjangoSuite, PytestSuite, ReproductionPlace, suite_for
from magis_ray.actors.roles.testing import reproduces
from magis_ray.events import schema

DJANGO_COMMAND = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"


def test_the_suite_is_chosen_from_each_swebench_spec_s_test_command():
    """Django's runner for every Django version the harness knows; pytest for every other
    repository of SWE-bench (sympy's bin/test and sphinx's tox run tests pytest collects too)."""
    from swebench.harness.constants.python import MAP_REPO_VERSION_TO_SPECS_PY

    chosen: dict[str, set] = {}
    for repo, versions in MAP_REPO_VERSION_TO_SPECS_PY.items():
        for specs in versions.values():
            if "test_cmd" not in specs:
                continue  # dbt-core's specs name no test command
            test_cmd = specs["test_cmd"][-1] if isinstance(specs["test_cmd"], list) else specs["test_cmd"]
            chosen.setdefault(repo, set()).add(suite_for(test_cmd))
    assert {type(s).__name__ for s in chosen["django/django"]} == {"DjangoSuite"}
    assert {s.root for s in chosen["django/django"]} == {"tests"}
    others = {repo: suites for repo, suites in chosen.items() if repo != "django/django"}
    assert {"sympy/sympy", "sphinx-doc/sphinx", "scikit-learn/scikit-learn", "matplotlib/matplotlib", "pytest-dev/pytest"} <= set(others)
    assert all(suites == {PytestSuite(PYTEST_COMMAND)} for suites in others.values()), others


def test_the_user_s_test_command_wins_and_names_its_suite():
    assert suite_for("pytest -rA", "python -m pytest -rA -x") == PytestSuite("python -m pytest -rA -x")
    assert suite_for(DJANGO_COMMAND, "tox -e py311 -- -rA") == PytestSuite("tox -e py311 -- -rA")  # the user's runs pytest
    mine = suite_for("", "python src/tests/runtests.py --verbosity 2")
    assert mine == DjangoSuite("python src/tests/runtests.py --verbosity 2", root="src/tests")
    assert suite_for("", "python runtests.py") == PytestSuite("python runtests.py")  # a root runtests.py (numpy's) wraps pytest
    # a log written before the prepare event named its command ran pytest's
    assert suite_for("") == suite_for(PYTEST_COMMAND) == PytestSuite()


def test_commands_quote_their_targets():
    django = DjangoSuite(DJANGO_COMMAND)
    assert django.command_for(["utils_tests.test_text", "admin_views.tests.AdminViewBasicTest.test_x"]) == (
        DJANGO_COMMAND + " utils_tests.test_text admin_views.tests.AdminViewBasicTest.test_x")
    assert PytestSuite().command_for(["tests/test_a.py::test_b[x y]"]) == PYTEST_COMMAND + " 'tests/test_a.py::test_b[x y]'"


def test_pytest_3_s_failures_are_read_as_failures_by_the_team():
    """pytest 3's summary says FAIL (no status to the harness's parser, which grading keeps)."""
    log = "PASSED tests/test_a.py::test_one\nFAIL tests/test_a.py::test_two\nFAIL: test_x (unittest.Style)\n"
    assert PytestSuite().parse(log) == {"tests/test_a.py::test_one": "PASSED", "tests/test_a.py::test_two": "FAILED"}


# Django's runner as it prints (Django 3.x on Python 3.6: `name (label.Class)`; 5.x on 3.11:
# `name (label.Class.name)`), a docstring naming a test, and the failure's heading.
DJANGO_OUTPUT = """Testing against Django installed in '/testbed/django'
Importing application utils_tests
Skipping setup of unused database(s): default, other.
System check identified no issues (0 silenced).
test_slugify (utils_tests.test_text.TestUtilsText) ... ok
test_wrap (utils_tests.test_text.TestUtilsText) ... FAIL
test_truncate (utils_tests.test_text.TestUtilsText.test_truncate) ... ok
test_format (utils_tests.test_text.TestUtilsText)
Strings are formatted lazily. ... ok
test_broken (utils_tests.test_text.TestUtilsText) ... ERROR

======================================================================
ERROR: test_broken (utils_tests.test_text.TestUtilsText)
----------------------------------------------------------------------
Traceback (most recent call last):
TypeError: boom
======================================================================
FAIL: test_wrap (utils_tests.test_text.TestUtilsText)
----------------------------------------------------------------------
AssertionError: 'a' != 'b'

----------------------------------------------------------------------
Ran 5 tests in 0.012s

FAILED (failures=1, errors=1)
"""


def test_django_s_output_is_read_as_grading_reads_it():
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    ours = DjangoSuite(DJANGO_COMMAND).parse(DJANGO_OUTPUT)
    assert ours == {
        "test_slugify (utils_tests.test_text.TestUtilsText)": "PASSED",
        "test_wrap (utils_tests.test_text.TestUtilsText)": "FAILED",
        "test_truncate (utils_tests.test_text.TestUtilsText.test_truncate)": "PASSED",
        "Strings are formatted lazily.": "PASSED",
        "test_broken (utils_tests.test_text.TestUtilsText)": "ERROR",
    }
    # grading's parser names every test the same; it also takes a failure's heading's first word
    # (`ERROR: test_broken (...)`) for a test, which the suite leaves out
    grading = MAP_REPO_TO_PARSER["django/django"](DJANGO_OUTPUT, None)
    assert {t: s for t, s in grading.items() if " " in t} == ours
    assert set(grading) - set(ours) == {"test_broken", "test_wrap"}


def django_layout(path: Path) -> tuple[RepoSnapshot, DjangoSuite]:
    """Django's shape: the package, and tests/ with its runner, its settings and its test apps."""
    _, commit = make_repo(path, {
        "django/__init__.py": "",
        "django/utils/__init__.py": "",
        "django/utils/text.py": "def slugify(value):\n    return value\n",
        "django/utils/timesince.py": "def timesince(d):\n    return d\n",
        "django/db/models/query.py": "class QuerySet:\n    pass\n",
        "tests/runtests.py": "import django\n",
        "tests/test_sqlite.py": "DATABASES = {}\n",
        "tests/utils_tests/__init__.py": "",
        "tests/utils_tests/test_text.py": "from django.utils.text import slugify\n",
        "tests/utils_tests/test_html.py": "from django.utils import text\n",
        "tests/template_tests/__init__.py": "",
        "tests/template_tests/filter_tests/__init__.py": "",
        "tests/template_tests/filter_tests/test_slugify.py": "from django.utils.text import slugify\n",
        "tests/basic/__init__.py": "",
        "tests/basic/models.py": "from django.db import models\n",
        "tests/basic/tests.py": "from django.test import TestCase\n",
        "tests/timesince_app/__init__.py": "",
        "tests/timesince_app/tests.py": "import datetime\n",  # named after the module by its folder
        "docs/conf.py": "import django.utils.text\n",
    })
    return RepoSnapshot.open(path, commit), DjangoSuite(DJANGO_COMMAND)


def test_django_s_tests_are_its_test_apps_modules_addressed_by_label(tmp_path):
    snapshot, django = django_layout(tmp_path / "django")
    assert django.is_test_file("tests/utils_tests/test_text.py") and django.is_test_file("tests/basic/tests.py")
    assert not django.is_test_file("tests/runtests.py") and not django.is_test_file("tests/test_sqlite.py")
    assert not django.is_test_file("tests/basic/models.py") and not django.is_test_file("django/utils/text.py")
    assert django.target_of("tests/template_tests/filter_tests/test_slugify.py") == "template_tests.filter_tests.test_slugify"
    # the modules importing the changed module, those named after it first; then the labels that name it
    assert nearest_tests(snapshot, "django/utils/text.py", django) == (
        "utils_tests.test_text", "utils_tests.test_html", "template_tests.filter_tests.test_slugify")
    assert nearest_tests(snapshot, "django/utils/timesince.py", django) == ("timesince_app.tests",)
    assert nearest_tests(snapshot, "tests/utils_tests/test_text.py", django) == ()
    # the same repository read as pytest's: files, and Django's tests.py modules are none of its
    assert nearest_tests(snapshot, "django/utils/text.py") == ("tests/utils_tests/test_text.py", "tests/utils_tests/test_html.py",
                                                               "tests/template_tests/filter_tests/test_slugify.py")


def test_a_reproduction_goes_into_the_test_app_nearest_the_change(tmp_path):
    snapshot, django = django_layout(tmp_path / "django")
    assert django.reproduction_place(snapshot, ["django/db/models/query.py", "django/utils/text.py"]) == ReproductionPlace(
        "tests/utils_tests/test_magis_reproduction.py", "utils_tests.test_magis_reproduction", "utils_tests")
    # no test app is near: Django's app for plain model tests
    assert django.reproduction_place(snapshot, ["django/db/models/query.py"]).target == "basic.test_magis_reproduction"
    assert PytestSuite().reproduction_place(snapshot, ["django/utils/text.py"]) == ReproductionPlace(
        "test_magis_reproduction.py", "test_magis_reproduction.py")


def ran(passed=(), failed=(), output="", outcome="failed") -> schema.TestsRan:
    return schema.TestsRan(purpose="reproduce", command="", outcome=outcome, passed=list(passed), failed=list(failed), output=output)


def test_a_reproduction_counts_when_its_tests_ran_and_one_failed():
    django, target = DjangoSuite(DJANGO_COMMAND), "utils_tests.test_magis_reproduction"
    failing = "test_aware (utils_tests.test_magis_reproduction.T)"
    assert reproduces(ran(["Docstring line."], [failing]), target, django) == ("", ("Docstring line.", failing))
    why, _ = reproduces(ran([failing], outcome="passed"), target, django)
    assert "PASSES on the unfixed code" in why
    # a module unittest could not import, or no test at all (a SyntaxError stops the runner)
    why, tests = reproduces(ran(failed=["test_magis_reproduction (unittest.loader._FailedTest)"]), target, django)
    assert why.startswith("it does not even run: Django's test runner could not load it") and tests == ()
    assert reproduces(ran(output="SyntaxError: invalid syntax", outcome="error"), target, django)[0].startswith("it does not even run")
    pytest_suite = PytestSuite()
    assert reproduces(ran(failed=["test_magis_reproduction.py"]), "test_magis_reproduction.py", pytest_suite)[0].startswith(
        "it does not even run: pytest could not collect it")
    assert reproduces(ran(["test_magis_reproduction.py::test_a"], ["test_magis_reproduction.py::test_b", "tests/test_x.py::t"]),
                      "test_magis_reproduction.py", pytest_suite) == (
        "", ("test_magis_reproduction.py::test_a", "test_magis_reproduction.py::test_b"))


def test_the_reproduction_prompt_names_the_framework_and_the_place():
    from magis_ray.actors.model.prompting import render

    place = ReproductionPlace("tests/utils_tests/test_magis_reproduction.py", "utils_tests.test_magis_reproduction", "utils_tests")
    guide = render("reproduction_django", path=place.path, target=place.target, folder=place.folder)[0].content
    assert "Django's test runner" in guide and "`utils_tests.test_magis_reproduction`" in guide and "SimpleTestCase" in guide
    pytest_guide = render("reproduction_pytest", path="test_magis_reproduction.py", target="", folder="")[0].content
    [user] = [m.content for m in render("write_reproduction", issue="I", files="F", feedback="", guide=pytest_guide)
              if m.role == "user"]
    # word for word what the QA Engineer was asked before Django's runner had its own guide: old logs replay
    assert user.endswith("\nWrite one pytest test file that reproduces the issue: it imports the project's code as the "
                         "project's own tests do, and its tests FAIL on the current, unfixed code because of the bug, and "
                         "will pass once the issue is fixed. Use plain asserts. The file is run from the repository's root as "
                         '`test_magis_reproduction.py`. Answer as JSON: {"content": "the whole test file"}')


# --- a real Django: a rebuilt repository (the stand-in for its clone, see tests/test_swebench_team.py) ---

BIG3 = Path(os.environ.get("MAGIS_BIG3_DIR", "/work/big3"))
DJANGO_INSTANCE = "django__django-16429"  # timesince() of an aware datetime a month ago (Django 4.2)
DJANGO_REPRODUCTION = '''import datetime

from django.test import SimpleTestCase, override_settings
from django.utils import timezone
from django.utils.timesince import timesince


class TimesinceWithTimeZoneTests(SimpleTestCase):
    @override_settings(USE_TZ=True)
    def test_an_aware_datetime_a_month_ago(self):
        d = timezone.now() - datetime.timedelta(days=31)
        self.assertEqual(timesince(d), "1\\xa0month")
'''


@pytest.mark.swebench
@pytest.mark.skipif(not os.environ.get("MAGIS_SWEBENCH"), reason="builds a real Django environment: MAGIS_SWEBENCH=1")
@pytest.mark.skipif(not (BIG3 / "repos" / "django__django").is_dir(), reason="no rebuilt Django repository (MAGIS_BIG3_DIR)")
def test_a_real_django_bench_runs_labels_in_django_s_runner():
    """The bench on Django's own suite: the spec's runner chosen, the reproduction run by its label,
    the nearest test modules as the regression tests, read by the parser grading reads them with."""
    from magis_ray.actors.execution.specs import instance_spec
    from magis_ray.actors.roles.testing import TestRequest
    from magis_ray.actors.runtime.bench import BenchSetup, ExecutionBench

    record = next(r for r in map(json.loads, (BIG3 / "verified-big3-rebuilt.jsonl").read_text().splitlines())
                  if r["instance_id"] == DJANGO_INSTANCE)
    repo = BIG3 / "repos" / "django__django"
    fields = {k: record[k] for k in ("repo", "instance_id", "base_commit", "version", "environment_setup_commit")}
    bench = ExecutionBench(BenchSetup(record=fields, repo_path=str(repo)))
    ready = bench.prepare()
    assert ready.outcome == "passed" and ready.command == DJANGO_COMMAND, ready.output
    django = suite_for(ready.command)
    snapshot = RepoSnapshot.open(repo, record["base_commit"])
    place = django.reproduction_place(snapshot, ["django/utils/timesince.py"])
    assert place.target == "utils_tests.test_magis_reproduction"
    labels = nearest_tests(snapshot, "django/utils/timesince.py", django)
    assert labels[0] == "utils_tests.test_timesince"

    files = ((place.path, DJANGO_REPRODUCTION),)
    reproduce = bench.run(TestRequest("reproduce", (place.target,), files=files))
    why, tests = reproduces(reproduce, place.target, django)
    assert not why and tests == (
        "test_an_aware_datetime_a_month_ago (utils_tests.test_magis_reproduction.TimesinceWithTimeZoneTests)",)
    assert reproduce.command == f"{DJANGO_COMMAND} utils_tests.test_magis_reproduction" and reproduce.failed == list(tests)
    assert "TypeError: can't subtract offset-naive and offset-aware datetimes" in reproduce.output
    baseline = bench.run(TestRequest("baseline", labels))
    assert baseline.outcome == "passed" and len(baseline.passed) > 20 and not baseline.failed
    assert "test_leap_year (utils_tests.test_timesince.TimesinceTests)" in baseline.passed
    assert "Timesince should work with both date objects (#9672)" in baseline.passed  # named by its docstring, as grading names it
    check = bench.run(TestRequest("check", (place.target, *labels), (record["patch"],), files))
    assert check.outcome == "passed" and set(tests) | set(baseline.passed) == set(check.passed)
    # the same output, read by grading's parser for the repository (the spec's), names the same tests
    spec = instance_spec({**record, "test_patch": ""}, repo)
    graded = spec.parse(reproduce.output)
    assert {t: s for t, s in graded.items() if " " in t} == django.parse(reproduce.output) == {tests[0]: "ERROR"}

    # a module the runner cannot import goes back as such
    broken = bench.run(TestRequest("reproduce", (place.target,), files=((place.path, "from django.utils.timesince import nothing\n"),)))
    assert reproduces(broken, place.target, django)[0].startswith("it does not even run: Django's test runner could not load it")


def test_a_test_run_takes_the_spec_s_environment_not_its_machine_setup():
    """Django 3.0's eval steps: the locale's generation (the testbed's to have; never done to the
    host by a run without the sandbox), and the exports every test run needs."""
    from swebench.harness.constants.python import MAP_REPO_VERSION_TO_SPECS_PY

    from magis_ray.actors.runtime.bench import exports

    steps = tuple(MAP_REPO_VERSION_TO_SPECS_PY["django/django"]["3.0"]["eval_commands"])
    assert any("locale-gen" in s for s in steps)
    assert exports(steps) == ["export LANG=en_US.UTF-8", "export LANGUAGE=en_US:en", "export LC_ALL=en_US.UTF-8"]


def test_django_s_failures_read_as_failures_and_an_unimportable_module_as_uncollected():
    """The audit's words (events/projections/tests.py) for Django's ids, which name no file."""
    from magis_ray.events.projections.tests import verdict

    failing = "test_aware (utils_tests.test_magis_reproduction.T)"
    assert verdict(ran(failed=[failing])) == "failed as expected"
    assert verdict(ran(failed=["test_magis_reproduction (unittest.loader._FailedTest)"])) == "could not be collected"
    assert verdict(ran(failed=["test_magis_reproduction.py"])) == "could not be collected"
