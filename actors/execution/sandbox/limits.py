"""What a sandboxed command is given and what it gives back: its limits, the host folders it
sees (`Mount`), the bounded scratch folders it works in (`Scratch`), and its `Outcome`.

A test run's limits are built from the settings in one place (runner.limits_for_test_runs); `Limits` itself
has no default for the time and memory that settings give."""
from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024
GiB = 1024 * MiB


@dataclass(frozen=True)
class Limits:
    wall_seconds: float
    # The sandbox's memory budget: all its processes and its in-memory scratch together (and each
    # process's address space); 0: no limit.
    memory_bytes: int
    cpu_seconds: int = 3600  # CPU time per process (RLIMIT_CPU); 0: no limit
    processes: int = 1024  # processes and threads at once (RLIMIT_NPROC); 0: no limit
    file_bytes: int = 4 * GiB  # the largest file it may write (RLIMIT_FSIZE); 0: no limit
    tmp_bytes: int = 1 * GiB  # the private /tmp, and /dev/shm (in memory)
    scratch_bytes: int = 4 * GiB  # each scratch folder (the workspace)
    log_bytes: int = 64 * MiB  # the log file of the output
    output_bytes: int = 64 * 1024  # kept in memory: the output's head and tail


@dataclass(frozen=True)
class Mount:
    """A host path visible at `target` inside the sandbox; only `writable` ones can be changed."""

    source: str
    target: str
    writable: bool = False
    optional: bool = False  # a source that is gone when the command starts is left out, not an error


@dataclass(frozen=True)
class Scratch:
    """A folder at `target` of at most Limits.scratch_bytes (on disk where it can be, else in
    memory), filled at the start with a copy of the host folder `seed` (which the sandbox only
    reads); gone at the end."""

    target: str
    seed: str | None = None
    host: str | None = None  # without a sandbox: the (empty) host folder that stands for it
    # Other paths the same folder appears at, mounted over what is there. Only a scratch folder on
    # disk has them: one in memory (a tmpfs of the sandbox's own) is not a host folder to bind twice.
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    exit_code: int | None  # None when killed at the time limit
    timed_out: bool
    duration_s: float
    output: str  # stdout and stderr interleaved: the head and the tail, within Limits.output_bytes
    output_bytes: int  # the full length
    leftover_processes: int = 0  # still running when the command ended; all killed
    memory_exhausted: bool = False  # the memory budget was reached, or an allocation failed (the output says so)
    limits: tuple[str, ...] = ()  # every limit the command ran into, in words
    peak_processes: int = 0  # the most processes seen at once (0: not sampled)
    log_path: str = ""  # the output, up to Limits.log_bytes
    memory_control: str = ""  # what held the memory budget: "cgroup v1", "cgroup v2", "watchdog" ("": no budget)
    peak_memory_bytes: int = 0  # the most it held at once, as that saw it (what cannot be reclaimed)
    scratch: str = ""  # where /tmp and the scratch folders were: "disk", "memory" (tmpfs), "host" (no sandbox)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out
