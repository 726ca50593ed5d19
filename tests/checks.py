"""Assertions every finished run must satisfy, whatever the model answered."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pygit2
from commands import Done
from gitfixtures import checkout

from magis_ray.events.history import effective
from magis_ray.events.projections import final_diff, fold
from magis_ray.events.schema import Recorded, RunFailed, RunFinished


def assert_one_line_error(result: subprocess.CompletedProcess | Done, *fragments: str) -> None:
    """A command refused its input as the docs promise: exit 2, one `magis-ray: error:` line
    holding every fragment, no traceback, and no run id shown (no run started). `result`: a
    process's, or a command's in this process (tests/commands.py)."""
    if isinstance(result, Done):
        code, out, err = result.code, result.out, result.err
    else:
        code, out, err = result.returncode, result.stdout, result.stderr
    assert code == 2, (out, err)
    assert "Traceback" not in err + out
    errors = [line for line in err.splitlines() if line.startswith("magis-ray: error:")]
    assert len(errors) == 1, err
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    assert not any(line.startswith("run ") for line in err.splitlines()), err


def assert_consistent_log(events: list[Recorded]) -> None:
    """Versions gap-free from 1, positions increasing; the history that counts (a resumed run's
    superseded events aside) has exactly one terminal event, at the end of the log."""
    assert [e.version for e in events] == list(range(1, len(events) + 1))
    positions = [e.position for e in events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    terminal = [e for e in effective(events) if isinstance(e.event, (RunFinished, RunFailed))]
    assert len(terminal) == 1 and terminal[0] is events[-1], [type(e.event).__name__ for e in events[-3:]]


def assert_diff_applies(events: list[Recorded], repo_path: Path, base: str, work: Path) -> str:
    """The run's diff applies to the base commit as `git apply --check` sees it; returns it."""
    diff = final_diff(fold(events))
    if diff:
        tree = checkout(pygit2.Repository(str(repo_path)), base, work)
        (work.parent / "run.diff").write_text(diff)
        subprocess.run(["git", "apply", "--check", str(work.parent / "run.diff")], cwd=tree, check=True, capture_output=True)
    return diff
