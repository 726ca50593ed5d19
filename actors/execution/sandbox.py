"""Run a shell script under bubblewrap: no network, a read-only system, a writable workspace and a
private tmp, a wall-clock limit, a memory limit, and nothing of its process tree left at the end.

The memory limit is RLIMIT_AS (what `prlimit --as` / `ulimit -v` set): per process, inherited by
every child, and it needs no cgroup delegation (this machine's cgroup v1 tree belongs to whoever
runs the session). A process that asks for more gets ENOMEM (Python: MemoryError); the outcome
says so when its output shows it. The process tree is bubblewrap's own PID namespace: when the
command ends, a tiny init in the sandbox counts what is still running and exits, and the kernel
kills every process left in the namespace; on a timeout the whole bwrap session is killed.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BWRAP = "bwrap"
MiB = 1024 * 1024
LEFTOVER_MARK = "magis-sandbox: leftover processes:"
# Failures to allocate, as Python, glibc and the shell say them.
_MEMORY_SIGNS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")


class SandboxUnavailable(Exception):
    """bubblewrap is missing or cannot create its namespaces here; the message is one line."""


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 1800.0
    memory_bytes: int = 8 * 1024 * MiB  # per process (RLIMIT_AS); 0: no limit
    output_bytes: int = 64 * 1024  # kept of the combined output: its head and its tail


@dataclass(frozen=True)
class Mount:
    """A host path visible at `target` inside the sandbox; only `writable` ones can be changed."""

    source: str
    target: str
    writable: bool = False


@dataclass(frozen=True)
class Outcome:
    exit_code: int | None  # None when killed at the time limit
    timed_out: bool
    duration_s: float
    output: str  # stdout and stderr interleaved, cut to Limits.output_bytes
    output_bytes: int  # the full length before cutting
    leftover_processes: int = 0  # still running when the command ended; all killed
    memory_exhausted: bool = False  # an allocation failed (the output says so)
    full_output: str = field(default="", repr=False)  # uncut, for parsers; not for events

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def bwrap_path() -> str | None:
    return shutil.which(BWRAP)


def check_available() -> None:
    """SandboxUnavailable unless bubblewrap can create its namespaces here."""
    path = bwrap_path()
    if path is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap) or pass --sandbox none")
    probe = subprocess.run([path, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise SandboxUnavailable(f"bubblewrap cannot create a sandbox here: {' '.join(probe.stderr.split())[:200]}")


def cut(text: str, limit: int) -> str:
    """The head and the tail of `text` within `limit` characters, with what was left out said."""
    if len(text) <= limit:
        return text
    half = max(limit // 2 - 40, 0)
    return f"{text[:half]}\n... [{len(text) - 2 * half} characters cut] ...\n{text[-half:]}"


# The sandbox's init: run the command, count what it left running, exit with its code; the kernel
# then kills the rest of the PID namespace. /bin/sh and /proc only, so it works in any image.
_INIT = r"""
"$@"
rc=$?
n=0
for p in /proc/[0-9]*; do
  p=${p#/proc/}
  [ "$p" = "$$" ] || [ "$p" = 1 ] || n=$((n+1))
done
[ "$n" -gt 0 ] && echo "%s $n" >&2
exit $rc
""" % LEFTOVER_MARK


def _host_root() -> list[str]:
    """The host's top-level entries, read-only, on the sandbox's own root: a mount point such as
    /testbed can then be made there without touching the host (bwrap's root is a tmpfs, made
    read-only once everything is mounted)."""
    argv: list[str] = []
    for entry in sorted(os.scandir("/"), key=lambda e: e.name):
        if entry.name in ("proc", "dev", "tmp"):
            continue
        path = "/" + entry.name
        if entry.is_symlink():
            argv += ["--symlink", os.readlink(path), path]
        else:
            argv += ["--ro-bind", path, path]
    return argv


# Folders the sandbox replaces with its own empty tmpfs.
PRIVATE_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")


@dataclass
class Sandbox:
    """Where the sandbox's command runs. `mode` "bwrap" is the real sandbox; "none" runs the same
    script directly on the host (only when the user asks for it) with the same limits."""

    mode: str = "bwrap"
    hide: tuple[str, ...] = ()  # host folders replaced by an empty tmpfs (e.g. the user's home)

    def replaces(self, path: str | os.PathLike) -> bool:
        """Whether the sandbox shows its own empty folder where the host has `path` (under /tmp,
        /var/tmp, /dev/shm or a hidden folder): what lives there must be mounted to be seen."""
        if self.mode == "none":
            return False
        path = os.path.abspath(path)
        return any(path == folder or path.startswith(folder.rstrip("/") + "/") for folder in (*PRIVATE_FOLDERS, *self.hide))

    def command(self, script: str, cwd: str, mounts: list[Mount], env: dict[str, str], network: bool) -> list[str]:
        if self.mode == "none":
            return ["/bin/sh", "-c", script]
        argv = [bwrap_path() or BWRAP, *_host_root(), "--dev", "/dev", "--proc", "/proc",
                *(arg for folder in PRIVATE_FOLDERS for arg in ("--tmpfs", folder)),
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--clearenv"]
        if not network:
            argv.append("--unshare-net")
        for folder in self.hide:
            argv += ["--tmpfs", folder]
        for mount in mounts:
            argv += ["--bind" if mount.writable else "--ro-bind", mount.source, mount.target]
        for name, value in env.items():
            argv += ["--setenv", name, value]
        argv += ["--remount-ro", "/", "--chdir", cwd, "/bin/sh", "-c", _INIT, "magis-init", "/bin/sh", "-c", script]
        return argv

    def run(self, script: str, *, cwd: str, mounts: list[Mount] = (), env: dict[str, str] | None = None,
            limits: Limits = Limits(), network: bool = False, log_path: str | os.PathLike | None = None) -> Outcome:
        """Run `script` with /bin/sh; `cwd` is a path as seen inside the sandbox."""
        env = dict(env or {})
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.setdefault("HOME", "/tmp/home")
        env.setdefault("TMPDIR", "/tmp")
        env.setdefault("LANG", "C.UTF-8")
        if self.mode == "bwrap" and bwrap_path() is None:
            raise SandboxUnavailable("bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap) or pass --sandbox none")
        if self.mode == "none":
            host_cwd = next((m.source + cwd[len(m.target):] for m in mounts if cwd == m.target or cwd.startswith(m.target + "/")), cwd)
            script = f'mkdir -p "$HOME"; {script}'
            home = tempfile.mkdtemp(prefix="magis-home-")
            env["HOME"] = home
            run_cwd = host_cwd
        else:
            script = f'mkdir -p "$HOME"; {script}'
            home = None
            run_cwd = "/"
        argv = self.command(script, cwd, list(mounts), env, network)
        memory = limits.memory_bytes

        def limit_memory() -> None:
            if memory:
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

        with tempfile.TemporaryFile() as sink:
            start = time.monotonic()
            process = subprocess.Popen(argv, cwd=run_cwd, env=env if self.mode == "none" else {"PATH": os.environ.get("PATH", "")},
                                       stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                       start_new_session=True, preexec_fn=limit_memory)
            timed_out = False
            try:
                process.wait(timeout=limits.wall_seconds)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                # The whole session: bwrap, its init and everything they started (with "none",
                # whatever stayed in the process group).
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
            duration = time.monotonic() - start
            sink.seek(0)
            text = sink.read().decode("utf-8", "replace")
        if home:
            shutil.rmtree(home, ignore_errors=True)
        if log_path is not None:
            Path(log_path).write_text(text, encoding="utf-8")
        leftover = 0
        for line in text.splitlines()[-5:]:
            if line.startswith(LEFTOVER_MARK):
                leftover = int(line[len(LEFTOVER_MARK):].strip() or 0)
        return Outcome(
            exit_code=None if timed_out else process.returncode, timed_out=timed_out, duration_s=duration,
            output=cut(text, limits.output_bytes), output_bytes=len(text), leftover_processes=leftover,
            memory_exhausted=any(sign in text for sign in _MEMORY_SIGNS), full_output=text,
        )
