"""Run a script on a testbed, in the sandbox, and say what happened.

This is the one call the team's test runs (reproduction tests, regression tests, candidate
selection) and the grader share:

    runner = TestRunner(open_sandbox("bwrap"), limits_for_test_runs(timeout_s=600, memory_bytes=4 * GiB))
    run = runner.run(testbed, "git apply -v /.magis-inputs/fix.diff && pytest -rA tests/test_x.py",
                     parse=parse_log_pytest_like, inputs={"fix.diff": diff})
    run.exit_code, run.timed_out, run.results, run.output, run.limits, run.duration_s

The script sees a copy of the testbed's tree at /testbed (its working folder) and copies of its
prefix's bin/ and site-packages, each bounded (on disk where the sandbox can, else in memory) and
thrown away at the end; `inputs` (patches, files) are read-only under /.magis-inputs. The
environment, the system and the repository's objects are read-only; the network is off unless
asked for; HOME and TMPDIR are a private, bounded /tmp; all of it within one memory budget.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from magis_ray.actors.execution.sandbox import GiB, Limits, MiB, Mount, Outcome, Sandbox, Scratch, open_sandbox
from magis_ray.actors.execution.testbeds import TESTBED, Testbed
from magis_ray.events.settings import process_environment

INPUTS = "/.magis-inputs"
# A test run keeps up to 16 MiB of output, which a log parser then reads whole.
TEST_LOG_BYTES = 16 * MiB


def limits_for_test_runs(timeout_s: float, memory_bytes: int) -> Limits:
    """The limits of every test run (grading's, the team's, `eval`'s) from the settings' time and
    memory for it: the one place they are built. CPU time a little past the wall time, so that the
    wall's limit is the one a slow run meets; the output kept whole up to TEST_LOG_BYTES."""
    return Limits(wall_seconds=timeout_s, memory_bytes=memory_bytes, cpu_seconds=int(timeout_s) + 60,
                  log_bytes=TEST_LOG_BYTES, output_bytes=TEST_LOG_BYTES, tmp_bytes=2 * GiB, scratch_bytes=8 * GiB)


@dataclass(frozen=True)
class TestRun:
    """The structured outcome of one script on a testbed."""

    __test__ = False

    command: str
    exit_code: int | None  # None: killed at the time limit
    timed_out: bool
    duration_s: float
    output: str  # the head and the tail, within the limits' output_bytes
    results: dict[str, str] = field(default_factory=dict)  # test id -> PASSED / FAILED / ERROR / SKIPPED / XFAIL
    leftover_processes: int = 0
    memory_exhausted: bool = False
    limits: tuple[str, ...] = ()  # the limits it ran into, in words
    log_path: str = ""  # the output, up to the limits' log_bytes
    memory_control: str = ""  # what held the memory budget: "cgroup v1", "cgroup v2", "watchdog"
    peak_memory_bytes: int = 0  # the most memory it held at once (what cannot be reclaimed)

    @property
    def passed(self) -> list[str]:
        return sorted(t for t, s in self.results.items() if s in ("PASSED", "XFAIL"))

    @property
    def failed(self) -> list[str]:
        return sorted(t for t, s in self.results.items() if s in ("FAILED", "ERROR"))


class TestRunner:
    __test__ = False  # not a pytest test class

    def __init__(self, sandbox: Sandbox, limits: Limits, network: bool = False) -> None:
        self.sandbox = sandbox
        self.limits = limits
        self.network = network

    @property
    def isolated(self) -> bool:
        """Whether runs get their own copy of what installing into the testbed changes (they may
        then install into it)."""
        return self.sandbox.isolated

    def run(self, testbed: Testbed | None, script: str, parse: Callable[[str], dict[str, str]] | None = None,
            inputs: dict[str, str | bytes] | None = None, name: str = "tests", logs_dir: str | os.PathLike | None = None,
            limits: Limits | None = None, tree: str | os.PathLike | None = None, installs: bool = True) -> TestRun:
        """Run `script` (shell) in /testbed; `parse` turns the output into per-test results. Without
        a testbed, `tree` is the folder copied to /testbed and the host's tools are used.
        `installs`: the script may install into the testbed's prefix, which it then gets a copy of
        (otherwise the prefix is read-only, and the run starts sooner)."""
        limits = limits or self.limits
        scratch_dir = Path(tempfile.mkdtemp(prefix="magis-run-"))
        try:
            inputs_dir = scratch_dir / "inputs"
            inputs_dir.mkdir()
            workspace = scratch_dir / "testbed"
            workspace.mkdir()
            for input_name, data in (inputs or {}).items():
                if isinstance(data, str):
                    # A script given as a file names /testbed as the command sees it (eval.sh's `cd /testbed`).
                    data = self.sandbox.as_seen_inside(data, {TESTBED: str(workspace), INPUTS: str(inputs_dir)})
                    data = data.encode("utf-8", "surrogateescape")
                (inputs_dir / input_name).write_bytes(data)
            os.chmod(scratch_dir, 0o755)
            log = Path(logs_dir) / f"{name}.log" if logs_dir is not None else scratch_dir / f"{name}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            mounts, scratches, variables = self._layout(testbed, tree, str(workspace), installs)
            mounts.append(Mount(str(inputs_dir), INPUTS))
            outcome: Outcome = self.sandbox.run(script, cwd=TESTBED, mounts=mounts, scratches=scratches, env=variables,
                                                limits=limits, network=self.network, log_path=log)
            results = parse(outcome.output) if parse else {}
            return TestRun(
                command=script, exit_code=outcome.exit_code, timed_out=outcome.timed_out, duration_s=outcome.duration_s,
                output=outcome.output, results=results, leftover_processes=outcome.leftover_processes,
                memory_exhausted=outcome.memory_exhausted, limits=outcome.limits,
                log_path=str(log) if logs_dir is not None else "", memory_control=outcome.memory_control,
                peak_memory_bytes=outcome.peak_memory_bytes,
            )
        finally:
            shutil.rmtree(scratch_dir, ignore_errors=True)

    def _layout(self, testbed: Testbed | None, tree, workspace: str, installs: bool) -> tuple[list[Mount], list[Scratch], dict[str, str]]:
        if testbed is None:
            # The host's own tools, as the user's shell finds them.
            variables = {"PATH": process_environment().get("PATH", "/usr/bin:/bin")}
            mounts = host_tools(variables["PATH"])
            seed = str(tree) if tree is not None else None
            if seed:
                variables.update(self.sandbox.source_variables(seed))
            return mounts, [Scratch(TESTBED, seed, host=workspace)], variables
        variables = {**testbed.variables(), "PIP_FIND_LINKS": testbed.wheelhouse, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                     "PIP_NO_INPUT": "1", "PIP_CONFIG_FILE": os.devnull}
        if not self.network:
            variables["PIP_NO_INDEX"] = "1"  # fail at once, not after pip's retries
        if not self.sandbox.isolated:
            # The prefix is used where it is, the tree's copy first on sys.path.
            variables.update(self.sandbox.source_variables(testbed.tree))
            return testbed.mounts(), [Scratch(TESTBED, testbed.tree, host=workspace)], variables
        mounts = testbed.mounts()
        if not installs:
            return mounts, [Scratch(TESTBED, testbed.tree)], variables
        copies = [Scratch(path, path) for path in testbed.writable]
        if testbed.compilers is not None:
            # An install in the run compiles through the node's cache, reading it only; the copy of
            # the tree at the tree's own name too, where the testbed's install compiled it.
            variables.update(testbed.compilers.variables(Path(testbed.tree), variables["PATH"], read_only=True))
            mounts += testbed.compilers.mounts(Path(testbed.prefix), read_only=True)
        return mounts, [Scratch(TESTBED, testbed.tree, aliases=(testbed.tree,)), *copies], variables


def host_tools(path_variable: str) -> list[Mount]:
    """Read-only mounts, at their own paths, for the host tools a command without an environment
    may use and the sandbox shows nothing of: the interpreter running magis-ray (a virtualenv under
    /tmp or a home folder, say) and the folders on PATH."""
    folders = dict.fromkeys([sys.prefix, sys.base_prefix, *map(_virtualenv_of, filter(None, path_variable.split(os.pathsep)))])
    system = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc")
    return [Mount(folder, folder) for folder in folders
            if os.path.isdir(folder) and not any(folder == s or folder.startswith(s + "/") for s in system)]


def _virtualenv_of(folder: str) -> str:
    """A virtualenv's bin folder stands for the whole virtualenv: its python reads pyvenv.cfg
    beside bin/ and its packages under lib/."""
    parent = os.path.dirname(folder.rstrip("/"))
    return parent if os.path.isfile(os.path.join(parent, "pyvenv.cfg")) else folder
