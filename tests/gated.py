"""A command stopped at a moment of its own: its output read line by line as it comes, and a signal
sent the moment a given line appears (a gate), so that where the signal lands is set by what the
command has said, never by a sleep. The command runs in a session of its own, and whatever of it
is left at the end is killed by that session."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass, field
from typing import Callable

from waiting import COMMAND_S


@dataclass
class Gate:
    stream: str  # "stdout" or "stderr"
    starts: str  # the line that opens it: the first line that starts with this
    signum: int = signal.SIGTERM
    act: Callable[[subprocess.Popen], None] | None = None  # done instead of the signal (stop what the command uses)

    def open(self, process: subprocess.Popen) -> None:
        if self.act is not None:
            self.act(process)
        else:
            process.send_signal(self.signum)


@dataclass
class Stopped:
    pid: int  # the command's, which is also its session's id
    returncode: int
    stdout: list[str]
    stderr: list[str]
    opened_at: int | None  # the gate's line's index in its stream (None: it never appeared)
    gate: Gate | None = field(default=None)

    def after_gate(self) -> list[str]:
        """The stream's lines after the gate's line: what the command said once it was signalled."""
        lines = getattr(self, self.gate.stream)
        return lines[self.opened_at + 1:] if self.opened_at is not None else []


def run_gated(command: list[str], *, cwd, env, gate: Gate | None, timeout_s: float = COMMAND_S) -> Stopped:
    """Run `command` to its end, opening `gate` when its line appears: its signal sent to the
    command alone (as `kill PID` and `timeout` send it), or its act done."""
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    lines: dict[str, list[str]] = {"stdout": [], "stderr": []}
    opened: list[int] = []

    def read(name: str) -> None:
        for line in getattr(process, name):
            line = line.rstrip("\n")
            if gate is not None and not opened and gate.stream == name and line.startswith(gate.starts):
                opened.append(len(lines[name]))
                gate.open(process)
            lines[name].append(line)

    readers = [threading.Thread(target=read, args=(name,), daemon=True) for name in lines]
    for reader in readers:
        reader.start()
    try:
        process.wait(timeout=timeout_s)
        for reader in readers:
            reader.join(timeout=timeout_s)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return Stopped(process.pid, process.returncode, lines["stdout"], lines["stderr"], opened[0] if opened else None, gate)
