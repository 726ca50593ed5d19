"""A few commits of a repository carried to another machine: the objects of their trees (not their
history) packed where the repository is, and unpacked on a node into a shallow bare repository
that clones, checkouts and `git show` take for the real one (each commit keeps its id). A node
keeps each copy in its own cache, named by the commits, so it receives a commit's objects once."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable


class CommitPackError(Exception):
    """The commits cannot be packed or unpacked; the message is one line."""


def _git(args: list[str], cwd: Path | str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=str(cwd), input=stdin, capture_output=True, check=False)


def _one_line(data: bytes) -> str:
    return " ".join(data.decode("utf-8", "replace").split())[:300]


def has_commits(repo_path: str | os.PathLike, commits: tuple[str, ...]) -> bool:
    """Whether the repository at `repo_path` holds every one of `commits`."""
    if not Path(repo_path).is_dir():
        return False
    return all(_git(["cat-file", "-e", f"{c}^{{commit}}"], repo_path).returncode == 0 for c in commits)


def pack_commits(repo_path: str | os.PathLike, commits: tuple[str, ...]) -> bytes:
    """A git pack of `commits` and every tree and blob they name, none of their parents."""
    listed = _git(["rev-list", "--objects", "--no-walk", *commits], repo_path)
    if listed.returncode != 0:
        raise CommitPackError(f"cannot list the objects of {', '.join(c[:12] for c in commits)} in {repo_path}: "
                              f"{_one_line(listed.stderr)}")
    packed = _git(["pack-objects", "--quiet", "--stdout"], repo_path, stdin=listed.stdout)
    if packed.returncode != 0:
        raise CommitPackError(f"cannot pack {repo_path}: {_one_line(packed.stderr)}")
    return packed.stdout


def copy_key(repo: str, commits: tuple[str, ...]) -> str:
    """The name of a copy of `repo` at `commits` in a node's cache."""
    return hashlib.sha256("\n".join([repo, *sorted(commits)]).encode()).hexdigest()[:20]


def folder_name(repo: str) -> str:
    """A repository's folder in a repositories folder: owner__name, as --repos-dir holds them."""
    return (repo or "repository").replace("/", "__")


def unpacked_copy(root: str | os.PathLike, repo: str, commits: tuple[str, ...], pack: Callable[[], bytes]) -> Path:
    """The repositories folder under `root` holding this node's copy of `repo` at `commits`
    (ROOT/KEY/owner__name), unpacked from `pack()` unless an earlier task made it. Made aside and
    renamed into place, so a copy is whole or absent, whichever task of the node gets there first."""
    folder = Path(root) / copy_key(repo, commits)
    target = folder / folder_name(repo)
    if target.is_dir():
        return folder
    Path(root).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=root))
    try:
        bare = scratch / folder_name(repo)
        init = _git(["init", "--quiet", "--bare", str(bare)], scratch)
        if init.returncode != 0:
            raise CommitPackError(f"cannot make a repository in {scratch}: {_one_line(init.stderr)}")
        indexed = _git(["index-pack", "--stdin"], bare, stdin=pack())
        if indexed.returncode != 0:
            raise CommitPackError(f"the pack of {repo} does not unpack: {_one_line(indexed.stderr)}")
        # the commits' parents are not here: git reads them as the ends of a shallow history
        (bare / "shallow").write_text("".join(f"{c}\n" for c in sorted(commits)))
        for commit in commits:  # a clone of a repository without branches would be empty
            ref = _git(["update-ref", f"refs/heads/magis/{commit}", commit], bare)
            if ref.returncode != 0:
                raise CommitPackError(f"the pack of {repo} lacks {commit[:12]}: {_one_line(ref.stderr)}")
        try:
            os.rename(scratch, folder)
        except OSError:
            if not target.is_dir():  # not another task's copy in place: a real failure
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return folder
