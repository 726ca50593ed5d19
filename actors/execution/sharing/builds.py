"""A folder built once: once per node (a file lock; its record written last, so a half-built folder
is never taken for a ready one; a failure remembered for a while, a rerun would fail alike), and,
with the cluster's artifact store, once per cluster (fetched where another node built it, published
where this one did). What is built, and how, is the caller's: an environment or a testbed.

The record (`ready.json`) is a msgspec Struct of the caller's type, subclassing `BuildRecord`:
every field has a default, so a record written before a field existed still reads."""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

import msgspec

from magis_ray.events.errors import MagisError

from .artifacts import BUILT, CACHED, FAILURE_TTL_S, FETCHED, ArtifactStore, ArtifactUnusableHere, BuildFailedElsewhere

READY = "ready.json"


class BuildFailed(MagisError):
    """A build step failed; `step` names it and the message ends with the end of its log."""

    def __init__(self, step: str, message: str, log: str = "") -> None:
        super().__init__(f"{step}: {message}")
        self.step = step
        self.log = log


class BuildRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What a built folder's ready.json says: how long its build took and when it ended, and,
    once read, how this node obtained it (BUILT, FETCHED or CACHED; never written)."""

    build_seconds: float = 0.0
    time: float = 0.0
    obtained: str = CACHED


Record = TypeVar("Record", bound=BuildRecord)


def read_record(folder: Path, kind: type[Record]) -> Record:
    """The folder's ready.json as `kind` (fields it lacks take their defaults)."""
    return msgspec.json.decode((folder / READY).read_bytes(), type=kind)


def write_record(folder: Path, record: BuildRecord) -> None:
    """Record a built folder at once (a reader sees the old file or the new, never half)."""
    data = msgspec.to_builtins(record)
    data.pop("obtained", None)
    tmp = folder / f"{READY}.tmp"
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.rename(folder / READY)


@contextlib.contextmanager
def folder_lock(folder: Path):
    """The node-wide lock of a cache folder: who builds or changes it holds it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class SharedArtifact:
    """One key of the cluster's artifact store, as this node sees it: where a build is fetched
    from instead, and published to after (artifacts.py)."""

    store: ArtifactStore
    kind: str  # artifacts.ENVIRONMENTS or artifacts.TESTBEDS
    key: str
    root: Path  # this node's cache root
    interpreter_prefix: str  # this node's prefix of the interpreter the folder is built on


def locked_build(folder: Path, build: Callable[[], Record], kind: type[Record],
                 shared: SharedArtifact | None = None) -> tuple[Record, float]:
    """The record of `folder`, running `build()` for it unless it is ready; builds of one folder on
    one node wait for each other, and a failed one is not retried within FAILURE_TTL_S (a rerun
    would fail alike). With `shared`, the artifact store is asked first: a published archive is
    fetched rather than built, another node's build is waited for, and what is built here is
    published, a failure as well as a folder (another node's published failure is raised here as
    the BuildFailed it was). Returns the record, whose `obtained` says how this node has it (BUILT,
    FETCHED, CACHED), and the seconds this call spent building or fetching it."""
    with folder_lock(folder):
        if (folder / READY).is_file():
            return msgspec.structs.replace(read_record(folder, kind), obtained=CACHED), 0.0
        failed = folder / "failed.json"
        if failed.is_file():
            info = json.loads(failed.read_text())
            if time.time() - info["time"] < FAILURE_TTL_S:
                raise BuildFailed(info["step"], info["message"] + f" (an earlier build; remove {folder} to retry now)")
        start = time.monotonic()
        claim = None
        if shared is not None:
            fetched, claim = _fetch_or_claim(folder, shared)
            if fetched:
                return msgspec.structs.replace(read_record(folder, kind), obtained=FETCHED), time.monotonic() - start
        try:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            try:
                record = build()
            except BuildFailed as exc:
                message = str(exc).split(": ", 1)[1]
                failed.write_text(json.dumps({"time": time.time(), "step": exc.step, "message": message}))
                if shared is not None:
                    _publish_failure(shared, exc.step, message)
                raise
            seconds = time.monotonic() - start
            record = msgspec.structs.replace(record, build_seconds=seconds, time=time.time(), obtained=BUILT)
            write_record(folder, record)  # the last step: a half-built folder is never taken for a ready one
            if shared is not None:
                _publish(folder, shared)
        finally:
            if claim is not None:
                claim.release()
        return record, seconds


def _fetch_or_claim(folder: Path, shared: SharedArtifact):
    """(True, None) once the store's archive is at `folder`; else (False, the claim to build it).
    A store that fails (unreachable, unwritable), or an archive this node cannot use, is said in the
    log and the node builds; a failure of the key's build the store holds is raised as
    BuildFailed."""
    try:
        while True:
            try:
                if shared.store.fetch(shared.kind, shared.key, folder, shared.root, shared.interpreter_prefix):
                    return True, None
            except ArtifactUnusableHere as exc:
                logging.getLogger(__name__).warning("artifact %s/%s: %s; building it here", shared.kind, shared.key, exc)
                return False, None
            try:
                claim = shared.store.claim_or_wait(shared.kind, shared.key)
            except BuildFailedElsewhere as exc:
                raise BuildFailed(exc.failure.step, str(exc)) from None
            if claim is not None:
                # Published between our look and our claim: fetch it after all.
                if claim.held and shared.store.has(shared.kind, shared.key):
                    claim.release()
                    continue
                return False, claim
    except OSError as exc:
        logging.getLogger(__name__).warning("artifact store %s: %s; building %s here", shared.store.location, exc, shared.key)
        return False, None


def _publish(folder: Path, shared: SharedArtifact) -> None:
    """What this node built, published unless another node's archive is there already (this node
    could not use it, or stopped waiting for it): replacing an archive would fail the digest of a
    node fetching it meanwhile."""
    try:
        if shared.store.has(shared.kind, shared.key):
            return
        shared.store.publish(shared.kind, shared.key, folder, shared.root, shared.interpreter_prefix)
    except OSError as exc:  # the build stands; the other nodes build it too
        logging.getLogger(__name__).warning("artifact store %s: publishing %s failed: %s", shared.store.location, shared.key, exc)


def _publish_failure(shared: SharedArtifact, step: str, message: str) -> None:
    try:
        shared.store.publish_failure(shared.kind, shared.key, step, message, FAILURE_TTL_S)
    except OSError as exc:  # the failure stands here; another node finds it out by building
        logging.getLogger(__name__).warning("artifact store %s: publishing the failure of %s failed: %s",
                                            shared.store.location, shared.key, exc)
