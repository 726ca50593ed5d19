"""A few commits of a repository carried to another machine, packed where the repository is and
unpacked on a node into a bare repository that clones, checkouts and `git show` take for the real
one (each commit keeps its id). The pack holds the commits' trees and their parents' trees, and
every commit of their history without its trees, with the tags on that history: so `git describe`
and `git rev-list --count`, which setuptools_scm, versioneer and astropy derive a version from,
give on the node what they give on the repository, for a fraction of the history's size. The copy
is a partial clone, so git knows the old trees are absent, not lost. A node keeps each copy in its
own cache, named by the commits, so it receives a commit's objects once.

The commits' git submodules travel with them: the commit each submodule's gitlink names, packed
from the submodule's mirror in the repositories folder where the repository is (owner__name, as
--repos-dir holds them), and unpacked beside the repository's copy under the same name, so that a
testbed's checkout finds its mirror there as it would in --repos-dir (workspaces.check_out_submodules)."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from magis_ray.events.errors import MagisError

# A repository (owner/name) and commits of it: what one pack holds.
Commits = tuple[str, tuple[str, ...]]
GITLINK = "160000"  # the tree entry mode of a submodule's commit


class CommitPackError(MagisError):
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


@dataclass(frozen=True)
class CommitPack:
    """A git pack and the tags (ref, object id) whose objects it holds: a pack carries no refs."""

    data: bytes
    tags: tuple[tuple[str, str], ...] = ()


def _listed(repo_path: str | os.PathLike, args: list[str], commits: tuple[str, ...]) -> bytes:
    listed = _git(args, repo_path)
    if listed.returncode != 0:
        raise CommitPackError(f"cannot list the objects of {', '.join(c[:12] for c in commits)} in {repo_path}: "
                              f"{_one_line(listed.stderr)}")
    return listed.stdout


def pack_commits(repo_path: str | os.PathLike, commits: tuple[str, ...]) -> CommitPack:
    """A pack of `commits` with every tree and blob of theirs and of their parents (for `git show`),
    every commit of their history without its trees, and the tags on that history."""
    parents = _listed(repo_path, ["rev-parse", *(f"{c}^@" for c in commits)], commits).decode().split()
    trees = _listed(repo_path, ["rev-list", "--objects", "--no-walk", *commits, *parents], commits)
    history = _listed(repo_path, ["rev-list", *commits], commits)
    listed = _listed(repo_path, ["for-each-ref", "--format=%(refname) %(objectname)",
                                 *(f"--merged={c}" for c in commits), "refs/tags"], commits)
    tags = tuple(tuple(line.split(" ", 1)) for line in listed.decode().splitlines() if line)
    wanted = trees + history + "".join(f"{oid}\n" for _, oid in tags).encode()
    packed = _git(["pack-objects", "--quiet", "--stdout"], repo_path, stdin=wanted)
    if packed.returncode != 0:
        raise CommitPackError(f"cannot pack {repo_path}: {_one_line(packed.stderr)}")
    return CommitPack(packed.stdout, tags)


def copy_key(parts: Sequence[Commits]) -> str:
    """The name of a copy of the repositories and commits of `parts` in a node's cache."""
    lines = [line for repo, commits in parts for line in (repo, *sorted(commits))]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:20]


def folder_name(repo: str) -> str:
    """A repository's folder in a repositories folder: owner__name, as --repos-dir holds them."""
    return (repo or "repository").replace("/", "__")


def mirrors_beside(repo_path: str | os.PathLike) -> Path:
    """Where a repository's submodules' mirrors are: the folder that holds the repository
    (--repos-dir, or the parent of --repo)."""
    return Path(repo_path).resolve().parent


@dataclass(frozen=True)
class Submodule:
    """A submodule of a commit: its .gitmodules entry and the commit its gitlink names."""

    name: str
    path: str
    url: str
    commit: str

    @property
    def mirror(self) -> str | None:
        """The owner/name of the repository its URL names (its mirror is owner__name), or None."""
        match = re.search(r"[:/]([^/:]+)/([^/]+?)(?:\.git)?/?$", self.url)
        return f"{match.group(1)}/{match.group(2)}" if match else None


def submodules_at(repo_path: str | os.PathLike, commit: str) -> list[Submodule]:
    """The submodules of `commit`: the entries of its .gitmodules that its tree has a gitlink for."""
    listed = _git(["config", "--blob", f"{commit}:.gitmodules", "--get-regexp", r"^submodule\..*\.(path|url)$"], repo_path)
    if listed.returncode != 0:  # no .gitmodules at that commit, or no entry in it
        return []
    modules: dict[str, dict[str, str]] = {}
    for line in listed.stdout.decode("utf-8", "replace").splitlines():
        name_key, _, value = line.partition(" ")
        name, _, field = name_key[len("submodule."):].rpartition(".")
        modules.setdefault(name, {})[field] = value
    paths = [m["path"] for m in modules.values() if m.get("path")]
    if not paths:
        return []
    tree = _git(["ls-tree", "-r", "-z", commit, "--", *paths], repo_path)
    links = {}
    for entry in tree.stdout.decode("utf-8", "replace").split("\0"):
        info, _, path = entry.partition("\t")
        if info.split(" ")[0] == GITLINK:
            links[path] = info.split(" ")[2]
    return [Submodule(name, m["path"], m.get("url", ""), links[m["path"]])
            for name, m in modules.items() if m.get("path") in links]


def submodule_mirrors(repo_path: str | os.PathLike, commits: tuple[str, ...],
                      mirrors: str | os.PathLike | None) -> list[tuple[Commits, Path]]:
    """The submodules of `commits` that a mirror in `mirrors` (owner__name) holds the commit of:
    each mirror's repository (owner/name) with the commits needed of it, and the mirror's path. A
    submodule without such a mirror is left out: the node says so when it checks the tree out."""
    if not mirrors:
        return []
    needed: dict[str, list[str]] = {}
    for commit in commits:
        for module in submodules_at(repo_path, commit):
            if module.mirror and has_commits(Path(mirrors) / folder_name(module.mirror), (module.commit,)):
                needed.setdefault(module.mirror, [])
                if module.commit not in needed[module.mirror]:
                    needed[module.mirror].append(module.commit)
    return [((repo, tuple(found)), Path(mirrors) / folder_name(repo)) for repo, found in sorted(needed.items())]


def unpacked_copy(root: str | os.PathLike, parts: Sequence[Commits], packs: Callable[[], Sequence[CommitPack]]) -> Path:
    """The repositories folder under `root` holding this node's copy of each repository of `parts`
    at its commits (ROOT/KEY/owner__name: the repository first, then its submodules' mirrors),
    unpacked from `packs()` (a pack for each part, in order) unless an earlier task made it. Made
    aside and renamed into place, so a copy is whole or absent, whichever task of the node gets
    there first."""
    folder = Path(root) / copy_key(parts)
    target = folder / folder_name(parts[0][0])
    if target.is_dir():
        return folder
    Path(root).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=root))
    try:
        for (repo, commits), pack in zip(parts, packs(), strict=True):
            _unpack(scratch / folder_name(repo), repo, commits, pack)
        try:
            os.rename(scratch, folder)
        except OSError:
            if not target.is_dir():  # not another task's copy in place: a real failure
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return folder


def _unpack(bare: Path, repo: str, commits: tuple[str, ...], pack: CommitPack) -> None:
    """A bare repository at `bare` holding `commits` and their history from `pack`, a branch at each."""
    init = _git(["init", "--quiet", "--bare", str(bare)], bare.parent)
    if init.returncode != 0:
        raise CommitPackError(f"cannot make a repository in {bare.parent}: {_one_line(init.stderr)}")
    # the history's old trees are not here: a promisor pack of a partial clone says they are left
    # out on purpose (fsck and gc pass), and a command that needs one fails saying it is missing
    indexed = _git(["index-pack", "--stdin", "--promisor"], bare, stdin=pack.data)
    if indexed.returncode != 0:
        raise CommitPackError(f"the pack of {repo} does not unpack: {_one_line(indexed.stderr)}")
    for key, value in (("core.repositoryformatversion", "1"), ("extensions.partialClone", "origin"),
                       ("remote.origin.url", "/nonexistent/left-out"), ("remote.origin.promisor", "true")):
        _git(["config", key, value], bare)
    for ref, oid in pack.tags:
        tagged = _git(["update-ref", ref, oid], bare)
        if tagged.returncode != 0:
            raise CommitPackError(f"the pack of {repo} lacks the tag {ref}: {_one_line(tagged.stderr)}")
    for commit in commits:  # a clone of a repository without branches would be empty
        ref = _git(["update-ref", f"refs/heads/magis/{commit}", commit], bare)
        if ref.returncode != 0:
            raise CommitPackError(f"the pack of {repo} lacks {commit[:12]}: {_one_line(ref.stderr)}")
