"""pytest's verdicts read from its output: the short test summary that `-rA` (or its letters spelt
out, `-rPpsxXEf`) prints, one line per test, status first:

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
- a later line for the same test wins;
- pytest 3's FAIL is no status: its failing test is missing, which the harness's rules count as
  failing."""
from __future__ import annotations

import re
from dataclasses import dataclass

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


_PROGRESS = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", re.M)


def read_progress(log: str) -> dict[str, str]:
    """Each test's status from `pytest -v`'s line per test as it ran ("path::test PASSED [ 50%]"):
    what a run cut off before its summary still says."""
    return {test: status for test, status in _PROGRESS.findall(log) if status != "XPASS"}


# --- a whole suite: its collection, and what its failures need --------------------------------

# A failure for want of the network, as Python, urllib3, requests and curl say it.
NETWORK_SIGNS = ("Temporary failure in name resolution", "Name or service not known", "gaierror",
                 "Network is unreachable", "Failed to establish a new connection", "nodename nor servname",
                 "Could not resolve host", "No address associated with hostname", "[Errno 101]", "[Errno -3]",
                 "[Errno -2]", "Max retries exceeded with url")
# A failure for want of a server on this machine (a database, a cache), as their clients say it.
SERVICE_SIGNS = ("Connection refused", "could not connect to server", "Can't connect to MySQL server",
                 "Error 111 connecting to")
_MISSING_MODULE = re.compile(r"No module named '([^']+)'")
_ERROR_HEADING = re.compile(r"^_+ ERROR collecting (\S+) _+$", re.M)
_COLLECTED = re.compile(r"(\d+)(?:/\d+)? tests? collected|collected (\d+) items?")
_DESELECTED = re.compile(r"(\d+) deselected")
_OUTCOME = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b")
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.+)")


@dataclass(frozen=True)
class Collection:
    """What `pytest --collect-only -q` said of a suite: the tests it found, and for each file (or
    conftest) it could not load, the first line of why."""

    tests: tuple[str, ...]  # the ids `-q` listed (a project's own -v in addopts lists a tree instead)
    errors: tuple[tuple[str, str], ...]  # (the file, why), in pytest's order
    deselected: int = 0
    # pytest itself failed (INTERNALERROR, a conftest it cannot import, a configuration it cannot read): its line
    internal_error: str = ""
    counted: int = 0  # what pytest's last line says it collected
    plugins: tuple[str, ...] = ()  # the plugins its header names ("cov-7.0.0")

    @property
    def collected(self) -> int:
        return max(len(self.tests), self.counted)

    @property
    def plugin_options(self) -> tuple[str, ...]:
        """The options pytest did not know (a plugin the project's addopts use is missing), as the
        plugin's word: `--cov-report=xml` is "cov", `--asyncio-mode` "asyncio"."""
        found = [argument[2:].split("=")[0].split("-")[0] for match in _UNRECOGNIZED.finditer(self.internal_error)
                 for argument in match.group(1).split() if argument.startswith("--")]
        return tuple(dict.fromkeys(word for word in found if word))

    @property
    def missing_modules(self) -> tuple[str, ...]:
        """The top-level modules the errors say are missing, in order, each once."""
        found = [match.group(1).split(".")[0] for _, why in self.errors for match in _MISSING_MODULE.finditer(why)]
        found += [m.group(1).split(".")[0] for m in _MISSING_MODULE.finditer(self.internal_error)]
        return tuple(dict.fromkeys(found))


def read_collection(output: str) -> Collection:
    """`pytest --collect-only -q` output as a Collection: `-q` prints one test id a line, then the
    errors' sections (a heading per file that failed to load, its traceback, its `E` lines), then
    the count."""
    tests = tuple(line.strip() for line in output.splitlines() if "::" in line and not line.startswith(("E ", " ", "_")))
    errors: list[tuple[str, str]] = []
    headings = list(_ERROR_HEADING.finditer(output))
    for number, heading in enumerate(headings):
        end = headings[number + 1].start() if number + 1 < len(headings) else len(output)
        errors.append((heading.group(1), _why(output[heading.end():end])))
    internal = ""
    if "ImportError while loading conftest" in output or "INTERNALERROR" in output:
        internal = _why(output) or next(line for line in output.splitlines() if "INTERNALERROR" in line or "conftest" in line)
    elif not tests and not errors and not _COLLECTED.search(output):
        # pytest refused to start (its configuration, a pyproject.toml it cannot read, an option) or
        # could not be imported at all: its ERROR line, else the traceback's last error
        lines = output.splitlines()
        said = [line.split("error: ", 1)[1].strip() for line in lines if ": error: " in line]  # argparse's, after its usage
        internal = (said[0][:300] if said else "") or next(
            (line.removeprefix("ERROR: ").strip()[:300] for line in lines if line.startswith("ERROR: ")), "") or (
            _why(output) if "Traceback" in output else "")
    deselected = _DESELECTED.search(output)
    counted = next((int(m.group(1) or m.group(2)) for m in reversed(list(_COLLECTED.finditer(output)))), 0)
    plugins = next((tuple(p.strip() for p in line.split(":", 1)[1].split(",") if p.strip())
                    for line in output.splitlines() if line.startswith("plugins: ")), ())
    return Collection(tests=tests, errors=tuple(errors), deselected=int(deselected.group(1)) if deselected else 0,
                      internal_error=internal, counted=counted, plugins=plugins)


def _why(section: str) -> str:
    """A traceback's reason: its last `E ` line (pytest's), else its last line that names an error."""
    lines = [line[1:].strip() for line in section.splitlines() if line.startswith("E ")]
    named = [line.strip() for line in section.splitlines() if "Error" in line or "error:" in line]
    return (lines or named or [""])[-1][:300]


def read_counts(output: str) -> dict[str, int] | None:
    """What pytest's last line says of a run ("1,646 passed, 46 skipped in 12.3s"): each outcome's
    count ("error" for errors), or None where the run ended before it (cut off at its limit)."""
    for line in reversed(output.splitlines()):
        found = _OUTCOME.findall(line)
        if found and re.search(r" in [\d.]+s", line):
            return {outcome.rstrip("s") if outcome.startswith("error") else outcome: int(number) for number, outcome in found}
    return None


def failures_wanting(output: str, failing: list[str], signs: tuple[str, ...]) -> list[str]:
    """Of the `failing` tests, those whose failure section in pytest's output (its "____ name ____"
    blocks) shows one of `signs`; with no sections to read, all of them when the output does."""
    sections = re.split(r"\n_{3,} (.+?) _{3,}\n", output)
    if len(sections) < 3:
        return list(failing) if any(sign in output for sign in signs) else []
    names = {test.split("::")[-1].split(" ")[0]: test for test in failing}
    found = []
    for header, body in zip(sections[1::2], sections[2::2]):
        named = header.strip().split("::")[-1].split(".")[-1]
        test = header.strip() if header.strip() in failing else names.get(named)
        if test is not None and test not in found and any(sign in body for sign in signs):
            found.append(test)
    return found
