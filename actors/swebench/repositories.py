"""A repositories folder (--repos-dir) filled for a dataset: each repository its instances name, as
OWNER__NAME, and beside them a mirror of each git submodule their commits check out (astropy's
astropy-helpers), where a testbed's checkout looks for it (testbeds.check_out_submodules). Each is
cloned from GitHub or from a mirror prefix (PREFIX/OWNER__NAME); one that is there already is
checked for the commits the dataset needs, and only what it lacks is fetched.

The clones are bare: grading and the team read commits, never a working tree, and a testbed's
checkout is made from the commit."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from magis_ray.actors.code.commit_packs import folder_name, has_commits, submodules_at
from magis_ray.events.settings import process_environment

GITHUB = "https://github.com"


@dataclass(frozen=True)
class Filled:
    """What became of one repository of the folder."""

    repo: str  # owner/name
    folder: Path
    how: Literal["present", "cloned", "fetched", "missing"]  # missing: it, or commits of it, could not be had
    source: str  # where it was (or would have been) cloned or fetched from
    commits: int  # how many of its commits the dataset needs
    reason: str = ""  # for `missing`: why, in one line
    submodule_of: str = ""  # the repository whose submodule it is ("": the dataset's own)


def source_url(repo: str, prefix: str = "") -> str:
    """Where `repo` (owner/name) comes from: PREFIX/OWNER__NAME under a mirror prefix, else GitHub."""
    return f"{prefix.rstrip('/')}/{folder_name(repo)}" if prefix else f"{GITHUB}/{repo}.git"


def commits_needed(records: list[dict]) -> dict[str, tuple[str, ...]]:
    """Each repository of the records, with the commits its instances are built and tested at
    (the base commits, and the environments' setup commits), in the dataset's order."""
    needed: dict[str, dict[str, None]] = {}
    for record in records:
        commits = needed.setdefault(record["repo"], {})
        for commit in (record.get("base_commit"), record.get("environment_setup_commit")):
            if commit:
                commits[commit] = None
    return {repo: tuple(commits) for repo, commits in needed.items()}


def fill(records: list[dict], repos_dir: str | os.PathLike, prefix: str = "",
         told: Callable[[Filled], None] = lambda filled: None) -> list[Filled]:
    """Fill `repos_dir` for the records' instances: their repositories, then the mirrors of the
    submodules their commits check out; `told(filled)` as each is done."""
    repos_dir = Path(repos_dir).resolve()
    repos_dir.mkdir(parents=True, exist_ok=True)
    done: list[Filled] = []
    submodules: dict[str, dict[str, None]] = {}  # mirror's owner/name -> the commits its gitlinks name
    parents: dict[str, str] = {}
    for repo, commits in commits_needed(records).items():
        done.append(_ensure(repo, commits, repos_dir, prefix))
        told(done[-1])
        folder = done[-1].folder
        for commit in commits:
            if has_commits(folder, (commit,)):
                for module in submodules_at(folder, commit):
                    if module.mirror:
                        submodules.setdefault(module.mirror, {})[module.commit] = None
                        parents.setdefault(module.mirror, repo)
    for mirror, commits in submodules.items():
        done.append(_ensure(mirror, tuple(commits), repos_dir, prefix, submodule_of=parents[mirror]))
        told(done[-1])
    return done


def _ensure(repo: str, commits: tuple[str, ...], repos_dir: Path, prefix: str, submodule_of: str = "") -> Filled:
    """`repo` in the folder with every one of `commits`: found there, cloned, or fetched into."""
    folder, source = repos_dir / folder_name(repo), source_url(repo, prefix)

    def filled(how, reason=""):
        return Filled(repo, folder, how, source, len(commits), reason, submodule_of)

    if folder.exists():
        if has_commits(folder, commits):
            return filled("present")
        how = "fetched"
        failed = _git(["fetch", "--quiet", "--tags", source, "+refs/heads/*:refs/heads/*"], folder)
    else:
        how = "cloned"
        failed = _git(["clone", "--quiet", "--bare", source, str(folder)], repos_dir)
    if failed:
        return filled("missing", f"{'git clone' if how == 'cloned' else 'git fetch'} {source}: {failed}")
    for commit in commits:  # a commit no branch or tag reaches (a pull request's): asked for by its id
        if not has_commits(folder, (commit,)):
            _git(["fetch", "--quiet", source, commit], folder)
    lacking = [commit[:12] for commit in commits if not has_commits(folder, (commit,))]
    if lacking:
        return filled("missing", f"{source} has no commit {', '.join(lacking)}")
    return filled(how)


def _git(args: list[str], cwd: Path) -> str:
    """Run git; "" when it succeeds, else its error in one line. The user's git configuration holds
    (a proxy, a credential helper); git never asks for a password here."""
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          env={**process_environment(), "GIT_TERMINAL_PROMPT": "0"})
    return "" if done.returncode == 0 else (" ".join(done.stderr.split())[:300] or f"exit status {done.returncode}")
