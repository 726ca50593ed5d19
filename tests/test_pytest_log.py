"""pytest's verdicts as the team reads them (actors/code/pytest_log.py): real pytest output of a
project with every kind of outcome, and the same verdicts as the SWE-bench harness's
parse_log_pytest (which grading uses) on that output and on many made-up logs."""
from __future__ import annotations

import random
import subprocess
import sys

import pytest

from magis_ray.actors.code.pytest_log import parse_pytest_log
from magis_ray.actors.code.suites import PYTEST_COMMAND, PytestSuite

PROJECT = {
    "conftest.py": "import pytest\n\n@pytest.fixture\ndef broken():\n    raise RuntimeError('no database')\n",
    "tests/test_outcomes.py": (
        "import pytest\n\n"
        "def test_passes():\n    assert 1 + 1 == 2\n\n"
        "def test_fails():\n    assert 3 / 1 == 2.5, 'the mean - off by one'\n\n"
        "def test_errors_in_its_fixture(broken):\n    pass\n\n"
        "@pytest.mark.skip(reason='not on this machine')\ndef test_skipped():\n    pass\n\n"
        "@pytest.mark.xfail(reason='known bug')\ndef test_expected_to_fail():\n    assert False\n\n"
        "@pytest.mark.xfail(reason='fixed already')\ndef test_passes_unexpectedly():\n    pass\n\n"
        "@pytest.mark.parametrize('value', ['a b', 'x - y', 3])\ndef test_params(value):\n    assert value != 3\n"
    ),
    "tests/test_unimportable.py": "import no_such_module\n\ndef test_never_runs():\n    pass\n",
}


@pytest.fixture(scope="module")
def pytest_output(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("outcomes")
    for path, text in PROJECT.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    command = [sys.executable, *PYTEST_COMMAND.split()[1:], "tests"]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr  # a collection error: pytest's usage-error code
    # collection errors stop the run before any test: run the importable file too, as the team runs one target
    single = subprocess.run([*command[:-1], "tests/test_outcomes.py"], cwd=root, capture_output=True, text=True, timeout=300)
    assert single.returncode == 1, single.stdout + single.stderr
    return done.stdout + "\n" + single.stdout


def test_every_outcome_of_a_real_pytest_run(pytest_output):
    assert parse_pytest_log(pytest_output) == {
        "tests/test_unimportable.py": "ERROR",  # its collection error, named by the file
        "tests/test_outcomes.py::test_passes": "PASSED",
        "tests/test_outcomes.py::test_fails": "FAILED",
        "tests/test_outcomes.py::test_errors_in_its_fixture": "ERROR",
        "[1]": "SKIPPED",  # `SKIPPED [1] tests/test_outcomes.py:...: reason`: the harness's reading, kept
        "tests/test_outcomes.py::test_expected_to_fail": "XFAIL",
        "tests/test_outcomes.py::test_params[a": "PASSED",  # an id with a space is cut there, as the harness cuts it
        "tests/test_outcomes.py::test_params[x": "PASSED",
        "tests/test_outcomes.py::test_params[3]": "FAILED",
    }


def test_the_suite_keeps_the_tests_of_its_targets(pytest_output):
    """The team's reading: test ids and files of what it ran, not the skip's `[1]`."""
    parsed = PytestSuite().parse(pytest_output, ["tests/test_outcomes.py"])
    assert parsed["tests/test_outcomes.py::test_fails"] == "FAILED" and "[1]" not in parsed
    assert "tests/test_unimportable.py" not in parsed
    assert PytestSuite().parse(pytest_output, ["tests/test_unimportable.py"]) == {"tests/test_unimportable.py": "ERROR"}


def test_result_lines_by_their_rules():
    log = "\n".join([
        "PASSED a.py::t1",
        "FAILED a.py::t2 - AssertionError: 1 - 2",
        "FAILED - a.py::t3",  # " - " dropped before the words are split
        "XPASS a.py::t4 fixed already",  # not one of the five statuses
        "   PASSED a.py::t5",  # not at the line's start
        "PASSED",  # no test
        "ERROR a.py::t1",  # a later line for the same test wins
        "SKIPPED [2] a.py:3: no network\r",
        "XFAIL a.py::t6 - known",
    ])
    assert parse_pytest_log(log) == {"a.py::t1": "ERROR", "a.py::t2": "FAILED", "a.py::t3": "FAILED", "[2]": "SKIPPED",
                                     "a.py::t6": "XFAIL"}


def harness_parser():
    pytest.importorskip("swebench", reason="the SWE-bench harness (the grade extra) to compare with")
    from swebench.harness.log_parsers.python import parse_log_pytest

    return lambda log: parse_log_pytest(log, None)


def test_the_same_verdicts_as_the_harness_on_real_output(pytest_output):
    assert parse_pytest_log(pytest_output) == harness_parser()(pytest_output)


def test_the_same_verdicts_as_the_harness_on_made_up_logs():
    theirs = harness_parser()
    words = ["PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS", "PASSEDX", "FAILED:", "-", " - ", "a.py::t[1 - 2]",
             "b.py::t", "[1]", "c.py:9:", "\t", "\r", "  ", "", "ok", "=" * 10, "tests/x.py::C::m", "\u00a0", "::"]
    rng = random.Random(38)
    for _ in range(2000):
        lines = ["".join(rng.choice(words) + rng.choice(["", " ", "  "]) for _ in range(rng.randint(0, 6)))
                 for _ in range(rng.randint(0, 8))]
        log = "\n".join(lines)
        assert parse_pytest_log(log) == theirs(log), repr(log)
