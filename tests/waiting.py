"""The one way a test waits: on a condition, with a deadline generous enough for a loaded machine
(2 cores, both busy with other suites), failing with what it waited for.

    run_id = wait_until(lambda: first_run_with(store, 5), "the run holds 5 events", while_running=driver)

A fixed sleep is either too short on a busy machine or wasted on an idle one; a condition is
neither. The deadline bounds a hang, it is no performance claim: make it long."""
from __future__ import annotations

import subprocess
import threading
import time
from typing import Callable, TypeVar

T = TypeVar("T")

GENEROUS_S = 120.0
# How long a whole command (a submit, a resume: Ray's start, the team, the tests) may take before it
# counts as hung: a guard, never a measure; a machine loaded with other suites slows it many times.
COMMAND_S = 900.0


class WaitTimedOut(AssertionError):
    """The condition was not met in time, or what it depended on ended first."""


def _ended(thing: subprocess.Popen | threading.Thread) -> str:
    """'' while `thing` runs; else how it ended."""
    if isinstance(thing, threading.Thread):
        return "" if thing.is_alive() else f"thread {thing.name} ended"
    code = thing.poll()
    return "" if code is None else f"process {thing.pid} exited with {code}"


# Unless a wait gives its own interval, its condition is asked often at first (most are met within a
# moment), then less and less often, up to every LONGEST_POLL_S: a long wait (a whole run, a Ray
# ending) then costs the machine little, when each ask opens a store or reads all of /proc.
FIRST_POLL_S, LONGEST_POLL_S = 0.05, 0.25


def wait_until(condition: Callable[[], T], what: str | Callable[[], str], *, timeout_s: float = GENEROUS_S,
               poll_s: float | None = None, while_running: subprocess.Popen | threading.Thread | None = None) -> T:
    """Call `condition` until it returns something truthy, and return that; every `poll_s`, else
    first after FIRST_POLL_S, each pause half again as long as the last, up to LONGEST_POLL_S.

    `what` says what is awaited ("the run holds 5 events"), or is called for it at the failure
    (to name what was seen last). `while_running`: a process or thread the condition depends on;
    once it has ended without the condition being met, waiting on is pointless: fail at once."""
    deadline = time.monotonic() + timeout_s
    interval = FIRST_POLL_S if poll_s is None else poll_s
    while True:
        met = condition()
        if met:
            return met
        if while_running is not None and (ended := _ended(while_running)):
            if met := condition():  # it may have met the condition on its way out
                return met
            raise WaitTimedOut(f"never: {what() if callable(what) else what} ({ended} first)")
        if time.monotonic() >= deadline:
            raise WaitTimedOut(f"not within {timeout_s:g} s: {what() if callable(what) else what}")
        time.sleep(interval)
        if poll_s is None:
            interval = min(interval * 1.5, LONGEST_POLL_S)
