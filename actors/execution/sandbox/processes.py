"""The processes of a sandbox, found by their PID namespace (never by name), and the processes of
this user, which the process limit counts. (psutil has no namespaces: they are read from /proc.)"""
from __future__ import annotations

import os

import psutil


def pid_namespace(pid: int | str = "self") -> str | None:
    """The PID namespace process `pid` lives in ("self": this process), or None once it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def namespace_of_child(pid: int) -> str | None:
    """The PID namespace of a child of `pid` that lives in another one than `pid` (bubblewrap's
    child: the sandbox's first process), once it exists."""
    try:
        children = psutil.Process(pid).children()
    except psutil.Error:
        return None
    own = pid_namespace(pid)
    return next((found for child in children if (found := pid_namespace(child.pid)) not in (None, own)), None)


def count_in_namespace(namespace: str) -> int:
    return sum(1 for pid in psutil.pids() if pid_namespace(pid) == namespace)


def own_process_count() -> int:
    """How many processes this (non-root) user runs now: the process limit counts them all, each
    of their threads included, by real uid."""
    uid, count = os.getuid(), 0
    for process in psutil.process_iter(["uids", "num_threads"]):
        if process.info["uids"] is not None and process.info["uids"].real == uid:
            count += process.info["num_threads"] or 1
    return count
