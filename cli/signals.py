"""How a command stops on a signal: SIGTERM and SIGHUP as Ctrl-C, and the exit code that names it."""
from __future__ import annotations

from contextlib import contextmanager

# What a stopped run exits with: 128 + the signal's number, as a shell reports a process the signal ended.
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}
_stopped_by: list[str] = []  # the name of the signal that stopped this command, once one has


def interrupted_exit_code() -> int:
    return SIGNAL_EXIT[_stopped_by[-1]] if _stopped_by else SIGNAL_EXIT["SIGINT"]


@contextmanager
def stopped_by_signals():
    """SIGTERM and SIGHUP (`kill`, `timeout`, CI cancellation, systemd, a closed terminal) stop the
    command as Ctrl-C does (SIGHUP not under `nohup`): KeyboardInterrupt in the main thread, so the run ends failed and
    resumable. The exit code then names the signal (143 for SIGTERM)."""
    import signal

    def stop(signum, _frame) -> None:
        _stopped_by.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    # A command started under `nohup` ignores SIGHUP, and keeps ignoring it: a closed terminal must not stop it.
    names = [name for name in ("SIGINT", "SIGTERM", "SIGHUP")
             if not (name == "SIGHUP" and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN)]
    previous = {name: signal.signal(getattr(signal, name), stop) for name in names}
    try:
        yield
    finally:
        for name, handler in previous.items():
            # None: a handler set outside Python (Ray's own), which cannot be set again from here
            signal.signal(getattr(signal, name), signal.SIG_DFL if handler is None else handler)
