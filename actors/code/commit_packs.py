"""A few commits of a repository carried to another machine: the objects of their trees (not their
history) packed where the repository is, and unpacked on a node into a shallow bare repository
that clones, checkouts and `git show` take for the real one (each commit keeps its id). A node
keeps each copy in its own cache, named by the commits, so it receives a commit's objects once.

The commits' git submodules travel with them: the commit each submodule's gitlink names, packed
from the submodule's mirror in the repositories folder where the repository is (owner__name, as
--repos-dir holds them), and unpacked beside the repository's copy under the same name, so that a
testbed's checkout finds its mirror there as it would in --repos-dir (testbeds.check_out_submodules)."""
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

# A repository (owner/name) and commits of it: what one pack holds.
Commits = tuple[str, tuple[str, ...]]
GITLINK = "160000"  # the tree entry mode of a submodule's commit


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


def unpacked_copy(root: str | os.PathLike, parts: Sequence[Commits], packs: Callable[[], Sequence[bytes]]) -> Path:
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


def _unpack(bare: Path, repo: str, commits: tuple[str, ...], pack: bytes) -> None:
    """A shallow bare repository at `bare` holding `commits` from `pack`, a branch at each."""
    init = _git(["init", "--quiet", "--bare", str(bare)], bare.parent)
    if init.returncode != 0:
        raise CommitPackError(f"cannot make a repository in {bare.parent}: {_one_line(init.stderr)}")
    indexed = _git(["index-pack", "--stdin"], bare, stdin=pack)
    if indexed.returncode != 0:
        raise CommitPackError(f"the pack of {repo} does not unpack: {_one_line(indexed.stderr)}")
    # the commits' parents are not here: git reads them as the ends of a shallow history
    (bare / "shallow").write_text("".join(f"{c}\n" for c in sorted(commits)))
    for commit in commits:  # a clone of a repository without branches would be empty
        ref = _git(["update-ref", f"refs/heads/magis/{commit}", commit], bare)
        if ref.returncode != 0:
            raise CommitPackError(f"the pack of {repo} lacks {commit[:12]}: {_one_line(ref.stderr)}")
