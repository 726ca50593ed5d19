"""Running a sandbox's command and watching it: within its memory budget and rlimits, its output
captured (capture.py), the whole tree killed at the time limit or at the caller's stop, and every
limit it ran into said in words. Both sandboxes (bubblewrap.py, host.py) run their command here;
they differ in what they put before it."""
from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import threading
import time
from typing import Callable

from magis_ray.events.errors import MagisError
from .capture import OutputCapture, size_text
from .limits import Limits, Outcome
from .memory_budget import open_budget
from .processes import count_in_namespace, namespace_of_child

MARK = "magis-sandbox:"  # the init's reports, on a descriptor of their own (3)
# The sandbox's processes, looked up by their PID namespace (never by name) this often.
SAMPLE_S = 0.25
STOP_CHECK_S = 0.5  # how soon a run sees its sandbox's stop
CPU_GRACE_S = 5


class SandboxStopped(MagisError):
    """The run was ended because its caller stopped (a grading interrupted): not the command's
    outcome, so nothing may record it as a failed build or test."""


# The sandbox's init, run as the sandboxed uid: fill the scratch folders, run the command, count
# what it left running, say which sized folders it filled, exit with its code; the kernel then
# kills the rest of the PID namespace. /bin/sh and coreutils only. Arguments: the folders to
# check, then "--", then the scratch pairs (seed, target), then "--", then the command.
INIT = r"""
checked=""
while [ "$1" != "--" ]; do checked="$checked $1"; shift; done; shift
while [ "$1" != "--" ]; do
  for f in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    cp -RP --preserve=mode,timestamps,links "$f" "$2/" || { echo "%(mark)s seed $2" >&3; exit 125; }
  done
  shift 2
done; shift
"$@" 3>&-
rc=$?
n=0
for p in /proc/[0-9]*; do
  p=${p#/proc/}
  [ "$p" = "$$" ] || [ "$p" = 1 ] || n=$((n+1))
done
[ "$n" -gt 0 ] && echo "%(mark)s leftover $n" >&3
for f in $checked; do
  set -- $(stat -f -c '%%a %%b' "$f" 2>/dev/null || echo 1 1)
  [ "$1" -le $(($2 / 100)) ] && echo "%(mark)s full $f" >&3
done
echo "%(mark)s exit $rc" >&3
exit $rc
""" % {"mark": MARK}

# Output that says the command ran into a limit, as Python, glibc and the shells say it.
_SIGNS = {
    "memory": ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory"),
    "processes": ("fork: retry: Resource temporarily unavailable", "fork: Resource temporarily unavailable",
                  "Cannot fork", "can't start new thread"),
    "cpu": ("CPU time limit exceeded",),
    "file": ("File size limit exceeded", "[Errno 27] File too large"),
}


_FORK_REFUSED = re.compile(r"fork.*\n(?:.*\n){0,3}.*BlockingIOError: \[Errno 11\] Resource temporarily unavailable")


def rlimits(limits: Limits, processes: int) -> list[tuple[int, int]]:
    found = []
    if limits.memory_bytes:
        found.append((resource.RLIMIT_AS, limits.memory_bytes))
    if limits.cpu_seconds:
        found.append((resource.RLIMIT_CPU, limits.cpu_seconds))
    if limits.file_bytes:
        found.append((resource.RLIMIT_FSIZE, limits.file_bytes))
    if processes:
        found.append((resource.RLIMIT_NPROC, processes))
    return found


def run_watched(head: list[str], make_fds: Callable[[], list[int]], tail: list[str], cwd: str, env: dict[str, str],
                limits: Limits, processes: int, log_path, *, sample: bool, in_memory: dict[str, int], scratch: str,
                memory_control: str, stop: threading.Event | None) -> Outcome:
    """Run `head + tail` (`make_fds` may add to `head` the descriptors it makes, which the child
    inherits) within the memory budget. The init reports on descriptor 3: a pipe of its own,
    apart from the output."""
    limits_set = rlimits(limits, processes)

    def apply_limits() -> None:
        for kind, value in limits_set:
            # CPU time: SIGXCPU at the limit (a shell says "CPU time limit exceeded"), and
            # SIGKILL a little later for a process that ignores it.
            resource.setrlimit(kind, (value, value + CPU_GRACE_S if kind == resource.RLIMIT_CPU else value))

    budget = open_budget(limits.memory_bytes, memory_control, in_memory)
    output_read, output_write = os.pipe()
    status_read, status_write = os.pipe()
    fds = make_fds()
    start = time.monotonic()
    try:
        process = subprocess.Popen(
            [*head, *tail], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=output_write, stderr=output_write,
            start_new_session=True, preexec_fn=_child_setup(apply_limits, status_write, budget), pass_fds=(3, *fds),
        )
    except BaseException:
        for fd in (output_read, status_read):
            os.close(fd)
        if budget is not None:
            budget.close()
        raise
    finally:
        for fd in (output_write, status_write, *fds):
            os.close(fd)
    capture = OutputCapture(output_read, log_path, limits.log_bytes, limits.output_bytes).start()
    status = OutputCapture(status_read, None, 0, 64 * 1024).start()
    timed_out, over_budget, peak, namespace, stopped = False, False, 0, None, False
    deadline = start + limits.wall_seconds
    next_sample = start
    try:
        while True:
            wait = SAMPLE_S if sample else max(deadline - time.monotonic(), 0.001)
            if stop is not None:
                wait = min(wait, STOP_CHECK_S)
            try:
                process.wait(timeout=min(wait, budget.poll_s) if budget is not None else wait)
                break
            except subprocess.TimeoutExpired:
                pass
            if budget is not None and budget.over(process.pid):
                over_budget = True
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            if stop is not None and stop.is_set():
                stopped = True
                break
            if sample and time.monotonic() >= next_sample:
                next_sample = time.monotonic() + SAMPLE_S
                namespace = namespace or namespace_of_child(process.pid)
                if namespace:
                    peak = max(peak, count_in_namespace(namespace))
    finally:
        # The whole session: bwrap, its init and everything they started (with "none",
        # whatever stayed in the process group; the cgroup's close ends the rest).
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        if budget is not None:
            # The kernel may have killed a process at the limit just as the command ended.
            over_budget = over_budget or (budget.control.startswith("cgroup") and budget.over(process.pid))
            budget.close()
    duration = time.monotonic() - start
    capture.finish()
    status.finish()
    if stopped:
        raise SandboxStopped(f"stopped after {duration:.0f} s")
    text = capture.text()
    reports = [line[len(MARK):].split() for line in status.text().splitlines() if line.startswith(MARK)]
    exit_code = None if timed_out else process.returncode
    leftover = next((int(r[1]) for r in reports if r[0] == "leftover" and len(r) > 1), 0)
    # A sample every SAMPLE_S can miss a short peak on a busy machine; what was still running
    # when the command ended was there at once too (plus the init and bubblewrap's reaper).
    peak = max(peak, leftover + 2 if leftover else 0)
    allocation_failed = any(sign in text for sign in _SIGNS["memory"])
    return Outcome(
        exit_code=exit_code, timed_out=timed_out, duration_s=duration, output=text, output_bytes=capture.total,
        leftover_processes=leftover,
        memory_exhausted=over_budget or allocation_failed,
        limits=_limits_hit(limits, processes, text, reports, timed_out, capture, peak, exit_code, over_budget),
        peak_processes=peak, log_path=str(log_path or ""),
        memory_control=budget.control if budget is not None else "", peak_memory_bytes=budget.peak if budget is not None else 0,
        scratch=scratch,
    )




def _child_setup(apply_limits, status_write: int, budget):
    """In the child, before exec: into the memory budget's cgroup, the limits, and the init's report
    channel as descriptor 3."""
    def setup() -> None:
        if budget is not None:
            budget.join()
        apply_limits()
        if status_write != 3:
            os.dup2(status_write, 3)
    return setup


def _limits_hit(limits: Limits, processes: int, text: str, reports: list[list[str]], timed_out: bool,
                capture: OutputCapture, peak: int, exit_code: int | None, over_budget: bool) -> tuple[str, ...]:
    hit = []
    if timed_out:
        hit.append(f"time limit reached ({limits.wall_seconds:.0f} s)")
    if capture.total > limits.log_bytes:
        hit.append(f"output cut at {size_text(limits.log_bytes)} (of {size_text(capture.total)})")
    if limits.memory_bytes and (over_budget or any(sign in text for sign in _SIGNS["memory"])):
        hit.append(f"memory limit reached ({size_text(limits.memory_bytes)})")
    # The namespace's count leaves out bubblewrap's monitor (and, for an ordinary user, the few
    # processes the user had at the start): a peak within a handful of the limit is the limit.
    if limits.processes and (peak >= limits.processes - 4 or any(sign in text for sign in _SIGNS["processes"])
                             or _FORK_REFUSED.search(text)):
        hit.append(f"process limit reached ({limits.processes})")
    if limits.cpu_seconds and (exit_code in (128 + signal.SIGXCPU, -signal.SIGXCPU) or any(s in text for s in _SIGNS["cpu"])):
        hit.append(f"CPU time limit reached ({limits.cpu_seconds} s per process)")
    if limits.file_bytes and any(sign in text for sign in _SIGNS["file"]):
        hit.append(f"file size limit reached ({size_text(limits.file_bytes)})")
    for report in reports:
        if report[0] == "full" and len(report) > 1:
            size = limits.tmp_bytes if report[1] in ("/tmp", "/dev/shm") else limits.scratch_bytes
            hit.append(f"{report[1]} full ({size_text(size)})")
        elif report[0] == "seed" and len(report) > 1:
            hit.append(f"{report[1]} could not be filled within {size_text(limits.scratch_bytes)}")
    return tuple(hit)
