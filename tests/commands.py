"""The one way a test runs the `magis-ray` command: in this process where it can, a process of its
own where it must.

    done = in_process(capsys, "tests", "--repo", repo, "--json")      # main() as the console script runs it
    done.code, done.out, done.err

    done = magis("submit", issue, "--llm", ..., cwd=tmp_path)          # a whole process: a run with its own Ray,
    done.returncode, done.stdout, done.stderr                          # a signal, a start-up, what a user's shell sees

In process, a command's error line and exit status come from the same translation the console
script's do (cli/main.py), its output through pytest's capsys; the settings it reads come from the
environment the test gives (monkeypatch). A process of its own is for what only a process shows:
a whole run on Ray, a stop by a signal, what is left running afterwards."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from waiting import COMMAND_S

from magis_ray.cli.main import main

MAGIS = [sys.executable, "-m", "magis_ray.cli.main"]


@dataclass(frozen=True)
class Done:
    code: int
    out: str
    err: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("magis-ray: error:")]


def in_process(capsys, *args: str | os.PathLike) -> Done:
    """`magis-ray ARGS` run by main() in this process: its exit status, standard output and error."""
    capsys.readouterr()
    try:
        main([str(arg) for arg in args])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return Done(code, captured.out, captured.err)


def magis(*args: str | os.PathLike, cwd: str | os.PathLike | None = None, env: dict[str, str] | None = None,
          timeout: float = COMMAND_S, input: str | None = None) -> subprocess.CompletedProcess:
    """`magis-ray ARGS` as a process of its own, its output captured as text."""
    return subprocess.run([*MAGIS, *map(str, args)], cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout, input=input)
