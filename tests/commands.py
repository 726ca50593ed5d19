"""The one way a test runs the `magis-ray` command: in this process where it can, a process of its
own where it must.

    done = in_process(capsys, "tests", "--repo", repo, "--json")      # main() as the console script runs it
    done.code, done.out, done.err

    done = magis("submit", issue, "--llm", ..., cwd=tmp_path)          # a whole process: a run with its own Ray,
    done.returncode, done.stdout, done.stderr                          # a signal, a start-up, what a user's shell sees
    driver = started("submit", issue, ..., cwd=tmp_path)               # one left running, to signal, kill or wait on

In process, a command's error line and exit status come from the same translation the console
script's do (cli/main.py), its output through pytest's capsys; the settings it reads come from the
environment the test gives (monkeypatch). A process of its own is for what only a process shows:
a whole run on Ray, a stop by a signal, what is left running afterwards. Its environment is this
process's (the suite's settings, conftest.py) with its log at warnings, less the variables
`without` names by their prefix (a user's shell with no key: `without=("OPENAI_", "MAGIS_")`),
and `env` over it."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import structlog

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
    finally:
        # the command configured logging at its level, onto this capture's stream: the next test's
        # logs are not its
        structlog.reset_defaults()
    captured = capsys.readouterr()
    return Done(code, captured.out, captured.err)


def command_environment(env: dict[str, str] | None = None, without: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment of a command a test starts (see the module's docstring)."""
    kept = {name: value for name, value in os.environ.items() if not name.startswith(without)}
    return {**kept, "MAGIS_LOG_LEVEL": "warning", **(env or {})}


def magis(*args: str | os.PathLike, cwd: str | os.PathLike | None = None, env: dict[str, str] | None = None,
          without: tuple[str, ...] = (), timeout: float = COMMAND_S, input: str | None = None) -> subprocess.CompletedProcess:
    """`magis-ray ARGS` as a process of its own, its output captured as text."""
    return subprocess.run([*MAGIS, *map(str, args)], cwd=cwd, env=command_environment(env, without), capture_output=True,
                          text=True, timeout=timeout, input=input)


def started(*args: str | os.PathLike, cwd: str | os.PathLike | None = None, env: dict[str, str] | None = None,
            without: tuple[str, ...] = (), **popen) -> subprocess.Popen:
    """`magis-ray ARGS` started as a process of its own and left running, its output piped as text
    (`popen`: more of subprocess.Popen's arguments, a session of its own for one)."""
    return subprocess.Popen([*MAGIS, *map(str, args)], cwd=cwd, env=command_environment(env, without),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
