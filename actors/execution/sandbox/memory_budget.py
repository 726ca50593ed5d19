"""One memory budget per sandbox: every process in it and its in-memory scratch, together.

The kernel's memory controller holds it where this process may create a cgroup beneath its own:
cgroup v1's memory hierarchy, or cgroup v2's unified one when its memory controller is enabled for
the cgroup's children (a delegated cgroup). The sandbox then runs in a cgroup of its own whose limit
is the budget: the kernel counts every page its processes allocate and every page of its in-memory
folders (tmpfs), and at the limit kills one of its processes; the caller then ends the whole sandbox.
`MAGIS_SANDBOX_CGROUP` names another cgroup folder to create them beneath (one delegated to you).

Otherwise a watchdog in the caller holds it: every WATCH_S it sums the memory of the sandbox's
process tree (their proportional set sizes) and what its in-memory folders hold, and ends the whole
sandbox when the sum is over the budget. A sandbox can overshoot by what it allocates between two looks, so each
process's address space is limited to the budget too (RLIMIT_AS, set by the sandbox).

Either way the sandbox's cgroup (made here, by this process) is removed when it ends; one left by a
process killed before it could (kill -9) is removed by the next sandbox of the same parent.
"""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from magis_ray.events.settings import node_settings

from .processes import pid_namespace

import psutil

WATCH_S = 0.05  # the watchdog's look, and how often a cgroup's kill count is read
PREFIX = "magis-sandbox-"
CLEANUP_S = 30.0  # how long the end of a sandbox may wait for its cgroup to empty


@dataclass(frozen=True)
class CgroupPlace:
    """Where sandboxes' cgroups are made: a cgroup folder of the memory controller's hierarchy."""

    version: int  # 1 or 2
    folder: Path


def _unescape(path: str) -> str:
    """mountinfo writes a space, a tab, a newline and a backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(root, mount point, filesystem type, super options) of each mount."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if len(fields) < dash + 4 or dash < 5:
            continue
        found.append((_unescape(fields[3]), _unescape(fields[4]), fields[dash + 1], set(fields[dash + 3].split(","))))
    return found


def _inside(root: str, mount_point: str, path: str) -> Path | None:
    """The folder of cgroup `path` under a hierarchy mounted at `mount_point` from `root`."""
    if root != "/" and path != root and not path.startswith(root.rstrip("/") + "/"):
        return None
    relative = path[len(root):] if root != "/" else path
    return Path(mount_point) / relative.lstrip("/")


def own_place(proc_cgroup: str, mountinfo: str) -> CgroupPlace | None:
    """This process's own cgroup of the memory controller, from /proc/self/cgroup and mountinfo:
    cgroup v1's memory hierarchy when the machine mounts one (the controller is then v1's alone),
    else the unified (v2) hierarchy."""
    mounts = _mounts(mountinfo)
    lines = [line.split(":", 2) for line in proc_cgroup.splitlines() if line.count(":") >= 2]
    v1 = [(root, point) for root, point, kind, options in mounts if kind == "cgroup" and "memory" in options]
    if v1:
        path = next((path for _, controllers, path in lines if "memory" in controllers.split(",")), None)
        folder = _inside(*v1[0], path) if path is not None else None
        return CgroupPlace(1, folder) if folder is not None else None
    for number, controllers, path in lines:
        if number == "0" and controllers == "":
            for root, point, kind, _ in mounts:
                if kind == "cgroup2":
                    folder = _inside(root, point, path)
                    return CgroupPlace(2, folder) if folder is not None else None
    return None


def find_place() -> tuple[CgroupPlace | None, str]:
    """Where this process may make sandboxes' cgroups, or why nowhere (one line)."""
    named = node_settings().sandbox_cgroup
    if named:
        folder = Path(named)
        if (folder / "memory.limit_in_bytes").exists():
            place = CgroupPlace(1, folder)
        elif (folder / "cgroup.controllers").exists():
            place = CgroupPlace(2, folder)
        else:
            return None, f"MAGIS_SANDBOX_CGROUP={named} is not a cgroup folder of the memory controller"
    else:
        try:
            place = own_place(Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text())
        except OSError as exc:
            return None, f"cannot read this process's cgroup: {exc.strerror}"
        if place is None:
            return None, "no memory controller mounted for this process's cgroup"
    if not place.folder.is_dir():
        return None, f"{place.folder} is not mounted here"
    if place.version == 2:
        try:
            enabled = (place.folder / "cgroup.subtree_control").read_text().split()
        except OSError as exc:
            return None, f"cannot read {place.folder}/cgroup.subtree_control: {exc.strerror}"
        if "memory" not in enabled:
            return None, f"cgroup v2: the memory controller is not enabled for the children of {place.folder}"
    if not os.access(place.folder, os.W_OK | os.X_OK):
        return None, f"cgroup v{place.version}: {place.folder} is not writable by this user"
    return place, ""


def _pids_in(folder: Path) -> list[int]:
    try:
        return [int(p) for p in (folder / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _counter(path: Path, name: str) -> int:
    """A `name value` line of a cgroup's flat-keyed file (memory.events, memory.stat, ...)."""
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _number(path: Path) -> int:
    """A cgroup file holding one number; 0 where the kernel has no such file."""
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 0


def _remove_stale(parent: Path) -> None:
    """Sandboxes' cgroups beneath `parent` whose maker is gone (killed before it could remove
    them): empty ones go; rmdir refuses any that still holds a process."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        maker = entry.name[len(PREFIX):].split("-", 1)[0]
        if maker.isdigit() and not psutil.pid_exists(int(maker)):
            try:
                os.rmdir(entry.path)
            except OSError:
                pass


class CgroupBudget:
    """The sandbox's own cgroup, its limit the budget; made at construction, removed by close()."""

    def __init__(self, place: CgroupPlace, limit: int) -> None:
        self.place, self.limit = place, limit
        self.control = f"cgroup v{place.version}"
        self.poll_s = WATCH_S
        self.peak = 0
        _remove_stale(place.folder)
        self.folder = place.folder / f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.folder.mkdir()
        try:
            if place.version == 1:
                self._write("memory.limit_in_bytes", limit)
                self._write("memory.memsw.limit_in_bytes", limit, optional=True)  # no swapping past it either
            else:
                self._write("memory.max", limit)
                self._write("memory.swap.max", 0, optional=True)
                self._write("memory.oom.group", 1, optional=True)  # the kernel kills the whole sandbox at once
        except OSError:
            self.folder.rmdir()
            raise

    def _write(self, name: str, value: int, optional: bool = False) -> None:
        try:
            (self.folder / name).write_text(str(value))
        except OSError:
            if not optional:
                raise

    def join(self) -> None:
        """In the sandbox's first process, before it runs anything: into the cgroup."""
        fd = os.open(self.folder / "cgroup.procs", os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)

    def over(self, tree_root: int) -> bool:
        """Whether the kernel killed one of its processes at the limit. Also keeps the peak of what
        cannot be reclaimed (anonymous memory and tmpfs; the file cache it can).

        A fast allocation can climb to the limit and be killed between two looks, so at a kill the
        peak is the kernel's own high-water mark: the kernel kills only once it has reclaimed what
        it could, so what it charged then could not be reclaimed. (Before a kill that mark would
        count the file cache too.)"""
        stat = self.folder / "memory.stat"
        if self.place.version == 1:
            self.peak = max(self.peak, _counter(stat, "total_rss") + _counter(stat, "total_shmem"))
            killed = _counter(self.folder / "memory.oom_control", "oom_kill") > 0
            high_water = self.folder / "memory.max_usage_in_bytes"
        else:
            self.peak = max(self.peak, _counter(stat, "anon") + _counter(stat, "shmem"))
            events = self.folder / "memory.events"
            killed = _counter(events, "oom_kill") > 0 or _counter(events, "oom_group_kill") > 0
            high_water = self.folder / "memory.peak"  # Linux 5.19 and later
        if killed:
            self.peak = max(self.peak, _number(high_water))
        return killed

    def close(self) -> None:
        """Ends whatever is still in the cgroup (a daemon the sandbox started) and removes it."""
        deadline = time.monotonic() + CLEANUP_S
        while True:
            pids = _pids_in(self.folder)
            if not pids:
                try:
                    self.folder.rmdir()
                    return
                except FileNotFoundError:
                    return
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)  # the killed processes exit


def _tree(root: int) -> list[int]:
    """`root` and every process under it (a PID namespace's orphans become its init's children).

    Walked through each process's own list of children: psutil's children() reads every process
    of the machine to map their parents, several times the cost of this walk, at every look."""
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                stack += [int(child) for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
            except (OSError, ValueError):
                continue
    return found


def _memory(process: psutil.Process, proportional: bool) -> int:
    """The process's resident set, or its proportional set size; 0 once it is gone."""
    try:
        return process.memory_full_info().pss if proportional else process.memory_info().rss
    except psutil.Error:  # ended, a zombie, or not readable by this user
        return 0


def _folder_usage(pid: int, folders: dict[str, int]) -> int:
    """What the sandbox's in-memory folders hold, seen through a process inside it: counted only
    once that process has the sandbox's root (not the host's) and each folder is the tmpfs of its
    size (not the host folder beneath it)."""
    try:
        root, host = os.stat(f"/proc/{pid}/root"), os.stat("/")
    except OSError:
        return 0
    if (root.st_dev, root.st_ino) == (host.st_dev, host.st_ino):
        return 0
    used = 0
    for folder, size in folders.items():
        try:
            stats = os.statvfs(f"/proc/{pid}/root{folder}")
        except OSError:
            continue
        if stats.f_blocks * stats.f_frsize <= size + 4096:
            used += (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    return used


@dataclass
class WatchdogBudget:
    """The budget held from outside: the sandbox's processes and in-memory folders, summed."""

    limit: int
    in_memory: dict[str, int] = field(default_factory=dict)  # sandbox path -> its tmpfs size
    control: str = "watchdog"
    poll_s: float = WATCH_S
    peak: int = 0
    # psutil's handle of each process seen at the last look, kept for the next (making one reads
    # the process's start time)
    _known: dict[int, psutil.Process] = field(default_factory=dict, repr=False)

    def join(self) -> None:
        """Nothing to join: the watchdog looks at the sandbox's processes from outside."""

    def used(self, tree_root: int) -> int:
        """What the sandbox holds: its processes' resident sets, summed (a look costs microseconds),
        and only when that is over the budget their proportional set sizes (a page shared by a
        forked child and its parent counts once; a look costs milliseconds per GiB); plus what
        its in-memory folders hold."""
        pids = _tree(tree_root)
        folders = 0
        if self.in_memory:
            inside = next((pid for pid in pids if pid_namespace(pid) not in (None, pid_namespace(tree_root))), None)
            if inside is not None:
                folders = _folder_usage(inside, self.in_memory)
        processes = self._processes(pids)
        resident = sum(_memory(p, proportional=False) for p in processes) + folders
        return resident if resident <= self.limit else sum(_memory(p, proportional=True) for p in processes) + folders

    def _processes(self, pids: list[int]) -> list[psutil.Process]:
        known = {}
        for pid in pids:
            if (process := self._known.get(pid)) is None:
                try:
                    process = psutil.Process(pid)
                except psutil.Error:
                    continue
            known[pid] = process
        self._known = known
        return list(known.values())

    def over(self, tree_root: int) -> bool:
        used = self.used(tree_root)
        self.peak = max(self.peak, used)
        return used > self.limit

    def close(self) -> None:
        """Nothing to remove: the watchdog made no cgroup."""


def open_budget(limit: int, control: str = "auto", in_memory: dict[str, int] | None = None):
    """The sandbox's budget of `limit` bytes: a cgroup of its own where one can be made (control
    "auto"), else (or with control "watchdog") the watchdog; None without a limit."""
    if not limit:
        return None
    if control == "auto":
        place, _ = find_place()
        if place is not None and _joinable(place):
            try:
                return CgroupBudget(place, limit)
            except OSError:
                pass
    return WatchdogBudget(limit, dict(in_memory or {}))


_JOINABLE: dict[CgroupPlace, bool] = {}


def _joinable(place: CgroupPlace) -> bool:
    """Whether a process of ours can move into a cgroup made there (cgroup v2 also asks for write
    access to the common ancestor's cgroup.procs): tried once per place, with `true`."""
    if place not in _JOINABLE:
        try:
            budget = CgroupBudget(place, 64 * 1024 * 1024)
        except OSError:
            _JOINABLE[place] = False
            return False
        try:
            _JOINABLE[place] = subprocess.run(["true"], preexec_fn=budget.join).returncode == 0
        except (OSError, subprocess.SubprocessError):
            _JOINABLE[place] = False
        finally:
            budget.close()
    return _JOINABLE[place]


def why_no_cgroup() -> str:
    """Why sandboxes here fall back to the watchdog ("" when they get a cgroup)."""
    place, why = find_place()
    if place is not None and not _joinable(place):
        return f"cgroup v{place.version}: cannot move a process into a cgroup made in {place.folder}"
    return why


def host_memory() -> int:
    """The memory this process's sandboxes can have at most: the machine's, or less where this
    process's cgroup (or one above it) has a lower limit (a container's)."""
    total = psutil.virtual_memory().total
    try:
        place = own_place(Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text())
    except OSError:
        place = None
    if place is None:
        return total
    name = "memory.limit_in_bytes" if place.version == 1 else "memory.max"
    for folder in (place.folder, *place.folder.parents):
        if not (folder / "cgroup.procs").exists():
            break  # above the hierarchy's root
        try:
            text = (folder / name).read_text().strip()
        except OSError:
            continue  # cgroup v2: no memory controller here
        if text.isdigit():
            total = min(total, int(text))
    return total


def workers_within_memory(workers: int, budget: int) -> tuple[int, str]:
    """How many sandboxes of `budget` bytes each may run at once on this machine: `workers`, or as
    many as its memory holds, with one line saying so (0 when not even one fits)."""
    from magis_ray.actors.execution.sandbox.capture import size_text

    host = host_memory()
    if not budget or not host or workers * budget <= host:
        return workers, ""
    fit = host // budget
    if fit < 1:
        return 0, f"a memory budget of {size_text(budget)} a sandbox is more than this machine's {size_text(host)}"
    return fit, (f"--workers {workers} at a memory budget of {size_text(budget)} each would need {size_text(workers * budget)}, "
                 f"more than this machine's {size_text(host)}: {fit} at once instead")
