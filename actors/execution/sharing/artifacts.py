"""The artifact store: built environments and testbeds shared by the nodes of a cluster.

A node that builds an environment or a testbed publishes it once, as a compressed archive named by
its key (`envs/KEY.tar.zst`, `testbeds/KEY.tar.zst`: archives.py says why this format; the
`KEY.tar.gz` of older nodes is still read) with its sha256 beside it (`KEY.tar.zst.sha256`, written
last: an archive without its digest, or with a digest it does not match, is never taken for a
whole one). A node that needs it fetches, verifies and unpacks it under its own cache root instead
of building; an archive that fails its digest is dropped from the store and the node builds.

Only one node builds a key at a time: the builder holds a claim in the store (`KEY.claim`, created
exclusively, holding an expiry that the builder renews while it builds), and the others poll for the
archive; a claim whose expiry has passed (its builder died) is taken over. A build that fails is
published too, as a small record in place of the archive (`KEY.failed`: the failed step, its
one-line reason, the node, when): the nodes waiting for the key, and those that ask for it later,
give their instances that failure at once rather than run the same build again. The record holds
for FAILURE_TTL_S, the time a node keeps its own failed build as the answer (builds.py), so
the cluster behaves as one node would: after it, the next node to need the key builds it again
(one node, under the claim), which a flaky index or a fixed mirror deserves; a fixed recipe is
another key anyway. A build that succeeds removes the record.

The store is a directory by default (a shared filesystem: NFS, EFS, Lustre), written with a
temporary name and a rename. A URL (s3://, gs://, memory://) goes through fsspec, the filesystem
layer of the PyData stack (pandas, dask, pyarrow read object storage through it), with the backend
package the user adds (s3fs, gcsfs). Object stores publish an object whole or not at all, so the
upload itself needs no rename; their claims are best effort (a write, then a read back of one's own
token), as most object stores have no exclusive create: two nodes racing for one claim may both
build, which costs time and never correctness (both publish the same key).

Archives unpack under any node's cache root: the files that name the builder's cache root or its
interpreter (a venv's pyvenv.cfg, script shebangs, .pth files, a testbed's chained prefix) are listed
in the archive at publish time and rewritten on unpack (relocation.py, which also moves a testbed
made from a donor's prefix).

The interpreter's own files stay out of an archive. A testbed's prefix is made of its interpreter's
files, hard-linked (testbeds.prefix.make_prefix: its standard library, its binaries, its headers; 90 per
cent of a testbed's bytes): they are listed in the archive, and the fetching node links them from
its own interpreter of the same version (the key holds the exact version) as its build would have.
A node whose interpreter lacks one of them builds instead, and says why in one line."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import socket
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from magis_ray.events.errors import BadInput, MagisError
from magis_ray.actors.execution.sharing.archives import LEGACY_SUFFIX, SUFFIX, ArchiveUnreadable, file_digest, pack, unpack
from magis_ray.actors.execution.sharing.relocation import retarget_links, rewrite_files

log = logging.getLogger(__name__)

ENVIRONMENTS, TESTBEDS = "envs", "testbeds"  # the kinds of artifact, and their folders in the store
BUILT, FETCHED, CACHED = "built", "fetched", "cached"  # how a node obtained an environment or a testbed
RELOCATION_FILE = ".artifact.json"  # in an archive: what names the builder's paths, rewritten on unpack
NOT_ARCHIVED = ("tmp", "last-used", "size")  # a build's scratch, and this node's own marks (cache_bound.py)
CLAIM_TTL_S = 120.0  # a claim its builder stops renewing lapses after this
FAILURE_TTL_S = 3600.0  # a failed build is the key's answer for this long, on its node and through the store
CLAIM_WAIT_S = 3600.0 + 600.0  # the longest a node waits for another's build (a build's wall limit and some)
POLL_S = 2.0


class ArtifactUnusableHere(MagisError):
    """A whole archive of the key, which this node cannot use (its interpreter lacks files the
    archive takes from it): the node builds instead. The message says why, in one line."""


class ArtifactStoreUnusable(BadInput):
    """The artifact store's location cannot be used; the message says why, in one line."""

    def __init__(self, location: str, reason: str) -> None:
        super().__init__(f"artifact store {location}: {reason}")
        self.reason = reason


class Backend:
    """The few operations the store needs, on names relative to its root ("envs/KEY.tar.gz")."""

    def exists(self, name: str) -> bool: ...
    def put(self, local: Path, name: str) -> None: ...
    def get(self, name: str, local: Path) -> None: ...
    def read_text(self, name: str) -> str | None: ...
    def write_text(self, name: str, text: str) -> None: ...
    def create(self, name: str, text: str) -> bool: ...
    def remove(self, name: str) -> None: ...


class DirectoryBackend(Backend):
    """A directory, on a shared filesystem for a cluster: whole files appear by rename, claims by O_EXCL."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, name: str) -> Path:
        return self.root / name

    def exists(self, name: str) -> bool:
        return self._path(name).exists()

    def _atomic(self, name: str, write) -> None:
        target = self._path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}.part")
        try:
            write(temporary)
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)

    def put(self, local: Path, name: str) -> None:
        self._atomic(name, lambda temporary: shutil.copyfile(local, temporary))

    def get(self, name: str, local: Path) -> None:
        shutil.copyfile(self._path(name), local)

    def read_text(self, name: str) -> str | None:
        try:
            return self._path(name).read_text()
        except FileNotFoundError:
            return None

    def write_text(self, name: str, text: str) -> None:
        self._atomic(name, lambda temporary: temporary.write_text(text))

    def create(self, name: str, text: str) -> bool:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w") as out:
            out.write(text)
        return True

    def remove(self, name: str) -> None:
        self._path(name).unlink(missing_ok=True)


class FsspecBackend(Backend):
    """Object storage (or any filesystem fsspec knows) at `url`."""

    def __init__(self, fs, root: str) -> None:
        self.fs, self.root = fs, root.rstrip("/")

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def exists(self, name: str) -> bool:
        return self.fs.exists(self._path(name))

    def put(self, local: Path, name: str) -> None:
        self.fs.put_file(str(local), self._path(name))

    def get(self, name: str, local: Path) -> None:
        self.fs.get_file(self._path(name), str(local))

    def read_text(self, name: str) -> str | None:
        try:
            return self.fs.cat_file(self._path(name)).decode()
        except FileNotFoundError:
            return None

    def write_text(self, name: str, text: str) -> None:
        self.fs.pipe_file(self._path(name), text.encode())

    def create(self, name: str, text: str) -> bool:
        if self.exists(name):
            return False
        self.write_text(name, text)
        return self.read_text(name) == text  # another node's write landed after ours: theirs

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._path(name))


def backend_for(location: str) -> Backend:
    """The backend of a store location: a directory path, or a URL fsspec can open.
    ArtifactStoreUnusable (one line) for a URL whose filesystem is unknown or not installed."""
    if location.startswith("file://"):
        location = location[len("file://"):]
    if "://" not in location:
        root = Path(location).expanduser()
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ArtifactStoreUnusable(location, f"cannot make the folder ({exc.strerror})") from None
        return DirectoryBackend(root.resolve())
    scheme = location.split("://", 1)[0]
    try:
        import fsspec
    except ImportError:
        raise ArtifactStoreUnusable(location, "URLs need the fsspec package (pip install fsspec)") from None
    try:
        fsspec.get_filesystem_class(scheme)
    except ValueError:
        raise ArtifactStoreUnusable(location, f"no filesystem for {scheme}:// "
                                    "(a folder, or a URL such as s3://bucket/path or gs://bucket/path)") from None
    except ImportError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "its package is missing"
        raise ArtifactStoreUnusable(location, f"{scheme}:// is not installed here ({first})") from None
    try:
        fs, root = fsspec.core.url_to_fs(location)
    except (ValueError, ImportError, OSError) as exc:
        raise ArtifactStoreUnusable(location, f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    return FsspecBackend(fs, root)


def open_artifact_store(location: str) -> ArtifactStore | None:
    """The store at `location` (a folder or a URL); None for "" (no sharing)."""
    return ArtifactStore(location) if location else None


@dataclass(frozen=True)
class Archived:
    """What the store holds of one key."""

    archive: str
    digest: str
    claim: str
    failure: str


@dataclass(frozen=True)
class PublishedFailure:
    """A failed build of a key, as the node that ran it published it."""

    step: str
    reason: str  # one line
    host: str
    pid: int
    time: float
    expires: float

    def text(self) -> str:
        return json.dumps({"step": self.step, "reason": self.reason, "host": self.host, "pid": self.pid,
                           "time": self.time, "expires": self.expires})

    @classmethod
    def parse(cls, text: str | None) -> PublishedFailure | None:
        """The record in `text`; None for none, or an unreadable one (a reader treats it as absent)."""
        if text is None:
            return None
        try:
            fields = json.loads(text)
            return cls(str(fields["step"]), str(fields["reason"]), str(fields["host"]), int(fields["pid"]),
                       float(fields["time"]), float(fields["expires"]))
        except (ValueError, KeyError, TypeError):
            return None

    @property
    def in_force(self) -> bool:
        return self.expires > time.time()


class BuildFailedElsewhere(MagisError):
    """The key's build failed on another node (or earlier on this one), and the store holds that
    failure still: the message is its reason, with where, when and until when."""

    def __init__(self, failure: PublishedFailure, record: str) -> None:
        when = time.strftime("%H:%M:%S", time.gmtime(failure.time))
        until = time.strftime("%H:%M:%S", time.gmtime(failure.expires))
        super().__init__(f"{failure.reason} (its build failed on {failure.host} at {when} UTC; every node gives "
                         f"this answer until {until} UTC, or until {record} is removed)")
        self.failure = failure


class Claim:
    """This node's claim to build a key, renewed in the background until released. `held` is
    False for a build that goes ahead without one (the wait ran out, or the store failed)."""

    def __init__(self, backend: Backend | None, name: str, token: str, ttl: float) -> None:
        self.backend, self.name, self.token, self.ttl = backend, name, token, ttl
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if backend is not None:
            self._thread = threading.Thread(target=self._renew, name=f"claim {name}", daemon=True)
            self._thread.start()

    @property
    def held(self) -> bool:
        return self.backend is not None

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            with contextlib.suppress(Exception):
                self.backend.write_text(self.name, claim_text(self.token, self.ttl))

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.backend is not None:
            with contextlib.suppress(Exception):
                current = self.backend.read_text(self.name)
                if current is not None and json.loads(current).get("token") == self.token:
                    self.backend.remove(self.name)


def claim_text(token: str, ttl: float) -> str:
    return json.dumps({"token": token, "host": socket.gethostname(), "pid": os.getpid(), "expires": time.time() + ttl})


def claim_lapsed(text: str | None) -> bool:
    """Whether a claim's holder stopped renewing it (or it is unreadable: a half-written claim)."""
    if text is None:
        return True
    try:
        return float(json.loads(text)["expires"]) < time.time()
    except (ValueError, KeyError, TypeError):
        return True


class ArtifactStore:
    """Archives of built folders, by kind and key, in a directory or an object store."""

    def __init__(self, location: str, claim_ttl: float = CLAIM_TTL_S, wait_s: float = CLAIM_WAIT_S,
                 poll_s: float = POLL_S) -> None:
        self.location = location
        self.backend = backend_for(location)
        self.claim_ttl, self.wait_s, self.poll_s = claim_ttl, wait_s, poll_s

    @staticmethod
    def names(kind: str, key: str, suffix: str = SUFFIX) -> Archived:
        archive = f"{kind}/{key}{suffix}"
        return Archived(archive, f"{archive}.sha256", f"{kind}/{key}.claim", f"{kind}/{key}.failed")

    def has(self, kind: str, key: str) -> bool:
        """Whether a whole archive of the key is published (its digest, written last, is there)."""
        return any(self.backend.exists(self.names(kind, key, suffix).digest) for suffix in (SUFFIX, LEGACY_SUFFIX))

    # --- publishing -------------------------------------------------------------------------

    def publish(self, kind: str, key: str, folder: Path, root: Path, interpreter_prefix: str = "") -> int:
        """Archive the ready `folder` (under the cache root `root`) as the key's artifact: the
        archive first, its digest last. Returns the archive's size in bytes."""
        folder, root = Path(folder), Path(root)
        names = self.names(kind, key)
        left_out = set(write_relocation(folder, root, interpreter_prefix))

        def leave_out(relative: str, top: bool) -> bool:
            return (top and relative in NOT_ARCHIVED) or relative.endswith(".lock") or relative in left_out

        with tempfile.TemporaryDirectory(prefix=".publish-", dir=root) as scratch:
            archive = Path(scratch) / f"{key}{SUFFIX}"
            digest = pack(folder, archive, leave_out)
            self.backend.put(archive, names.archive)
            self.backend.write_text(names.digest, f"{digest}  {key}{SUFFIX}\n")
            with contextlib.suppress(Exception):  # an earlier failure of the key is answered now
                self.backend.remove(names.failure)
            return archive.stat().st_size

    def publish_failure(self, kind: str, key: str, step: str, reason: str, ttl: float = FAILURE_TTL_S) -> None:
        """Record that the key's build failed at `step` for `reason`: the key's answer for `ttl` seconds."""
        now = time.time()
        reason = " ".join(reason.split())[:600]
        failure = PublishedFailure(step, reason, socket.gethostname(), os.getpid(), now, now + ttl)
        self.backend.write_text(self.names(kind, key).failure, failure.text())

    def failure(self, kind: str, key: str) -> PublishedFailure | None:
        """The key's published failure while it is in force; None for none (or one that expired)."""
        failure = PublishedFailure.parse(self.backend.read_text(self.names(kind, key).failure))
        return failure if failure is not None and failure.in_force else None

    def _refuse_failed(self, kind: str, key: str) -> None:
        failure = self.failure(kind, key)
        if failure is not None:
            raise BuildFailedElsewhere(failure, f"{self.location.rstrip('/')}/{self.names(kind, key).failure}")

    # --- fetching ---------------------------------------------------------------------------

    def fetch(self, kind: str, key: str, folder: Path, root: Path, interpreter_prefix: str = "") -> bool:
        """Put the key's artifact at `folder` (under this node's cache root `root`), relocated:
        True when done; False when the store has no whole archive of it, or the archive fails its
        digest (it is then dropped from the store, so that the node's build publishes a good one).
        ArtifactUnusableHere when the archive is whole but this node's interpreter (at
        `interpreter_prefix`) lacks files it takes from it."""
        folder, root = Path(folder), Path(root)
        for suffix in (SUFFIX, LEGACY_SUFFIX):
            names = self.names(kind, key, suffix)
            recorded = self.backend.read_text(names.digest)
            if recorded is not None:
                break
        else:
            return False
        expected = recorded.split()[0] if recorded.split() else ""
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".fetch-", dir=root) as scratch:
            archive = Path(scratch) / f"{key}{suffix}"
            try:
                self.backend.get(names.archive, archive)
            except FileNotFoundError:
                self.drop(kind, key, "its digest is there but not the archive", suffix)
                return False
            found = file_digest(archive)
            if found != expected:
                self.drop(kind, key, f"sha256 {found[:12]}, its digest says {expected[:12]}", suffix)
                return False
            unpacked = Path(scratch) / "unpacked"
            try:
                unpack(archive, unpacked)
            except ArchiveUnreadable as exc:
                self.drop(kind, key, f"it does not unpack: {exc}", suffix)
                return False
            relocate(unpacked, root, interpreter_prefix)
            if folder.exists():
                shutil.rmtree(folder)
            folder.parent.mkdir(parents=True, exist_ok=True)
            os.rename(unpacked, folder)
        return True

    def drop(self, kind: str, key: str, why: str, suffix: str = SUFFIX) -> None:
        """Remove a bad archive (digest first: a reader never pairs the old digest with a new archive)."""
        log.warning("artifact %s/%s in %s is corrupt (%s): dropped, building instead", kind, key, self.location, why)
        names = self.names(kind, key, suffix)
        for name in (names.digest, names.archive):
            with contextlib.suppress(Exception):
                self.backend.remove(name)

    # --- one builder at a time --------------------------------------------------------------

    def claim_or_wait(self, kind: str, key: str) -> Claim | None:
        """A claim to build the key (held, or not held when the wait ran out), or None once a whole
        archive of it is published by whoever held the claim. BuildFailedElsewhere when the key's
        build failed and that failure is in force (whether it came before or while we waited)."""
        names = self.names(kind, key)
        deadline = time.monotonic() + self.wait_s
        token = secrets.token_hex(8)
        while True:
            if self.has(kind, key):
                return None
            self._refuse_failed(kind, key)
            if self.backend.create(names.claim, claim_text(token, self.claim_ttl)):
                claim = Claim(self.backend, names.claim, token, self.claim_ttl)
                try:  # the builder before us published its failure and let go just before we looked
                    self._refuse_failed(kind, key)
                except BuildFailedElsewhere:
                    claim.release()
                    raise
                return claim
            current = self.backend.read_text(names.claim)
            if current is not None and claim_lapsed(current):
                log.warning("the claim on %s/%s lapsed (its builder stopped): taking it over", kind, key)
                self.backend.remove(names.claim)
                continue
            if time.monotonic() > deadline:
                log.warning("waited %.0f s for another node's build of %s/%s: building here too", self.wait_s, kind, key)
                return Claim(None, names.claim, token, self.claim_ttl)
            time.sleep(self.poll_s)


# --- relocation -----------------------------------------------------------------------------


# What may follow a path named in a file: a path within it, the end of a quoted string, a line's end
TERMINATORS = ("/", "'", '"', "\n")


def _needles(root: Path, interpreter_prefix: str) -> list[str]:
    """The spellings of the cache root and the interpreter's prefix in a file, each ended as a
    whole path ends (so that /x/3.9.1 is not found in /x/3.9.19)."""
    paths = [str(root).rstrip("/")] + ([interpreter_prefix.rstrip("/")] if interpreter_prefix else [])
    return [path + end for path in paths for end in TERMINATORS]


def interpreter_file(path: Path, relative: str, interpreter_prefix: str) -> bool:
    """Whether the file at `path` (`relative` to its folder: TOP/REST) is the interpreter's own: the
    file at REST in the interpreter's prefix, hard-linked, or copied with its size and time (a
    cache on another file system than the interpreter: make_prefix copies with copy2)."""
    if not interpreter_prefix or "/" not in relative:
        return False
    try:
        own, theirs = path.lstat(), os.lstat(os.path.join(interpreter_prefix, relative.split("/", 1)[1]))
    except OSError:
        return False
    if not stat.S_ISREG(theirs.st_mode):
        return False
    return (own.st_dev, own.st_ino) == (theirs.st_dev, theirs.st_ino) or \
        (own.st_size, own.st_mtime_ns) == (theirs.st_size, theirs.st_mtime_ns)


def write_relocation(folder: Path, root: Path, interpreter_prefix: str) -> list[str]:
    """Record which of `folder`'s files name the cache root or the interpreter's prefix: text files
    (rewritten on unpack) and binary ones (rewritten only where the new path has the old length);
    and which are the interpreter's own (left out of the archive, linked on unpack). Returns those."""
    needles = [needle.encode() for needle in _needles(root, interpreter_prefix)]
    text, binary, interpreters = [], [], []
    for base, folders, files in os.walk(folder):
        folders[:] = [name for name in folders if not (base == str(folder) and name in NOT_ARCHIVED)]
        for name in files:
            path = Path(base) / name
            if path.is_symlink() or not path.is_file() or name == RELOCATION_FILE:
                continue
            relative = str(path.relative_to(folder))
            if interpreter_file(path, relative, interpreter_prefix):
                interpreters.append(relative)
                continue
            data = path.read_bytes()
            if any(needle in data for needle in needles):
                (binary if b"\0" in data else text).append(relative)
    record = {"root": str(root), "interpreter_prefix": interpreter_prefix, "text": sorted(text), "binary": sorted(binary),
              "interpreter_files": sorted(interpreters)}
    (folder / RELOCATION_FILE).write_text(json.dumps(record, indent=1))
    return interpreters


def link_interpreter_files(unpacked: Path, relatives: list[str], interpreter_prefix: str) -> None:
    """The interpreter's own files the archive left out, each at TOP/REST linked from REST in this
    node's interpreter prefix (copied across file systems), as the build made them;
    ArtifactUnusableHere when this node's interpreter lacks any."""
    sources = [(relative, Path(interpreter_prefix) / relative.split("/", 1)[1]) for relative in relatives]
    missing = [str(source) for _, source in sources if not source.is_file()] if interpreter_prefix else [relatives[0]]
    if missing:
        raise ArtifactUnusableHere(f"this node's interpreter{' at ' + interpreter_prefix if interpreter_prefix else ''} "
                                   f"lacks {len(missing)} of the {len(relatives)} files of its own the archive leaves out "
                                   f"(first: {missing[0]})")
    for relative, source in sources:
        target = unpacked / relative
        try:
            os.link(source, target)
        except OSError:  # another file system, or a file this user may not link
            shutil.copy2(source, target)


def relocate(unpacked: Path, root: Path, interpreter_prefix: str) -> None:
    """Make an unpacked artifact name this node's cache root `root` and its interpreter's prefix:
    its recorded files rewritten, its links retargeted."""
    record = json.loads((unpacked / RELOCATION_FILE).read_text())
    if record.get("interpreter_files"):
        link_interpreter_files(unpacked, record["interpreter_files"], interpreter_prefix)
    recorded_prefix = record.get("interpreter_prefix", "")
    old = _needles(Path(record["root"]), recorded_prefix)
    new = _needles(root, (interpreter_prefix or recorded_prefix) if recorded_prefix else "")
    pairs = [(a, b) for a, b in zip(old, new) if a != b]
    if not pairs:
        return
    rewrite_files(unpacked, record["text"], [(a.encode(), b.encode()) for a, b in pairs])
    same_length = [(a.encode(), b.encode()) for a, b in pairs if len(a) == len(b)]
    if same_length:
        rewrite_files(unpacked, record["binary"], same_length)
    retarget_links(unpacked, pairs)


__all__ = ["ArtifactStore", "ArtifactStoreUnusable", "ArtifactUnusableHere", "BuildFailedElsewhere", "Claim", "PublishedFailure",
           "open_artifact_store", "ENVIRONMENTS", "TESTBEDS", "BUILT", "FETCHED", "CACHED", "FAILURE_TTL_S", "pack",
           "unpack", "file_digest"]
