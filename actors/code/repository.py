"""Read-only access to a git repository at one commit, straight from git's object store.

Nothing here checks out files or looks at a working tree, so many runs can read
different commits of the same clone at once, and a dirty clone changes nothing.
"""
from __future__ import annotations

import os
import posixpath
import threading
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import FileMode, RepositoryOpenFlag

from magis_ray.events.errors import BadInput


class RepoError(BadInput):
    """A repository, commit or file that cannot be read; the message is one line."""


class UnsafePath(BadInput):
    """A path that must not be used inside a repository (absolute, escaping, in .git)."""


@dataclass(frozen=True)
class FileEntry:
    path: str  # repository-relative, "/"-separated
    blob_id: str  # full hex
    size: int  # bytes


MAX_NAME_BYTES = 255  # what ext4, xfs, btrfs, APFS and NTFS allow for one name


def safe_repo_path(path: str) -> str:
    """The normalized repository-relative form of a (model-provided) path.

    "./pkg//mod.py" -> "pkg/mod.py"; "a/../b.py" -> "b.py". Raises UnsafePath for an
    empty path, an absolute path, one that leaves the repository through "..", one inside
    the .git folder, and one no checkout could hold: NUL or other control characters, a
    backslash, a name longer than a filesystem allows.
    """
    stripped = path.strip()
    if not stripped or "\x00" in stripped:
        raise UnsafePath(f"not a usable path: {path!r}")
    if any(ord(c) < 32 or ord(c) == 127 for c in stripped):
        raise UnsafePath(f"control characters in a path: {path!r}")
    if "\\" in stripped:
        raise UnsafePath(f"a backslash in a path (folders are separated by '/'): {path!r}")
    too_long = [part for part in stripped.split("/") if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES]
    if too_long:
        raise UnsafePath(f"a file or folder name longer than {MAX_NAME_BYTES} bytes: {too_long[0][:40]}...")
    if stripped.startswith("/"):
        raise UnsafePath(f"absolute path not allowed: {path}")
    normalized = posixpath.normpath(stripped)
    if normalized == ".":
        raise UnsafePath(f"path names the repository root, not a file: {path}")
    parts = normalized.split("/")
    if parts[0] == "..":
        raise UnsafePath(f"path leaves the repository: {path}")
    # Case-insensitive like git itself: ".GIT/config" is the same folder on macOS/Windows.
    if any(part.lower() == ".git" for part in parts):
        raise UnsafePath(f"path inside .git not allowed: {path}")
    return normalized


def find_repo(
    repo_name: str,
    repo_path: str | os.PathLike | None = None,
    repos_dir: str | os.PathLike | None = None,
) -> Path:
    """Where the clone of SWE-bench repository `repo_name` ("owner/name") is.

    An explicit `repo_path` wins (and must be a repository); otherwise
    `repos_dir/owner__name`, the SWE-bench naming. Raises RepoError when neither is.
    """
    if repo_path is not None:
        _open(Path(repo_path))  # raises "not a git repository: ..."
        return Path(repo_path)
    owner, slash, name = repo_name.partition("/")
    if not (owner and slash and name) or "/" in name:
        raise RepoError(f"repository name must be owner/name, got: {repo_name!r}")
    if repos_dir is None:
        raise RepoError(f"no clone of {repo_name}: give a repository path or a repos folder")
    candidate = Path(repos_dir) / f"{owner}__{name}"
    if not candidate.exists():
        raise RepoError(f"no clone of {repo_name} in {repos_dir} (expected {candidate})")
    _open(candidate)
    return candidate


def missing_path(path: str | Path) -> RepoError | None:
    """The error for a path that is not there at all (rather than "not a git repository")."""
    return None if Path(path).exists() else RepoError(f"{path} does not exist")


def _open(path: Path) -> pygit2.Repository:
    if (error := missing_path(path)) is not None:
        raise error
    # NO_SEARCH: a folder inside some other repository must not silently open that one.
    try:
        return pygit2.Repository(str(path), flags=RepositoryOpenFlag.NO_SEARCH)
    except (pygit2.GitError, KeyError, OSError):
        raise RepoError(f"not a git repository: {path}") from None


def resolve_commit(repo: pygit2.Repository, commit: str, where: Path) -> pygit2.Commit:
    """A full id, an unambiguous short id, or any revision git understands ("HEAD~1")."""
    try:
        return repo.revparse_single(commit.strip()).peel(pygit2.Commit)
    except pygit2.AmbiguousError:
        raise RepoError(f"commit {commit} is ambiguous in {where}: give more digits") from None
    except (KeyError, ValueError, pygit2.GitError):  # unknown, malformed, or not a commit
        raise RepoError(f"commit {commit} not found in {where}") from None


_SKIPPED_MODES = {FileMode.COMMIT, FileMode.LINK}  # submodules and symlinks


class RepoSnapshot:
    """The files of one commit. Open with `RepoSnapshot.open(path, commit)`.

    Safe to share between threads (one lock around libgit2, whose objects are not
    thread-safe). Pickles as (path, commit id) and reopens on the other side, so it
    can travel to a Ray actor; the pygit2 handle itself never leaves this process.
    """

    def __init__(self, repo: pygit2.Repository, commit: pygit2.Commit, path: Path) -> None:
        self._repo = repo
        self._tree = commit.tree
        self._lock = threading.Lock()
        self.path = path
        self.commit_id = str(commit.id)
        self._files: list[FileEntry] | None = None

    @classmethod
    def open(cls, path: str | os.PathLike, commit: str) -> RepoSnapshot:
        where = Path(path)
        repo = _open(where)
        return cls(repo, resolve_commit(repo, commit, where), where)

    def __reduce__(self):
        return (RepoSnapshot.open, (str(self.path), self.commit_id))

    def __repr__(self) -> str:
        return f"RepoSnapshot({str(self.path)!r}, {self.commit_id[:12]})"

    # --- listing -------------------------------------------------------------------------

    def files(self) -> list[FileEntry]:
        """Every regular file of the commit, sorted by path (submodules and symlinks left out)."""
        with self._lock:
            if self._files is None:
                entries: list[FileEntry] = []
                self._walk(self._tree, "", entries)
                entries.sort(key=lambda e: e.path)
                self._files = entries
            return list(self._files)

    def _walk(self, tree: pygit2.Tree, prefix: str, out: list[FileEntry]) -> None:
        read_header = self._repo.odb.read_header  # the size without inflating the blob
        for entry in tree:
            path = prefix + entry.name
            if entry.type_str == "tree":
                self._walk(entry, path + "/", out)
            elif entry.type_str == "blob" and entry.filemode not in _SKIPPED_MODES:
                try:
                    size = read_header(entry.id)[1]
                except KeyError:  # a partial clone lists blobs it lacks; they cannot be read anyway
                    continue
                out.append(FileEntry(path, str(entry.id), size))

    # --- reading files of the commit -----------------------------------------------------

    def blob_id(self, path: str) -> str | None:
        """The blob of `path` at this commit, or None when there is no such file."""
        with self._lock:
            blob = self._blob_or_none(path)
            return None if blob is None else str(blob.id)

    def read_bytes(self, path: str) -> bytes:
        with self._lock:
            return self._blob(path).data

    def read_text(self, path: str) -> str:
        """The file decoded as UTF-8 (undecodable bytes become U+FFFD)."""
        return self.read_bytes(path).decode("utf-8", errors="replace")

    def is_binary(self, path: str) -> bool:
        """git's own test: a NUL byte or mostly non-printable bytes near the start."""
        with self._lock:
            return self._blob(path).is_binary

    # --- any blob of the repository (e.g. an older version of a file) ---------------------

    def has_blob(self, blob_id: str) -> bool:
        with self._lock:
            return self._blob_by_id_or_none(blob_id) is not None

    def text_of_blob(self, blob_id: str) -> str:
        with self._lock:
            data = self._blob_by_id(blob_id).data
        return data.decode("utf-8", errors="replace")

    def diff_blobs(self, old_blob_id: str | None, new_blob_id: str | None, path: str) -> str:
        """The git diff from one version of `path` to another; "" when they are the same.

        None (or "") on either side stands for an absent file, giving a
        new-file or deleted-file diff.
        """
        with self._lock:
            old = self._blob_by_id(old_blob_id) if old_blob_id else None
            new = self._blob_by_id(new_blob_id) if new_blob_id else None
            if old is None and new is None:
                return ""
            patch = pygit2.Patch.create_from(old, new, old_as_path=path, new_as_path=path)
            return patch.text or ""

    # --- lookups, called holding the lock -------------------------------------------------

    def _blob_or_none(self, path: str) -> pygit2.Blob | None:
        try:
            obj = self._tree[path]
        except (KeyError, ValueError):  # ValueError: a malformed path such as "a//b"
            return None
        if not isinstance(obj, pygit2.Blob) or obj.filemode in _SKIPPED_MODES:
            return None
        return obj

    def _blob(self, path: str) -> pygit2.Blob:
        blob = self._blob_or_none(path)
        if blob is None:
            raise RepoError(f"no file {path} at commit {self.commit_id[:12]}")
        return blob

    def _blob_by_id_or_none(self, blob_id: str) -> pygit2.Blob | None:
        try:
            obj = self._repo[blob_id]
        except (KeyError, ValueError):  # unknown, or not hex at all
            return None
        return obj if isinstance(obj, pygit2.Blob) else None

    def _blob_by_id(self, blob_id: str) -> pygit2.Blob:
        blob = self._blob_by_id_or_none(blob_id)
        if blob is None:
            raise RepoError(f"blob {blob_id} not found in {self.path}")
        return blob
