"""A small real project with a real bug and a real failing test, as a git repository, and the
issue that reports it. The scripted team's fixes for it are the ones a developer would write."""
from __future__ import annotations

import json
from pathlib import Path

from gitfixtures import make_repo

from magis_ray.actors.code.diffs import file_diff
from magis_ray.actors.code.edits import apply_edits
from magis_ray.actors.runtime.issue import IssueRecord
from magis_ray.events.schema import Edit, LineRange

STATS = '''"""Small statistics helpers."""


def mean(values):
    """The arithmetic mean of a non-empty sequence."""
    total = 0
    for value in values:
        total += value
    return total / (len(values) - 1)


def median(values):
    """The middle value (the mean of the two middle values for an even count)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
'''

TEXTS = '''"""Text helpers."""


def shout(text):
    """The text in capitals, with an exclamation mark."""
    return text.upper() + "?"


def whisper(text):
    return text.lower()
'''

TESTS = '''from calc.stats import mean, median
from calc.texts import shout, whisper


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_median():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5


def test_shout():
    assert shout("hi") == "HI!"


def test_whisper():
    assert whisper("HI") == "hi"
'''

FILES = {
    "README.md": "# calc\n\nSmall helpers for statistics and text.\n",
    "calc/__init__.py": "",
    "calc/stats.py": STATS,
    "calc/texts.py": TEXTS,
    "tests/test_calc.py": TESTS,
    "setup.cfg": "[metadata]\nname = calc\n",
}

MEAN_FIX = Edit(LineRange(9, 9), "    return total / len(values)\n")
SHOUT_FIX = Edit(LineRange(6, 6), '    return text.upper() + "!"\n')
MEAN_DIFF = file_diff("calc/stats.py", STATS, apply_edits(STATS, [MEAN_FIX]))  # the mean issue's fix
BOTH_DIFF = MEAN_DIFF + file_diff("calc/texts.py", TEXTS, apply_edits(TEXTS, [SHOUT_FIX]))  # BOTH_ISSUE's

MEAN_ISSUE = (
    "mean() returns the wrong value\n\n`calc.stats.mean([1, 2, 3, 4])` returns 3.3333 instead of 2.5: "
    "the mean divides the total by one less than the number of values."
)
BOTH_ISSUE = MEAN_ISSUE + "\n\nAlso `calc.texts.shout('hi')` returns 'HI?' but a shout should end with '!'."


def make_calc_repo(path: Path):
    """The repository and its base commit id."""
    return make_repo(path, FILES, "calc: statistics and text helpers")


def calc_issue(repo_path: Path, base_commit: str, text: str = MEAN_ISSUE, instance_id: str = "calc__calc-1") -> IssueRecord:
    return IssueRecord(
        instance_id=instance_id, repo="calc/calc", base_commit=base_commit, problem_statement=text,
        repo_path=str(repo_path),
    )


def write_issue(path: Path, issue: IssueRecord) -> Path:
    import msgspec

    path.write_bytes(msgspec.json.encode(issue))
    return path


def load_json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
