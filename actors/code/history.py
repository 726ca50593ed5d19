"""A repository's history, read for the tasks made from it: the commits of HEAD's first-parent line,
when each landed, and what one commit changed from its first parent, file by file, as `git diff`
prints it (for a merge, the change its merged branch brought). Read from git's object store through
pygit2, like repository.py: nothing here checks anything out or writes to the repository."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pygit2
from pygit2.enums import FileMode, SortMode

from magis_ray.actors.code.repository import resolve_commit

# Why a file's change is left out of the diffs: git would print no hunks `git apply` can apply
# from text alone (a binary file), or no file at all (a submodule's commit moved).
BINARY = "binary"
SUBMODULE = "submodule"
NOT_UTF8 = "not UTF-8 text"  # SWE-bench's records are JSON text, and so are ours


@dataclass(frozen=True)
class FileChange:
    """One file's change: its `git diff` text, or why it has none a text patch can carry."""

    path: str
    diff: str  # "" when `left_out` says why
    left_out: str = ""  # BINARY, SUBMODULE or NOT_UTF8; "" for a text change


@dataclass(frozen=True)
class CommitChange:
    """A commit and its change from its first parent."""

    commit: str
    parent: str | None  # the first parent; None for a root commit (or a shallow clone's edge)
    message: str
    # for a merge, the messages of the commits it brought in (the pull request's commits), oldest first
    merged_messages: tuple[str, ...]
    # when the change was first written: the author date, for a merge its merged commits' earliest
    written_at: datetime
    files: tuple[FileChange, ...]  # by path; a rename is a deletion and an addition

    @property
    def subject(self) -> str:
        return self.message.strip().split("\n", 1)[0]


def utc(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


class History:
    """The commits of a repository (a clone or a bare mirror), read-only."""

    def __init__(self, repo: pygit2.Repository, where: Path) -> None:
        self.repo = repo
        self.where = where

    def first_parent_line(self) -> list[str]:
        """HEAD's first-parent history, oldest first."""
        if self.repo.head_is_unborn:
            return []
        walker = self.repo.walk(self.repo.head.target, SortMode.NONE)
        walker.simplify_first_parent()
        return [str(commit.id) for commit in walker][::-1]

    def resolve(self, rev: str) -> str:
        """The full id of the commit a sha, short sha or revision ("v1.2^", "main~3") names."""
        return str(resolve_commit(self.repo, rev, self.where).id)

    def committed_at(self, commit: str) -> datetime:
        """When the commit landed: its committer date, the one `git log --since/--until` reads."""
        return utc(self.repo[commit].commit_time)

    def change(self, commit_id: str) -> CommitChange:
        """What `commit_id` changed from its first parent (a root commit's files are not read)."""
        commit = self.repo[commit_id]
        try:
            parent = commit.parents[0] if commit.parent_ids else None
        except KeyError:  # a parent the repository does not hold: read as a root commit
            parent = None
        merged = self._merged(commit)
        written = min([commit.author.time, *(c.author.time for c in merged)])
        files = () if parent is None else tuple(self._files(parent, commit))
        return CommitChange(commit=commit_id, parent=None if parent is None else str(parent.id), message=commit.message,
                            merged_messages=tuple(c.message for c in merged), written_at=utc(written), files=files)

    def _merged(self, commit: pygit2.Commit) -> list[pygit2.Commit]:
        """The commits a merge brings in: reachable from its other parents, not from its first."""
        if len(commit.parent_ids) < 2:
            return []
        walker = self.repo.walk(commit.parent_ids[1], SortMode.TOPOLOGICAL | SortMode.REVERSE)
        for other in commit.parent_ids[2:]:
            walker.push(other)
        walker.hide(commit.parent_ids[0])
        return list(walker)

    def _files(self, parent: pygit2.Commit, commit: pygit2.Commit):
        # No rename detection: each side of a move is classified by its own path, and a deletion
        # plus an addition applies as a rename does.
        for patch in self.repo.diff(parent, commit):
            delta = patch.delta
            path = delta.new_file.path if delta.new_file.mode else delta.old_file.path
            if FileMode.COMMIT in (delta.old_file.mode, delta.new_file.mode):
                yield FileChange(path, "", SUBMODULE)
            elif delta.is_binary:
                yield FileChange(path, "", BINARY)
            else:
                try:
                    yield FileChange(path, patch.data.decode("utf-8"))
                except UnicodeDecodeError:
                    yield FileChange(path, "", NOT_UTF8)
