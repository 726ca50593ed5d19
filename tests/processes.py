"""The processes a test started, found through what it started: the tree below a process it
started, a session it made, a temp dir it made, a marker it generated. Never a name looked up
across the machine: other suites, other sessions' Ray clusters and model servers run beside ours,
and a test that signals or counts them breaks them or itself.

This is the one module of tests/ and benchmarks/ that reads the whole process table
(tests/test_no_process_scans.py checks that), and each function here filters it by what the
caller owns. Linux only (/proc), like the rest of the suite."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

PROC = Path("/proc")


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses): [0] is the
    state (field 3), [1] the parent pid, [3] the session id, [19] the start time (field 22)."""
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cmdline_of(pid: int) -> str:
    """The process's command line, its arguments joined by spaces ("" once it is gone)."""
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def describe(pid: int) -> str:
    """State, parent, session and command line: for a message about a process that should be gone."""
    fields = _stat(pid) or ["gone", "?", "?", "?"]
    return f"(state {fields[0]}, parent {fields[1]}, session {fields[3]}) {cmdline_of(pid)[:200]}"


def _table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every living process: only ever filtered below. A zombie
    is left out: it has ended, and only waits for its parent (init, once orphaned, which here may
    take its time) to collect its exit status."""
    table = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) and fields[0] not in ("Z", "X"):
            try:
                table[int(entry.name)] = (int(fields[1]), int(fields[3]))
            except (IndexError, ValueError):
                continue
    return table


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid` (a process the caller started, or its own raylet)."""
    return sorted(child for child, (parent, _) in _table().items() if parent == pid)


def tree_of(root: int) -> list[int]:
    """`root` and every process below it, parents before their children."""
    below: dict[int, list[int]] = {}
    for pid, (parent, _) in _table().items():
        below.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(sorted(below.get(pid, [])))
    return found


def in_session(sid: int) -> list[int]:
    """The processes of the session whose leader the caller started (start_new_session=True).
    A session's id is its leader's pid, which the kernel gives no other process while the
    session has members, so this finds them even after the leader is gone."""
    return sorted(pid for pid, (_, session) in _table().items() if session == sid)


def under(folder: str) -> list[int]:
    """The processes whose command line names `folder`, or whose working directory lies in it:
    a temp dir the caller made (mkdtemp), so no one else's processes name it."""
    found = []
    for pid in _table():
        if pid == os.getpid():
            continue
        try:
            cwd = os.readlink(PROC / str(pid) / "cwd")
        except OSError:
            continue
        if folder in cmdline_of(pid) or cwd.startswith(folder):
            found.append(pid)
    return sorted(found)


_UNIQUE = re.compile(r"[0-9a-f]{32}")


def carrying(marker: str) -> list[int]:
    """The processes whose command line holds `marker`, which must carry a uuid4().hex the
    caller generated and gave to what it started: a name anyone else could use is refused."""
    if not _UNIQUE.search(marker):
        raise ValueError(f"{marker!r} is no marker of the caller's own (it holds no uuid4().hex)")
    return sorted(pid for pid in _table() if pid != os.getpid() and marker in cmdline_of(pid))


@contextmanager
def busy_loops(count: int):
    """`count` processes that each keep a core busy at normal priority (another job on a shared
    machine), killed and reaped on the way out."""
    loops = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]
    try:
        yield loops
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
