"""Run a command on a workspace in an environment, in the sandbox, and say what happened.

This is the one call the team's test runs (reproduction tests, regression tests, candidate
selection) and the grader share:

    runner = TestRunner(Sandbox(), Limits(wall_seconds=600))
    with Workspace(repo_path, base_commit) as ws:
        ws.apply(patch)
        run = runner.run(env, ws, "pytest -rA tests/test_x.py", parse=parse_log_pytest_like)
    run.exit_code, run.timed_out, run.results, run.output, run.duration_s

The workspace is mounted writable at /testbed; the environment, the system and the repository
are read-only; the network is off; HOME and TMPDIR are a private tmpfs.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .environments import TESTBED, Environment
from .sandbox import Limits, Mount, Outcome, Sandbox
from .workspaces import Workspace


@dataclass(frozen=True)
class TestRun:
    __test__ = False

    """The structured outcome of one command on a workspace."""

    command: str
    exit_code: int | None  # None: killed at the time limit
    timed_out: bool
    duration_s: float
    output: str  # cut to the limit's size (head and tail)
    results: dict[str, str] = field(default_factory=dict)  # test id -> PASSED / FAILED / ERROR / SKIPPED / XFAIL
    leftover_processes: int = 0
    memory_exhausted: bool = False
    log_path: str = ""  # the uncut output, kept beside the workspace

    @property
    def passed(self) -> list[str]:
        return sorted(t for t, s in self.results.items() if s in ("PASSED", "XFAIL"))

    @property
    def failed(self) -> list[str]:
        return sorted(t for t, s in self.results.items() if s in ("FAILED", "ERROR"))


class TestRunner:
    __test__ = False  # not a pytest test class

    def __init__(self, sandbox: Sandbox | None = None, limits: Limits = Limits()) -> None:
        self.sandbox = sandbox or Sandbox()
        self.limits = limits

    def run(self, env: Environment | None, workspace: Workspace, command: str,
            parse: Callable[[str], dict[str, str]] | None = None, name: str = "tests",
            limits: Limits | None = None, prelude: tuple[str, ...] = ()) -> TestRun:
        """Run `command` (a shell command line) in the workspace; `parse` turns the full output into
        per-test results. `prelude` commands run first, in the same shell (e.g. exports)."""
        # Without an environment the command finds its tools as the user's shell does.
        variables = env.variables() if env is not None else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if self.sandbox.mode == "none":
            # No /testbed without the sandbox: the checkout goes first on sys.path, ahead of an
            # editable install that points at /testbed.
            source = workspace.path / "src" if (workspace.path / "src").is_dir() else workspace.path
            variables["PYTHONPATH"] = str(source)
        script = "\n".join([*prelude, command])
        log = workspace.logs / f"{name}.log"
        # Read-only at their own paths: the environment (it may sit under /tmp, which the sandbox
        # replaces with its own) and the repository whose objects the checkout borrows.
        mounts = [Mount(str(workspace.repo_path), str(workspace.repo_path))]
        if env is not None:
            mounts.append(Mount(env.path, env.path))
        else:
            mounts += host_tools(self.sandbox, variables["PATH"])
        mounts.append(Mount(str(workspace.path), TESTBED, writable=True))
        outcome: Outcome = self.sandbox.run(script, cwd=TESTBED, mounts=mounts,
                                            env=variables, limits=limits or self.limits, network=False, log_path=log)
        results = parse(outcome.full_output) if parse else {}
        return TestRun(
            command=command, exit_code=outcome.exit_code, timed_out=outcome.timed_out, duration_s=outcome.duration_s,
            output=outcome.output, results=results, leftover_processes=outcome.leftover_processes,
            memory_exhausted=outcome.memory_exhausted, log_path=str(log),
        )


def host_tools(sandbox: Sandbox, path_variable: str) -> list[Mount]:
    """Read-only mounts, at their own paths, for the host tools a command without an environment
    may use and the sandbox would hide: the interpreter running magis-ray (a virtualenv under /tmp,
    say) and the folders on PATH."""
    folders = dict.fromkeys([sys.prefix, sys.base_prefix, *map(_virtualenv_of, filter(None, path_variable.split(os.pathsep)))])
    return [Mount(folder, folder) for folder in folders if os.path.isdir(folder) and sandbox.replaces(folder)]


def _virtualenv_of(folder: str) -> str:
    """A virtualenv's bin folder stands for the whole virtualenv: its python reads pyvenv.cfg
    beside bin/ and its packages under lib/."""
    parent = os.path.dirname(folder.rstrip("/"))
    return parent if os.path.isfile(os.path.join(parent, "pyvenv.cfg")) else folder


def run_on_patch(repo_path: str | os.PathLike, commit: str, patches: list[tuple[str, str]], env: Environment | None,
                 command: str, runner: TestRunner, parse=None, keep_logs: str | os.PathLike | None = None) -> TestRun:
    """A fresh workspace at `commit`, each (name, diff) applied in order, then `command`.
    WorkspaceError when a checkout or a patch fails (the message is git's)."""
    with Workspace(repo_path, commit) as workspace:
        for name, diff in patches:
            if diff.strip():
                workspace.apply(diff, name)
        run = runner.run(env, workspace, command, parse)
        if keep_logs is not None:
            Path(keep_logs).mkdir(parents=True, exist_ok=True)
            for log in workspace.logs.iterdir():
                (Path(keep_logs) / log.name).write_bytes(log.read_bytes())
        return run
