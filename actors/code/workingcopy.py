"""What the user's own clone says, for the defaults of `magis-ray submit`: which repository the
current folder is in, the commit HEAD (or another revision) names, the GitHub name its remote
gives, and whether the working tree holds changes that a run (which reads a commit) will not see.
Read-only: nothing here changes the repository."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import FileStatus, RepositoryOpenFlag

from magis_ray.actors.code.repository import RepoError, missing_path

# github.com/OWNER/NAME(.git), over https, ssh (git@host:OWNER/NAME) or any other host
_REMOTE = re.compile(r"(?:^[a-z+]+://[^/]+/|^[^@/\s]+@[^:/\s]+:)([^/\s]+)/([^/\s]+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class WorkingCopy:
    path: Path  # the work tree's root (a bare repository's own folder)
    repo: pygit2.Repository

    @property
    def folder(self) -> str:
        return self.path.resolve().name

    def commit(self, rev: str = "HEAD") -> str:
        """The full id of the commit `rev` names; RepoError says why there is none."""
        if rev == "HEAD" and self.repo.head_is_unborn:
            raise RepoError(f"{self.path} has no commits yet: commit your code first (a run reads a commit, "
                            "never the working tree)")
        try:
            return str(self.repo.revparse_single(rev).peel(pygit2.Commit).id)
        except pygit2.AmbiguousError:
            raise RepoError(f"--base {rev} is ambiguous in {self.path}: give more digits") from None
        except (KeyError, ValueError, pygit2.GitError):
            raise RepoError(f"--base {rev}: no such commit in {self.path}") from None

    def remote_name(self) -> str:
        """"owner/name" from the `origin` remote (or the only one); "" when there is none."""
        names = list(self.repo.remotes.names())
        name = "origin" if "origin" in names else names[0] if len(names) == 1 else None
        if name is None:
            return ""
        match = _REMOTE.search(self.repo.remotes[name].url or "")
        return f"{match.group(1)}/{match.group(2)}" if match else ""

    def uncommitted(self) -> int:
        """How many tracked files have changes, staged or not (untracked files are not counted:
        the issue file and the store often are some)."""
        if self.repo.is_bare:
            return 0
        return sum(1 for flags in self.repo.status(untracked_files="no").values()
                   if flags not in (FileStatus.CURRENT, FileStatus.IGNORED))

    def head_is(self, commit: str) -> bool:
        return not self.repo.head_is_unborn and str(self.repo.head.target) == commit


def open_working_copy(path: str | Path, search: bool = True) -> WorkingCopy:
    """The repository that holds `path`: the folder itself, or (`search`) one above it."""
    if (error := missing_path(path)) is not None:
        raise error
    if not search:
        try:
            repo = pygit2.Repository(str(path), flags=RepositoryOpenFlag.NO_SEARCH)
        except (pygit2.GitError, KeyError, OSError):
            raise RepoError(f"not a git repository: {path}") from None
        return WorkingCopy(Path(path), repo)
    found = pygit2.discover_repository(str(path))
    if found is None:
        raise RepoError(f"not in a git repository: {Path(path).resolve()} (run in your repository, or give --repo PATH)")
    try:
        repo = pygit2.Repository(found)
    except pygit2.GitError as exc:
        # libgit2 refuses a repository another user owns, as git does ("dubious ownership")
        raise RepoError(f"cannot open the repository holding {Path(path).resolve()}: {exc}") from None
    return WorkingCopy(Path(repo.workdir or repo.path).resolve(), repo)
