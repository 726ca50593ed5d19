"""`magis-ray submit ISSUE`: the issue read (a Markdown or text file, `-` for standard input,
`gh issue view --json` output, a SWE-bench record), its repository found, its base commit chosen."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

from magis_ray.events.errors import BadInput


class PreparedIssue(NamedTuple):
    issue: object  # IssueRecord
    notice: str  # one line for the user ("" when there is nothing to say)


def read_source(source: str) -> tuple[bytes, str]:
    """The issue's bytes and how to name where they came from."""
    if source == "-":
        return sys.stdin.buffer.read(), "standard input"
    try:
        return Path(source).read_bytes(), source
    except IsADirectoryError:
        raise BadInput(f"{source} is a folder, not an issue file") from None
    except OSError as exc:
        raise BadInput(f"cannot read {source}: {exc.strerror}") from None


def prepare_repository(repo: str | None, base: str | None, cwd: str = ".") -> PreparedIssue:
    """A repository at a commit, with no issue: --repo (else the current folder's repository) at
    --base (else HEAD), as a record whose problem is not stated."""
    from magis_ray.actors.code.repository import RepoError, RepoSnapshot
    from magis_ray.actors.code.workingcopy import open_working_copy
    from magis_ray.actors.runtime.issue import IssueDraft, complete

    try:
        copy = open_working_copy(repo or cwd, search=repo is None)
        commit = copy.commit(base or "HEAD")
        RepoSnapshot.open(copy.path, commit)
    except RepoError as exc:
        raise BadInput(str(exc)) from None
    issue = complete(IssueDraft(problem_statement=""), base_commit=commit, repo_name=copy.remote_name(),
                     folder=copy.folder, repo_path=str(copy.path.resolve()))
    return PreparedIssue(issue, "")


def prepare_issue(source: str, repo: str | None, repos_dir: str | None, base: str | None, cwd: str = ".") -> PreparedIssue:
    """The run's issue record. The repository: --repo, else the record's repo_path, else its
    owner__name clone in --repos-dir, else the repository of the current folder. The base: --base,
    else the record's base_commit, else HEAD (then uncommitted changes go unseen, and the notice
    says so)."""
    from magis_ray.actors.code.repository import RepoError, RepoSnapshot, find_repo
    from magis_ray.actors.code.workingcopy import open_working_copy
    from magis_ray.actors.runtime.issue import BadIssue, complete, read_issue

    data, where = read_source(source)
    try:
        draft = read_issue(data, where)
    except BadIssue as exc:
        raise BadInput(str(exc)) from None
    try:
        if repo or draft.repo_path:
            copy = open_working_copy(repo or draft.repo_path, search=False)
        elif repos_dir:
            if not draft.repo:
                raise BadInput(f"{where} names no repository (owner/name) to look for in --repos-dir; give --repo")
            copy = open_working_copy(find_repo(draft.repo, repos_dir=repos_dir), search=False)
        else:
            copy = open_working_copy(cwd)
        notice = ""
        if base:
            commit = copy.commit(base)
        elif draft.base_commit:
            commit = RepoSnapshot.open(copy.path, draft.base_commit).commit_id
        else:
            commit = copy.commit("HEAD")
            changed = copy.uncommitted()
            if changed:
                notice = (f"{changed} file(s) with uncommitted changes in {copy.path} are not seen: "
                          f"the run reads HEAD ({commit[:10]})")
        RepoSnapshot.open(copy.path, commit)  # fail now, before a run starts, on a repository we cannot read
    except RepoError as exc:
        raise BadInput(str(exc)) from None
    issue = complete(draft, base_commit=commit, repo_name=copy.remote_name(), folder=copy.folder,
                     repo_path=str(copy.path.resolve()))
    return PreparedIssue(issue, notice)
