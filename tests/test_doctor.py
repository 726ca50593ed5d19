"""`magis-ray doctor`, the real command: what this machine (or every node of a cluster) has and lacks
for a grading, with exit 1 when something needed is missing. Here it passes; with bubblewrap hidden
from PATH, or for a dataset whose spec needs a Python this machine lacks, it fails naming the item.
On a cluster it prints a row a node: test_cluster_placement.py, on that module's three nodes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from commands import magis


def doctor(*args, cwd: Path, **env) -> subprocess.CompletedProcess:
    """`magis-ray doctor ARGS` as a process of its own: this machine, or the cluster RAY_ADDRESS names
    when `env` gives one."""
    return magis("doctor", *args, cwd=cwd, env=env, without=() if "RAY_ADDRESS" in env else ("RAY_ADDRESS",))


def dataset(folder: Path, *specs: tuple[str, str]) -> Path:
    """A SWE-bench dataset of one instance for each (repo, version): what the doctor reads of it is the spec."""
    path = folder / "dataset.jsonl"
    path.write_text("".join(json.dumps({
        "instance_id": f"{repo.replace('/', '__')}-{number}", "repo": repo, "version": version, "base_commit": "0" * 40,
        "problem_statement": "a bug", "patch": "diff --git a/x b/x",
    }) + "\n" for number, (repo, version) in enumerate(specs, 1)))
    return path


def rows(result: subprocess.CompletedProcess) -> dict[str, dict[str, str]]:
    """The table's rows by node, each its cells by column (the columns are two spaces apart at least)."""
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.startswith("NODE "))
    header = lines[start]
    columns = [i for i, char in enumerate(header) if char != " " and (i == 0 or header[i - 2:i] == "  ")]
    table = {}
    for line in lines[start + 1:]:
        if line.endswith(":") or line.startswith(("  ", "missing", "nothing")):
            break
        cells = [line[a:b].strip() for a, b in zip(columns, [*columns[1:], None])]
        names = [header[a:b].strip() for a, b in zip(columns, [*columns[1:], None])]
        table[cells[0]] = dict(zip(names, cells))
    return table


def test_doctor_passes_here_for_a_dataset_this_machine_can_grade(tmp_path):
    """sympy 1.1's spec: Python 3.9, no Debian package, no locale."""
    result = doctor("--dataset", dataset(tmp_path, ("sympy/sympy", "1.1")), "--memory", "1G", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    [row] = rows(result).values()
    assert row["SANDBOX"] == "bwrap" and row["PYTHONS"] == "3.9" and row["GIT"] == "ok", result.stdout
    assert result.stdout.rstrip().endswith("nothing needed is missing")


def test_doctor_fails_naming_bubblewrap_when_it_is_not_on_path(tmp_path):
    """PATH as it is, but for bwrap: every other program of it linked into one folder."""
    view = tmp_path / "bin"
    view.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        for program in (Path(folder).iterdir() if Path(folder).is_dir() else ()):
            if program.name != "bwrap" and not (view / program.name).exists():
                (view / program.name).symlink_to(program)
    result = doctor(cwd=tmp_path, PATH=str(view))
    assert result.returncode == 1, result.stdout + result.stderr
    [row] = rows(result).values()
    assert row["SANDBOX"] == "MISSING", result.stdout
    assert "MISSING: bubblewrap (bwrap) is not installed" in result.stdout
    assert result.stdout.rstrip().endswith("missing: sandbox")


def test_doctor_fails_naming_a_python_the_dataset_needs_and_this_machine_lacks(tmp_path):
    """django 2.2's spec needs Python 3.5; here pyenv's folder is an empty one."""
    if shutil.which("python3.5"):
        pytest.skip("this machine has a python3.5 on PATH")
    result = doctor("--dataset", dataset(tmp_path, ("django/django", "2.2")), cwd=tmp_path, PYENV_ROOT=str(tmp_path / "pyenv"))
    assert result.returncode == 1, result.stdout + result.stderr
    [row] = rows(result).values()
    assert row["PYTHONS"] == "MISSING 3.5", result.stdout
    assert "MISSING: no Python 3.5 on this machine" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("missing: ") and "pythons" in result.stdout.splitlines()[-1]
