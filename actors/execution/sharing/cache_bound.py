"""A node's cache of environments and testbeds, bounded: when a new entry lands and the cache holds
more than its bound (the node setting `env-cache-gb`), the least recently used entries go first.

An entry is a ready folder (ready.json) under the cache root (an environment) or under its
testbeds/ (a testbed). Each use touches its `last-used` file, and each entry records its size when
it lands (`size`), so that choosing what to evict reads two small files an entry rather than
walking every cached venv. An entry is never evicted while a build holds its lock, nor within
IN_USE_S of its last use (a test run of it may still be going: runs hold no lock). An environment
evicted under a cached testbed comes back when that testbed is next asked for: a testbed's get
asks for its environment first."""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

USED, SIZE = "last-used", "size"
IN_USE_S = 3600.0  # the default grading timeout is 1800 s; a run of an entry used this recently may still go on
GiB = 1024 ** 3


@dataclass(frozen=True)
class Entry:
    folder: Path
    used: float
    size: int


def mark_used(folder: Path) -> None:
    """This entry was used now."""
    with contextlib.suppress(OSError):  # a cache one may read but not write: never worth failing a use for
        (Path(folder) / USED).touch()  # an existing file's time is set to now


def disk_bytes(folder: Path) -> int:
    """The bytes `folder` holds on disk, each file once however many links it has there."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for base, folders, files in os.walk(folder):
        for name in (*folders, *files):
            info = os.lstat(os.path.join(base, name))
            if (info.st_dev, info.st_ino) not in seen:
                seen.add((info.st_dev, info.st_ino))
                total += info.st_blocks * 512
    return total


def record_size(folder: Path) -> int:
    """The bytes `folder` holds (disk_bytes), recorded beside it."""
    total = disk_bytes(folder)
    (Path(folder) / SIZE).write_text(f"{total}\n")
    return total


def entries(root: Path) -> list[Entry]:
    """The cache's ready entries: its environments and its testbeds. Never one on its way out:
    an evicted entry keeps its ready.json under its hidden name until its removal ends, and
    another thread or process may evict one between the listing and its reading."""
    found = []
    for parent in (Path(root), Path(root) / "testbeds"):
        if not parent.is_dir():
            continue
        for folder in parent.iterdir():
            if folder.name.startswith(".") or not (folder / "ready.json").is_file():
                continue
            try:
                found.append(_entry(folder))
            except FileNotFoundError:
                continue
    return found


def _entry(folder: Path) -> Entry:
    try:
        size = int((folder / SIZE).read_text())
    except (OSError, ValueError):
        size = record_size(folder)
    used_mark = folder / USED
    used = used_mark.stat().st_mtime if used_mark.exists() else (folder / "ready.json").stat().st_mtime
    return Entry(folder, used, size)


def evict_least_recent(root: Path, limit_bytes: int, keep: Path | None = None) -> list[Path]:
    """Evict entries, least recently used first, until the cache holds at most `limit_bytes`
    (0: no bound), never `keep`, one being built, or one used within IN_USE_S. Returns the evicted."""
    if limit_bytes <= 0:
        return []
    found = sorted(entries(root), key=lambda entry: entry.used)
    total = sum(entry.size for entry in found)
    evicted = []
    for entry in found:
        if total <= limit_bytes:
            break
        if entry.folder == keep or time.time() - entry.used < IN_USE_S:
            continue
        if _evict(entry.folder):
            total -= entry.size
            evicted.append(entry.folder)
    return evicted


def _evict(folder: Path) -> bool:
    """Take `folder` out of the cache unless a build holds its lock: renamed away under the lock
    (whoever asks for it next builds or fetches it anew), then removed."""
    lock_path = folder.parent / f"{folder.name}.lock"
    with open(lock_path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        # A grading's threads evict from one list each: another may have taken it out already.
        gone = folder.parent / f".evicted-{folder.name}-{os.getpid()}-{threading.get_ident()}"
        try:
            os.rename(folder, gone)
        except FileNotFoundError:
            return False
    shutil.rmtree(gone, onerror=_writable_then_retry)
    return True


def _writable_then_retry(function, path, _info) -> None:
    """A folder the build left read-only (readable_by_all keeps modes): made writable, then removed."""
    os.chmod(os.path.dirname(path), 0o755)
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, 0o755)
    function(path)


__all__ = ["mark_used", "record_size", "entries", "evict_least_recent", "IN_USE_S", "GiB"]
