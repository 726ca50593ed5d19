"""Which entries are the tests' and which the developers': a table's names that make a test entry
(test, tests, testing, or test-something about the tests) or a dev entry (dev), and the commands
that make a tox environment a test one."""
from __future__ import annotations

import re
from collections.abc import Iterable

from packaging.utils import canonicalize_name

from .result import DEV, TEST

TEST_NAMES = ("test", "tests", "testing")
DEV_NAMES = ("dev",)
# test-something names that are about something else than running the tests
_NOT_THE_TESTS = {"typing", "types", "mypy", "pyright", "lint", "linting", "docs", "doc", "bench", "benchmark",
                  "benchmarks", "prof", "profile", "profiling", "min", "minimum", "minimal", "lowest", "oldest"}
# A tox environment whose commands name one of these runs the tests.
_TEST_RUNNERS = re.compile(r"\b(pytest|py\.test|unittest|nose2?|nosetests|trial|setup\.py\s+test|zope-testrunner|virtue)\b")


def roles(names: Iterable[str]) -> dict[str, str]:
    """The names of one table (groups, extras) that are test or dev entries, in their order:
    test, tests and testing; else names such as test-unit or unit-tests, unless about typing,
    docs, benchmarks or minimum versions; and dev."""
    names = list(names)
    words = {name: canonicalize_name(name.split(":")[0]).split("-") for name in names}
    exact = [name for name in names if "-".join(words[name]) in TEST_NAMES]
    loose = [name for name in names if len(words[name]) > 1 and {words[name][0], words[name][-1]} & set(TEST_NAMES)
             and not set(words[name]) & _NOT_THE_TESTS]
    tests = set(exact or loose)
    return {name: TEST if name in tests else DEV for name in names
            if name in tests or "-".join(words[name]) in DEV_NAMES}


def runs_tests(commands: Iterable[str]) -> bool:
    """Whether a tox environment's commands run a test runner (or, with none, tox's default)."""
    text = " ".join(commands)
    return bool(_TEST_RUNNERS.search(text)) or not text.strip()
