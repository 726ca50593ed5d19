"""Who the code in the sandbox runs as.

Run by an ordinary user, it runs as that user inside a user namespace of its own, with no
capabilities. Run by root, it runs as an unprivileged uid of its own: root sets up the sandbox's
mounts, then drops to that uid with no capabilities (and no way to regain them) before anything
untrusted starts. Each sandbox that runs at the same time gets another uid from a small pool, held
by a file lock for as long as it runs, because the kernel counts the process limit per uid: with
one shared uid, a fork bomb in one sandbox would starve the others. Environment builds share one
uid, the owner of the cached environments and of pip's cache, which every build writes.

MAGIS_SANDBOX_UIDS ("990000-990999" by default) names the pool; its first uid is the builds'."""
from __future__ import annotations

import fcntl
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from magis_ray.events.settings import node_settings

DEFAULT_POOL = (990000, 990999)
USER_NAME = "magis-sandbox"


def running_as_root() -> bool:
    return os.geteuid() == 0


def pool() -> tuple[int, int]:
    text = node_settings().sandbox_uids
    try:
        first, last = (int(part) for part in text.split("-"))
        if 0 < first < last:
            return first, last
    except ValueError:
        pass
    return DEFAULT_POOL


def build_identity() -> "Identity":
    """Who builds run as: the builds' uid as root, else the caller."""
    if not running_as_root():
        return Identity(os.getuid(), os.getgid(), drop=False)
    first = pool()[0]
    return Identity(first, first, drop=True)


@dataclass(frozen=True)
class Identity:
    """The uid and gid the sandboxed code runs as; `drop` when root must switch to them."""

    uid: int
    gid: int
    drop: bool

    def passwd_lines(self) -> tuple[str, str]:
        """/etc/passwd and /etc/group lines naming the uid, so tools that look the user up work."""
        return (f"{USER_NAME}:x:{self.uid}:{self.gid}:magis-ray sandbox:/tmp/home:/bin/sh\n",
                f"{USER_NAME}:x:{self.gid}:\n")


class IdentityLease:
    """`with IdentityLease(for_build) as identity:` the identity of one sandbox run."""

    def __init__(self, for_build: bool = False) -> None:
        self._for_build = for_build
        self._lock = None

    def __enter__(self) -> Identity:
        if self._for_build or not running_as_root():
            return build_identity()
        first, last = pool()
        folder = Path(tempfile.gettempdir()) / "magis-ray-sandbox-uids"
        folder.mkdir(mode=0o700, exist_ok=True)
        for uid in range(first + 1, last + 1):
            lock = open(folder / str(uid), "w")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            self._lock = lock
            return Identity(uid, uid, drop=True)
        raise RuntimeError(f"every sandbox uid of {first + 1}-{last} is in use (MAGIS_SANDBOX_UIDS)")

    def __exit__(self, *exc: object) -> None:
        if self._lock is not None:
            self._lock.close()  # the lock goes with the descriptor
            self._lock = None


def give_to(path: str | os.PathLike, identity: Identity) -> None:
    """Make `path` (a folder and everything in it) the identity's own, so the sandboxed code can
    write there; nothing to do when the code runs as the caller."""
    if not identity.drop:
        return
    os.chown(path, identity.uid, identity.gid)
    for root, folders, files in os.walk(path):
        for name in (*folders, *files):
            os.chown(os.path.join(root, name), identity.uid, identity.gid, follow_symlinks=False)
