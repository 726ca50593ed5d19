"""pytest's verdicts read from its output: the short test summary that `-rA` prints, one line per
test, status first:

    PASSED tests/test_stats.py::test_median
    FAILED tests/test_stats.py::test_mean - assert 3.3333333333333335 == 2.5
    ERROR tests/test_io.py::test_read - FileNotFoundError: data.csv
    XFAIL tests/test_stats.py::test_mode - not written yet
    SKIPPED [1] tests/test_stats.py:30: needs numpy

The team reads its own test runs with this (actors/code/suites.py), so a plain install needs no
grader to test a repository. Its verdicts are the SWE-bench harness's (swebench 4.1.0's
parse_log_pytest, which grading uses), rule for rule, so that a test is named and judged the same
in the team's events and in a grading's report; tests/test_pytest_log.py checks the two agree:

- a line counts when it starts with one of the five statuses (an XPASS line does not);
- its second word is the test, its first the status, so a skip's summary line (`SKIPPED [1]
  path:line: reason`) gives the test `[1]` (the suite keeps only test ids and files);
- on a FAILED line, " - " (pytest's separator before the message) is dropped first;
- a later line for the same test wins."""
from __future__ import annotations

STATUSES = ("FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL")


def parse_pytest_log(log: str) -> dict[str, str]:
    """Each test named in `log`'s result lines, with its status (one of STATUSES)."""
    results: dict[str, str] = {}
    for line in log.split("\n"):
        if not line.startswith(STATUSES):
            continue
        if line.startswith("FAILED"):
            line = line.replace(" - ", " ")
        words = line.split()
        if len(words) > 1:
            results[words[1]] = words[0]
    return results
