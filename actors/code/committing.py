"""A run's diff as a branch of the user's repository: one commit on the base commit whose tree is
the base's with the diff applied (as `git apply` applies it), made in a scratch index, so that the
working tree, the index and the current branch stay exactly as they were."""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pygit2

from magis_ray.actors.code.repository import RepoError, missing_path
from magis_ray.events.settings import process_environment

# When the user's git has no identity configured, the commit is still made, under this name.
FALLBACK_SIGNATURE = ("magis-ray", "magis-ray@localhost")


class BranchExists(RepoError):
    """The branch `apply` was asked to make is there already."""


def _plain_git_env(git_dir: str, index: str) -> dict[str, str]:
    # unconfigured, as diff_applies checks it: no apply.whitespace or autocrlf of the user's
    return {**process_environment(), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C",
            "GIT_DIR": git_dir, "GIT_INDEX_FILE": index}


def _git(args: list[str], env: dict[str, str], cwd: str, stdin: bytes | None = None) -> str:
    result = subprocess.run(["git", *args], env=env, cwd=cwd, input=stdin, capture_output=True)
    if result.returncode != 0:
        why = " ".join(result.stderr.decode("utf-8", "replace").split())[:300]
        raise RepoError(f"git {args[0]} failed: {why or 'no reason given'}")
    return result.stdout.decode().strip()


def check_branch_name(repo: pygit2.Repository, branch: str) -> None:
    if not pygit2.reference_is_valid_name(f"refs/heads/{branch}") or branch.startswith("-"):
        raise RepoError(f"--branch {branch!r} is not a valid branch name")
    if branch in repo.branches.local:
        raise BranchExists(f"branch {branch} exists already in {Path(repo.workdir or repo.path)}: give another --branch")


def tree_with_diff(repo: pygit2.Repository, base_commit: str, diff: str) -> str:
    """The id of the tree of `base_commit` with `diff` applied, written to the object store only."""
    with tempfile.TemporaryDirectory(prefix="magis-apply-") as scratch:
        env = _plain_git_env(repo.path, str(Path(scratch) / "index"))
        _git(["read-tree", base_commit], env, scratch)
        _git(["apply", "--cached", "-"], env, scratch, diff.encode("utf-8", "surrogateescape"))
        return _git(["write-tree"], env, scratch)


def _signature(repo: pygit2.Repository) -> pygit2.Signature:
    try:
        return repo.default_signature
    except (KeyError, pygit2.GitError):
        return pygit2.Signature(*FALLBACK_SIGNATURE)


def branch_with_diff(repo_path: str | os.PathLike, base_commit: str, diff: str, message: str, branch: str) -> str:
    """Make `branch` at a new commit on `base_commit` holding `diff`; the commit's id. Refuses a
    branch that exists (BranchExists) and a diff that does not apply (RepoError); nothing else of
    the repository changes."""
    if (error := missing_path(repo_path)) is not None:
        raise error
    try:
        repo = pygit2.Repository(str(repo_path))
    except (pygit2.GitError, KeyError, OSError):
        raise RepoError(f"not a git repository: {repo_path}") from None
    check_branch_name(repo, branch)
    try:
        base = repo.revparse_single(base_commit).peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        raise RepoError(f"the run's base commit {base_commit[:10]} is not in {repo_path}") from None
    tree = tree_with_diff(repo, str(base.id), diff)
    signature = _signature(repo)
    commit = repo.create_commit(None, signature, signature, message, pygit2.Oid(hex=tree), [base.id])
    repo.branches.local.create(branch, repo.get(commit))
    return str(commit)


def add_worktree(repo_path: str | os.PathLike, path: str | os.PathLike, branch: str) -> None:
    """Check `branch` out in a new working tree at `path` (`git worktree add`), beside the user's."""
    if Path(path).exists():
        raise RepoError(f"--worktree {path} exists already")
    result = subprocess.run(["git", "-C", str(repo_path), "worktree", "add", "--quiet", str(Path(path).resolve()), branch],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RepoError(f"git worktree add failed: {' '.join(result.stderr.split())[:300]}")
