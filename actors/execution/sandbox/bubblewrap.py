"""The real sandbox: a shell script under bubblewrap, holding whoever runs magis-ray, root included.

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
writes there is bounded and is gone at the end."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from magis_ray.events.settings import process_environment

from . import scratch_disks
from .base import Sandbox, SandboxUnavailable
from .identities import Identity, IdentityLease, running_as_root
from .limits import Limits, Mount, Outcome
from .process import INIT, run_watched
from .processes import own_process_count

BWRAP = "bwrap"
NOT_INSTALLED = "bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap) or pass --sandbox none"
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SEEDS = "/.magis-seeds"  # where scratch folders' sources are mounted, read-only


def bwrap_path() -> str | None:
    return shutil.which(BWRAP)


@dataclass
class BubblewrapSandbox(Sandbox):
    """bubblewrap's sandbox. `scratch` "auto" puts /tmp and the scratch folders on disk where they
    can be, else in memory; "memory" always in memory."""

    scratch: str = "auto"
    isolated: ClassVar[bool] = True
    mode: ClassVar[str] = "bwrap"

    def check(self) -> None:
        if bwrap_path() is None:
            raise SandboxUnavailable(NOT_INSTALLED)
        if running_as_root() and shutil.which("setpriv") is None:
            raise SandboxUnavailable("setpriv (util-linux) is missing: as root the sandbox needs it to drop to an unprivileged uid")
        probe = self.run("true", cwd="/", limits=Limits(wall_seconds=60, memory_bytes=0))
        if not probe.ok:
            raise SandboxUnavailable(f"bubblewrap cannot create a sandbox here: {' '.join(probe.output.split())[:200]}")

    def scratch_on_disk(self) -> bool:
        return self.scratch == "auto" and not scratch_disks.why_not_on_disk()

    def _run(self, script, cwd, mounts, scratches, env, limits, network, log_path, build) -> Outcome:
        if bwrap_path() is None:
            raise SandboxUnavailable(NOT_INSTALLED)
        with IdentityLease(for_build=build) as identity:
            return self._run_as(identity, script, cwd, mounts, scratches, env, limits, network, log_path)

    def _run_as(self, identity: Identity, script, cwd, mounts, scratches, env, limits, network, log_path) -> Outcome:
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
            """The sandbox's /etc/hosts, and as root its /etc/passwd and /etc/group naming its uid
            (made after the output pipes, so that none of them takes descriptor 3, the init's
            channel)."""
            files = {"/etc/hosts": _hosts_data()}
            if identity.drop:
                files.update(zip(("/etc/passwd", "/etc/group"), _passwd_data(identity)))
            fds = []
            for target, data in files.items():
                fds.append(_data_fd(data))
                argv.extend(["--perms", "0644", "--ro-bind-data", str(fds[-1]), target])
            return fds

        tail = []
        for name, value in env.items():
            tail += ["--setenv", name, value]
        tail += ["--remount-ro", "/", "--chdir", cwd]
        if identity.drop:
            tail += ["setpriv", f"--reuid={identity.uid}", f"--regid={identity.gid}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
        checked = ["/tmp", "/dev/shm", *(s.target for s in scratches)]
        tail += ["/bin/sh", "-c", INIT, "magis-init", *checked, "--", *seeds, "--", "/bin/sh", "-c",
                 f'mkdir -p "$HOME"; {script}']
        processes = limits.processes if identity.drop or not limits.processes else limits.processes + own_process_count()
        try:
            return run_watched(argv, data_fds, tail, "/", {"PATH": process_environment().get("PATH", "")}, limits, processes,
                           log_path, sample=True, in_memory=in_memory, scratch="disk" if on_disk else "memory",
                           memory_control=self.memory_control, stop=self.stop)
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


def _hosts_data() -> bytes:
    """The host's /etc/hosts, with localhost named for IPv6 too where it is not: the sandbox's own
    network has both loopbacks, and tests that listen on "localhost" try both (a container's
    /etc/hosts names them; a machine's may name only 127.0.0.1)."""
    try:
        text = Path("/etc/hosts").read_text()
    except OSError:
        text = "127.0.0.1 localhost\n"
    text = text if text.endswith("\n") or not text else text + "\n"
    if not any(line.split()[:1] == ["::1"] and "localhost" in line.split()[1:] for line in text.splitlines() if line.strip()):
        text += "::1 localhost ip6-localhost ip6-loopback\n"
    return text.encode()


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


def check_available() -> None:
    """SandboxUnavailable unless a sandbox can be made here as this user."""
    BubblewrapSandbox().check()
