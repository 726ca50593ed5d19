"""Real git repositories for tests, built with pygit2 (no network, no global git config).

    repo, base = make_repo(tmp_path / "repo", {"pkg/a.py": "x = 1\n"})
    later = commit_files(repo, {"pkg/a.py": "x = 2\n", "old.txt": None}, "change")
    work = checkout(repo, base, tmp_path / "work")   # a plain working copy of `base`
    git("apply", "--check", "fix.patch", cwd=work)

Commits are written from objects only: the repository's own working tree is never
touched, so a test can put anything there. Author, committer and time are fixed, so
the same files and history always give the same commit ids.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

SIGNATURE = pygit2.Signature("Test Author", "test@example.com", 1_700_000_000, 0)


@dataclass(frozen=True)
class Symlink:
    """A file value that commits a symbolic link pointing at `target`."""

    target: str


@dataclass(frozen=True)
class Submodule:
    """A file value that commits a submodule entry (a gitlink) at `commit_id`."""

    commit_id: str


FileValue = str | bytes | Symlink | Submodule | None


def make_repo(
    path: str | os.PathLike, files: dict[str, FileValue], message: str = "initial"
) -> tuple[pygit2.Repository, str]:
    """Create a non-bare repository at `path` whose first commit holds `files`.

    Returns the repository and the commit id (hex). See `commit_files` for the values.
    """
    repo = pygit2.init_repository(str(path))
    return repo, commit_files(repo, files, message)


def commit_files(repo: pygit2.Repository, files: dict[str, FileValue], message: str, at: int | None = None) -> str:
    """Commit on top of HEAD: each path gets its new content; None deletes it.

    A value is text (str, written as UTF-8), raw bytes, a Symlink or a Submodule.
    Paths are repository-relative with "/" separators; folders are created as needed.
    `at` is the commit's time (unix seconds; SIGNATURE's when None).
    Returns the new commit's id (hex); HEAD's branch moves to it.
    """
    index = pygit2.Index()
    parents = []
    if not repo.head_is_unborn:
        head = repo.head.peel(pygit2.Commit)
        index.read_tree(head.tree)
        parents.append(head.id)
    for path, value in files.items():
        if value is None:
            index.remove(path)
            continue
        oid, mode = _object_for(repo, value)
        index.add(pygit2.IndexEntry(path, oid, mode))
    tree_id = index.write_tree(repo)
    signature = SIGNATURE if at is None else signed_at(at)
    return str(repo.create_commit("HEAD", signature, signature, message, tree_id, parents))


def signed_at(at: int) -> pygit2.Signature:
    return pygit2.Signature(SIGNATURE.name, SIGNATURE.email, at, 0)


def merge_into_head(repo: pygit2.Repository, other: str, message: str, at: int | None = None) -> str:
    """A merge commit on HEAD's branch with HEAD as its first parent and `other` as its second; the
    two sides must not conflict. Returns its id (hex)."""
    head = repo.head.peel(pygit2.Commit)
    index = repo.merge_commits(head, repo[other])
    if index.conflicts is not None:
        raise ValueError(f"merging {other[:12]} into HEAD conflicts")
    signature = SIGNATURE if at is None else signed_at(at)
    parents = [head.id, pygit2.Oid(hex=other)]
    return str(repo.create_commit("HEAD", signature, signature, message, index.write_tree(repo), parents))


def _object_for(repo: pygit2.Repository, value: FileValue) -> tuple[pygit2.Oid, FileMode]:
    if isinstance(value, Symlink):
        return repo.create_blob(value.target.encode()), FileMode.LINK
    if isinstance(value, Submodule):
        # A gitlink names a commit of another repository; it need not exist here.
        return pygit2.Oid(hex=value.commit_id), FileMode.COMMIT
    data = value.encode("utf-8") if isinstance(value, str) else value
    return repo.create_blob(data), FileMode.BLOB


def git(*args: str, cwd: str | os.PathLike) -> str:
    """Run the git command line in `cwd`; raises CalledProcessError with git's stderr."""
    result = subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull},
    )
    if result.returncode != 0:
        raise subprocess.CalledProcessError(
            result.returncode, result.args, result.stdout, result.stderr
        )
    return result.stdout


def checkout(repo: pygit2.Repository, commit_id: str, dest: str | os.PathLike) -> Path:
    """A fresh working copy of `commit_id` at `dest` (a local `git clone`), for running git on."""
    dest = Path(dest)
    git("clone", "--quiet", "--no-checkout", repo.path, str(dest), cwd=dest.parent)
    git("checkout", "--quiet", "--detach", commit_id, cwd=dest)
    return dest


def files_at(repo: pygit2.Repository, rev: str) -> dict[str, bytes]:
    """Every file of the commit `rev` names, by path."""
    out: dict[str, bytes] = {}

    def walk(tree, prefix):
        for entry in tree:
            if entry.type_str == "tree":
                walk(repo.get(entry.id), prefix + entry.name + "/")
            else:
                out[prefix + entry.name] = repo.get(entry.id).data
    walk(repo.revparse_single(rev).peel(pygit2.Tree), "")
    return out


def read_tree_files(root: str | os.PathLike) -> dict[str, bytes]:
    """Every file under `root` (outside .git) as {relative posix path: bytes}."""
    root = Path(root)
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def user_clone(path: str | os.PathLike, files: dict[str, str], message: str = "first") -> tuple[Path, str]:
    """A repository as a user has one: `git init`, the files written to its working tree and
    committed with the git command line on branch `main`. Returns its path and HEAD's id."""
    path = Path(path)
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", ".", cwd=path)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git("add", ".", cwd=path)
    git("-c", "user.name=A User", "-c", "user.email=user@example.com", "commit", "-qm", message, cwd=path)
    return path, git("rev-parse", "HEAD", cwd=path).strip()
