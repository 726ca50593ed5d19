"""How a command stops on a signal: SIGTERM and SIGHUP as Ctrl-C, and the exit code that names it.

`main` puts the handlers in place before anything else runs, Ray's start included (Ray would set
its own; actors/runtime/deployment.py keeps it from doing so), and they stay until the process
ends. Until a command's outcome is decided, a signal stops it: KeyboardInterrupt in the main
thread, so a run ends failed and resumable, or is never recorded. Once the outcome is decided
(`decide`), a signal no longer changes it: the command prints its outcome and exits with the
status it was to exit with, its Ray shut down as usual; a second signal ends it at once, with that
same status."""
from __future__ import annotations

import os
import sys

# What a stopped run exits with: 128 + the signal's number, as a shell reports a process the signal ended.
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}
_stopped_by: list[str] = []  # the name of the signal that stopped this command, once one has
_decided: list[int] = []  # the exit status, once the command's outcome is decided
_let_pass: list[str] = []  # a signal that came once it was


def interrupted_exit_code() -> int:
    return SIGNAL_EXIT[_stopped_by[-1]] if _stopped_by else SIGNAL_EXIT["SIGINT"]


def handle_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP (Ctrl-C, `kill`, `timeout`, CI cancellation, systemd, a closed
    terminal) stop the command as Ctrl-C does, for the rest of this process; SIGHUP not under
    `nohup`, which ignores it and must go on ignoring it."""
    import signal

    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if name == "SIGHUP" and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
            continue
        signal.signal(getattr(signal, name), _on_signal)


def _on_signal(signum, _frame) -> None:
    import signal

    name = signal.Signals(signum).name
    if _decided:
        if _let_pass:  # a second one: whatever the command still does (Ray's shutdown), it ends now
            end_now(_decided[-1])
        _let_pass.append(name)
        return
    _stopped_by.append(name)
    raise KeyboardInterrupt


def decide(status: int) -> None:
    """The command's outcome is decided, and it will exit with `status`: from now on a signal lets
    it print that outcome and exit as it would (once), or ends it at once with `status` (twice)."""
    _decided.append(status)


def end_now(status: int) -> None:
    """Leave at once with `status`, what was printed flushed. Nothing else runs (Ray's shutdown
    neither: the processes of a Ray of this command's own then take a minute to end by themselves)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe, or a write under way: what it held is lost either way
            pass
    os._exit(status)
