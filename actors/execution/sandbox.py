"""Run a shell script under bubblewrap, holding whoever runs magis-ray, root included.

The threat: the script runs code nobody reviewed (a model's patch and test, anyone's predictions, a
repository's setup.py). What it gets:

- **No privileges.** It runs as an unprivileged uid with no capabilities and cannot gain any
  (identities.py says which uid). As root, bubblewrap mounts everything first and the code starts
  only after the drop, so the read-only mounts stay read-only.
- **Nothing of the host but the system.** The sandbox's root holds /usr (and its /bin, /lib
  links) and /etc, read-only, and what the caller mounts: the environment, the interpreter, the
  repository's objects. No home folder, no magis-ray store, cache or key, no /work, /opt or /var.
- **No network** (its own network namespace), unless a build asks for it (pip needs PyPI).
- **One memory budget** (`Limits.memory_bytes`) for all its processes and its in-memory scratch
  together: a cgroup of its own where the kernel's memory controller lets this process make one,
  else a watchdog (memory_budget.py); each process's address space is limited to it as well.
  Reaching it ends the whole sandbox.
- **Scratch on disk, bounded**: its /tmp and every scratch folder are filesystem images of a fixed
  size where they can be made (as root; scratch_disks.py), else in-memory filesystems of that
  size, which the memory budget counts. /dev/shm is always in memory (shared memory), counted too.
- **Other limits**, each reported in `Outcome.limits` when hit: wall-clock time (the whole tree is
  killed), CPU time per process, file size, processes (RLIMIT_NPROC, counted per uid: as root
  each sandbox has a uid of its own), the size of each scratch folder, and output: streamed to the
  log file up to a cap, kept in memory only as a head and a tail (capture.py).
- **Nothing left behind.** Its own PID namespace: when the command ends, a tiny init counts what
  is still running and exits, and the kernel kills the rest.

Scratch folders (`Scratch`) are how the workspace is given: a folder of a fixed size at `target`,
filled at the start with a copy of a host folder that the sandbox only reads. Whatever the code
writes there is bounded and is gone at the end.

`mode="none"` runs the same script directly on the host (only when the user trusts the code): the
same rlimits, memory budget and output capture, scratch folders as temporary folders, no isolation.
"""
from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from . import scratch_disks
from .capture import OutputCapture, size_text
from .identities import Identity, IdentityLease, running_as_root
from .memory_budget import open_budget
from magis_ray.events.settings import process_environment

BWRAP = "bwrap"
MiB = 1024 * 1024
GiB = 1024 * MiB
MARK = "magis-sandbox:"  # the init's reports, on a descriptor of their own (3)
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SEEDS = "/.magis-seeds"  # where scratch folders' sources are mounted, read-only
# The sandbox's processes, looked up by their PID namespace (never by name) this often.
SAMPLE_S = 0.25
STOP_CHECK_S = 0.5  # how soon a run sees its sandbox's stop
CPU_GRACE_S = 5


class SandboxUnavailable(Exception):
    """bubblewrap is missing or cannot create its namespaces here; the message is one line."""


class SandboxStopped(Exception):
    """The run was ended because its caller stopped (a grading interrupted): not the command's
    outcome, so nothing may record it as a failed build or test."""


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 1800.0
    # The sandbox's memory budget: all its processes and its in-memory scratch together (and each
    # process's address space); 0: no limit.
    memory_bytes: int = 8 * GiB
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


def bwrap_path() -> str | None:
    return shutil.which(BWRAP)


def check_available() -> None:
    """SandboxUnavailable unless a sandbox can be made here as this user."""
    path = bwrap_path()
    if path is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap) or pass --sandbox none")
    if running_as_root() and shutil.which("setpriv") is None:
        raise SandboxUnavailable("setpriv (util-linux) is missing: as root the sandbox needs it to drop to an unprivileged uid")
    probe = Sandbox().run("true", cwd="/", limits=Limits(wall_seconds=60))
    if not probe.ok:
        raise SandboxUnavailable(f"bubblewrap cannot create a sandbox here: {' '.join(probe.output.split())[:200]}")


# The sandbox's init, run as the sandboxed uid: fill the scratch folders, run the command, count
# what it left running, say which sized folders it filled, exit with its code; the kernel then
# kills the rest of the PID namespace. /bin/sh and coreutils only. Arguments: the folders to
# check, then "--", then the scratch pairs (seed, target), then "--", then the command.
_INIT = r"""
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


def _system() -> list[str]:
    """The host's system folders, read-only; merged-/usr links stay links."""
    argv: list[str] = []
    for path in SYSTEM_FOLDERS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    return argv


def _resolver_mounts() -> list[Mount]:
    """/etc/resolv.conf may point into /run (systemd-resolved): a build with the network needs it."""
    path = "/etc/resolv.conf"
    if os.path.islink(path):
        target = os.path.realpath(path)
        if os.path.exists(target) and not target.startswith("/etc/"):
            return [Mount(os.path.dirname(target), os.path.dirname(target))]
    return []


def _parents(targets: list[str]) -> list[str]:
    """The folders to make, readable by anyone, before mounting `targets` on the sandbox's root
    (bubblewrap makes missing ones readable by root alone): their ancestors outside the system
    folders and outside one another, shortest first."""
    def inside(path: str, folder: str) -> bool:
        return path == folder or path.startswith(folder.rstrip("/") + "/")

    found: set[str] = set()
    for target in targets:
        parts = Path(target).parts[1:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/" + "/".join(parts[:depth])
            if any(inside(folder, system) for system in SYSTEM_FOLDERS) or any(
                    inside(folder, other) for other in targets if other != target and inside(target, other)):
                continue
            found.add(folder)
    return sorted(found, key=lambda f: (f.count("/"), f))


def _passwd_data(identity: Identity) -> tuple[bytes, bytes]:
    """The host's /etc/passwd and /etc/group with the sandbox's user added."""
    passwd_line, group_line = identity.passwd_lines()
    data = []
    for path, line in (("/etc/passwd", passwd_line), ("/etc/group", group_line)):
        try:
            text = Path(path).read_text()
        except OSError:
            text = ""
        data.append((text if text.endswith("\n") or not text else text + "\n").encode() + line.encode())
    return data[0], data[1]


def _data_fd(data: bytes) -> int:
    fd = os.memfd_create("magis-sandbox-data", 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _rlimits(limits: Limits, processes: int) -> list[tuple[int, int]]:
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


def _own_process_count() -> int:
    """How many processes this (non-root) user runs now: the process limit counts them all, each
    of their threads included, by real uid."""
    uid, count = os.getuid(), 0
    for process in psutil.process_iter(["uids", "num_threads"]):
        if process.info["uids"] is not None and process.info["uids"].real == uid:
            count += process.info["num_threads"] or 1
    return count


def _namespace_of_child(pid: int) -> str | None:
    """The PID namespace of bwrap's child (the sandbox's first process), once it exists. (psutil
    has no namespaces: they are read from /proc.)"""
    try:
        for child in psutil.Process(pid).children():
            link = os.readlink(f"/proc/{child.pid}/ns/pid")
            if link != os.readlink(f"/proc/{pid}/ns/pid"):
                return link
    except (OSError, psutil.Error):
        return None
    return None


def _count_in_namespace(namespace: str) -> int:
    count = 0
    for pid in psutil.pids():
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") == namespace:
                count += 1
        except OSError:
            continue
    return count


@dataclass
class Sandbox:
    """Where the sandbox's command runs. `mode` "bwrap" is the real sandbox; "none" runs the same
    script directly on the host (only when the user asks for it) with the same rlimits and budget.
    `memory_control` "auto" holds the budget with a cgroup where one can be made, else with the
    watchdog; "watchdog" always with the watchdog. `scratch` "auto" puts /tmp and the scratch
    folders on disk where they can be, else in memory; "memory" always in memory."""

    mode: str = "bwrap"
    memory_control: str = "auto"
    scratch: str = "auto"
    # Set by the caller to end every run of this sandbox (in-process workers of a stopped
    # command, whose threads cannot be interrupted): each ends within STOP_CHECK_S, killed.
    stop: threading.Event | None = field(default=None, compare=False)

    def run(self, script: str, *, cwd: str, mounts: list[Mount] = (), scratches: list[Scratch] = (),
            env: dict[str, str] | None = None, limits: Limits = Limits(), network: bool = False,
            log_path: str | os.PathLike | None = None, build: bool = False) -> Outcome:
        """Run `script` with /bin/sh; `cwd` is a path as seen inside the sandbox. `build` runs it as
        the builds' uid (the owner of the environment cache) rather than a uid of its own."""
        self._check_stop()
        if self.mode == "bwrap" and bwrap_path() is None:
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap) or pass --sandbox none")
        env = dict(env or {})
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.setdefault("HOME", "/tmp/home")
        env.setdefault("TMPDIR", "/tmp")
        env.setdefault("LANG", "C.UTF-8")
        # The workspace's top folder belongs to the sandbox's filesystem, not to its user: git
        # must not refuse it ("dubious ownership"), as the harness's `safe.directory` says.
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"})
        with IdentityLease(for_build=build) as identity:
            if self.mode == "none":
                return self._run_direct(script, cwd, list(mounts), list(scratches), env, limits, log_path)
            return self._run_bwrap(script, cwd, list(mounts), list(scratches), env, limits, network, log_path, identity)

    def _check_stop(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise SandboxStopped("stopped")

    def scratch_on_disk(self) -> bool:
        return self.mode == "bwrap" and self.scratch == "auto" and not scratch_disks.why_not_on_disk()

    # --- bubblewrap ---------------------------------------------------------------------------

    def _run_bwrap(self, script, cwd, mounts, scratches, env, limits, network, log_path, identity: Identity) -> Outcome:
        tmp = str(limits.tmp_bytes)
        images, disks = self._scratch_disks(limits, len(scratches))
        on_disk = bool(disks)
        argv = scratch_disks.wrapper(disks) if on_disk else []
        argv += [bwrap_path() or BWRAP, *_system(), "--dev", "/dev", "--proc", "/proc"]
        argv += ["--bind", f"{disks[0][2]}/{scratch_disks.ROOT}", "/tmp"] if on_disk else ["--perms", "1777", "--size", tmp, "--tmpfs", "/tmp"]
        argv += ["--perms", "1777", "--size", tmp, "--tmpfs", "/dev/shm",
                 "--dir", "/var", "--symlink", "../tmp", "/var/tmp",
                 "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                 "--die-with-parent", "--new-session", "--clearenv"]
        if not network:
            argv.append("--unshare-net")
        if identity.drop:
            # Root: bubblewrap keeps only what setpriv needs to switch to the sandbox's uid.
            argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        else:
            argv += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        mounts = [*mounts, *(_resolver_mounts() if network else ())]
        seeded = [f"{SEEDS}/{n}" for n, scratch in enumerate(scratches) if scratch.seed is not None]
        targets = [m.target for m in mounts] + [t for s in scratches for t in (s.target, *s.aliases)]
        for folder in _parents(targets + seeded):
            argv += ["--perms", "0755", "--dir", folder]
        for mount in mounts:
            kind = "--bind" if mount.writable else "--ro-bind"
            argv += [f"{kind}-try" if mount.optional else kind, mount.source, mount.target]
        seeds: list[str] = []
        in_memory = {"/dev/shm": limits.tmp_bytes} if on_disk else {"/dev/shm": limits.tmp_bytes, "/tmp": limits.tmp_bytes}
        for number, scratch in enumerate(scratches):
            if on_disk:
                for target in (scratch.target, *scratch.aliases):
                    argv += ["--bind", f"{disks[number + 1][2]}/{scratch_disks.ROOT}", target]
            else:
                argv += ["--perms", "1777", "--size", str(limits.scratch_bytes), "--tmpfs", scratch.target]
                in_memory[scratch.target] = limits.scratch_bytes
            if scratch.seed is not None:
                argv += ["--ro-bind", scratch.seed, f"{SEEDS}/{number}"]
                seeds += [f"{SEEDS}/{number}", scratch.target]
        def data_fds() -> list[int]:
            """As root, the sandbox's /etc/passwd and /etc/group name its uid (made after the
            output pipes, so that none of them takes descriptor 3, the init's channel)."""
            fds = [_data_fd(data) for data in _passwd_data(identity)] if identity.drop else []
            for fd, target in zip(fds, ("/etc/passwd", "/etc/group")):
                argv.extend(["--perms", "0644", "--ro-bind-data", str(fd), target])
            return fds

        tail = []
        for name, value in env.items():
            tail += ["--setenv", name, value]
        tail += ["--remount-ro", "/", "--chdir", cwd]
        if identity.drop:
            tail += ["setpriv", f"--reuid={identity.uid}", f"--regid={identity.gid}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        checked = ["/tmp", "/dev/shm", *(s.target for s in scratches)]
        tail += ["/bin/sh", "-c", _INIT, "magis-init", *checked, "--", *seeds, "--", "/bin/sh", "-c",
                 f'mkdir -p "$HOME"; {script}']
        processes = limits.processes if identity.drop or not limits.processes else limits.processes + _own_process_count()
        try:
            return self._execute(argv, data_fds, tail, "/", {"PATH": process_environment().get("PATH", "")}, limits, processes, log_path,
                                 sample=True, in_memory=in_memory, scratch="disk" if on_disk else "memory")
        finally:
            if images:
                shutil.rmtree(images, ignore_errors=True)

    def _scratch_disks(self, limits: Limits, scratches: int) -> tuple[str, list[tuple[str, int, str]]]:
        """Where the images go, and /tmp's and then each scratch folder's (image, size, mount
        point), made; nothing when the scratch stays in memory (a disk that cannot be made now,
        the host's disk full say, leaves it there for this run)."""
        if not self.scratch_on_disk():
            return "", []
        images = scratch_disks.new_place()
        disks = [(f"{images}/{n}.img", size, f"{images}/{n}")
                 for n, size in enumerate([limits.tmp_bytes] + [limits.scratch_bytes] * scratches)]
        try:
            scratch_disks.make_images(disks)
        except OSError:
            shutil.rmtree(images, ignore_errors=True)
            return "", []
        return images, disks

    # --- directly on the host -----------------------------------------------------------------

    def _run_direct(self, script, cwd, mounts, scratches, env, limits, log_path) -> Outcome:
        """The same script with the host's paths: a mount's target is its source, a scratch folder
        a temporary folder; no isolation."""
        places = {m.target: m.source for m in mounts}
        made: list[str] = []
        seeds: list[str] = []
        for scratch in scratches:
            folder = scratch.host or tempfile.mkdtemp(prefix="magis-scratch-")
            if scratch.host is None:
                made.append(folder)
            places[scratch.target] = folder
            if scratch.seed is not None:
                seeds += [scratch.seed, folder]
        host_cwd = _translate(cwd, places)
        script = host_paths(script, places)
        home = tempfile.mkdtemp(prefix="magis-home-")
        made.append(home)
        env = {name: ":".join(_translate(part, places) for part in value.split(":")) for name, value in env.items()}
        env["HOME"] = home
        argv = ["/bin/sh", "-c", _INIT, "magis-init", "--", *seeds, "--", "/bin/sh", "-c", script]
        try:
            return self._execute(argv, lambda: [], [], host_cwd, env, limits,
                                 limits.processes and limits.processes + _own_process_count(), log_path, sample=False,
                                 in_memory={}, scratch="host")
        finally:
            for folder in made:
                shutil.rmtree(folder, ignore_errors=True)

    # --- running and watching -----------------------------------------------------------------

    def _execute(self, head, make_fds, tail, cwd, env, limits: Limits, processes: int, log_path, sample: bool,
                 in_memory: dict[str, int], scratch: str) -> Outcome:
        """Run `head + tail` (`make_fds` may add to `head` the descriptors it makes, which the child
        inherits) within the memory budget. The init reports on descriptor 3: a pipe of its own,
        apart from the output."""
        rlimits = _rlimits(limits, processes)

        def apply_limits() -> None:
            for kind, value in rlimits:
                # CPU time: SIGXCPU at the limit (a shell says "CPU time limit exceeded"), and
                # SIGKILL a little later for a process that ignores it.
                resource.setrlimit(kind, (value, value + CPU_GRACE_S if kind == resource.RLIMIT_CPU else value))

        budget = open_budget(limits.memory_bytes, self.memory_control, in_memory)
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
                if self.stop is not None:
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
                if self.stop is not None and self.stop.is_set():
                    stopped = True
                    break
                if sample and time.monotonic() >= next_sample:
                    next_sample = time.monotonic() + SAMPLE_S
                    namespace = namespace or _namespace_of_child(process.pid)
                    if namespace:
                        peak = max(peak, _count_in_namespace(namespace))
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


def _translate(path: str, places: dict[str, str]) -> str:
    """A sandbox path as the host has it, where a mount or a scratch folder puts it elsewhere."""
    for target, source in sorted(places.items(), key=lambda p: -len(p[0])):
        if path == target or path.startswith(target.rstrip("/") + "/"):
            return source + path[len(target):]
    return path


def host_paths(text: str, places: dict[str, str]) -> str:
    """A script's sandbox paths as the host has them (`cd /testbed` without a sandbox)."""
    for target, source in sorted(places.items(), key=lambda p: -len(p[0])):
        text = re.sub(rf"(?<![\w/.-]){re.escape(target)}(?=[/\s'\";)]|$)", lambda _: source, text)
    return text


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
