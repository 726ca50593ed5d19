"""`magis-ray tasks make` without the command: a repository's history turned into candidate tasks in
SWE-bench's format, and a reason for each commit that gave none.

A candidate is a commit of HEAD's first-parent history (or of a list), whose change from its first
parent touches both test files and other files; for a merge, that is what its branch brought in. Its
base commit is that parent; its test patch, the change to test files; its patch, the rest. Its
problem statement is the text of the issues its message resolves (issue_links.py), else the message.
The lists of tests that decide it (FAIL_TO_PASS, PASS_TO_PASS) stay empty until it is validated.

Test files are told from the rest as SWE-bench's collection tells them (swebench 4.1.0,
swebench/collect/utils.py, `extract_patches`): a file is a test file when its path contains one of
the words "test", "tests", "e2e" or "testing", matched as they are written (so `tests/`,
`src/pkg/testing.py` and `test_x.py`, but also `latest.py` and `contest/`, and not `Tests/`).

A file's change that no text patch can carry (a binary file, a submodule's commit, text that is not
UTF-8) is left out of both patches, and the record lists it (`left_out`). A commit is passed over when
that leaves its tests or the rest without a change; otherwise it stays a candidate with the rest of
its change, and validation decides whether the tests still tell the fix without the left-out files.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import msgspec

from magis_ray.events.errors import BadInput

from magis_ray.actors.code.history import CommitChange, FileChange, History
from magis_ray.actors.code.workingcopy import WorkingCopy, open_working_copy
from magis_ray.actors.runtime.issue import github_name
from magis_ray.actors.swebench import issue_links
from magis_ray.actors.swebench.issue_links import ListedIssue
from magis_ray.actors.swebench.task_records import LeftOut, PassedOver, TaskRecord

TEST_WORDS = ("test", "tests", "e2e", "testing")  # swebench.collect.utils.extract_patches

# why a commit is passed over
NO_PARENT = "no parent (a root commit, or the edge of a shallow clone)"
NO_CHANGE = "no change from its first parent"
NO_MESSAGE = "no linked issue and an empty commit message"
NO_TEST_CHANGE = "no test file changed"
NO_CODE_CHANGE = "only test files changed"
TESTS_LEFT_OUT = "its test changes are all binary, submodules or not UTF-8"
CODE_LEFT_OUT = "its non-test changes are all binary, submodules or not UTF-8"

_OWNER_NAME = re.compile(r"^[\w.-]+/[\w.-]+$")
ID_DIGITS = 12  # of the commit's id in an instance id; the whole id where two candidates share them


class TaskInputError(BadInput):
    """Input `tasks make` cannot use; the message is one line."""


def is_test_path(path: str) -> bool:
    return any(word in path for word in TEST_WORDS)


@dataclass(frozen=True)
class Made:
    records: list[TaskRecord]
    passed_over: list[PassedOver]

    @property
    def commits(self) -> int:
        return len(self.records) + len(self.passed_over)

    def reasons(self) -> list[tuple[str, int]]:
        """Why commits were passed over, the most frequent reason first."""
        return Counter(p.reason for p in self.passed_over).most_common()


def open_history(path: str | Path, search: bool = False) -> tuple[History, WorkingCopy]:
    """The history of the repository at `path` (or, `search`, of the one holding it)."""
    copy = open_working_copy(path, search=search)
    return History(copy.repo, copy.path), copy


def repository_name(copy: WorkingCopy, given: str | None) -> str:
    """owner/name: `given`, else what the `origin` remote (or the only one) names."""
    name = given or copy.remote_name()
    if not name:
        raise TaskInputError(f"{copy.path} has no remote that names its repository: give --repo-name OWNER/NAME")
    if not _OWNER_NAME.match(name):
        raise TaskInputError(f"the repository's name must be OWNER/NAME, not {name!r}")
    return name


def commits_to_read(history: History, since: datetime | None, until: datetime | None,
                    revisions: list[str] | None = None) -> list[str]:
    """The commits listed (`revisions`, in their order, each once), else HEAD's first-parent history,
    oldest first; either way those committed at or after `since` and before `until`."""
    listed = history.first_parent_line() if revisions is None else dict.fromkeys(history.resolve(r) for r in revisions)
    commits = [c for c in listed if (since is None or history.committed_at(c) >= since)
               and (until is None or history.committed_at(c) < until)]
    if not commits:
        where = "the listed commits" if revisions is not None else "HEAD's first-parent history"
        window = (f" from {since:%Y-%m-%d %H:%M}" if since else "") + (f" before {until:%Y-%m-%d %H:%M}" if until else "")
        raise TaskInputError(f"no commits to read: {where}{window} holds none")
    return commits


def check_issues_belong(issues: dict[int, ListedIssue], repo_name: str) -> None:
    """An issue whose url names another repository means the wrong file was given."""
    for issue in issues.values():
        owner_name = github_name(issue.url)
        if owner_name and owner_name.lower() != repo_name.lower():
            raise TaskInputError(f"issue #{issue.number} is one of {owner_name}, not of {repo_name} ({issue.url})")


def make_tasks(history: History, commits: list[str], repo_name: str,
               issues: dict[int, ListedIssue] | None = None) -> Made:
    """A candidate task for each of `commits` that gives one, and why each other gives none."""
    records: list[TaskRecord] = []
    passed_over: list[PassedOver] = []
    for commit in commits:
        change = history.change(commit)
        made = task_from(change, repo_name, issues or {})
        if isinstance(made, str):
            passed_over.append(PassedOver(commit=commit, subject=change.subject, reason=made))
        else:
            records.append(made)
    shared = {prefix for prefix, n in Counter(r.commit[:ID_DIGITS] for r in records).items() if n > 1}
    records = [_with_whole_id(r) if r.commit[:ID_DIGITS] in shared else r for r in records]
    return Made(records, passed_over)


def _instance_id(repo_name: str, digits: str) -> str:
    return f"{repo_name.replace('/', '__')}-{digits}"


def _with_whole_id(record: TaskRecord) -> TaskRecord:
    return msgspec.structs.replace(record, instance_id=_instance_id(record.repo, record.commit))


def task_from(change: CommitChange, repo_name: str, issues: dict[int, ListedIssue]) -> TaskRecord | str:
    """The candidate task `change` gives, or the reason it gives none. Its instance id is
    OWNER__NAME-<the first 12 digits of the commit's id> (make_tasks lengthens ids that clash)."""
    if change.parent is None:
        return NO_PARENT
    if not change.files:
        return NO_CHANGE
    tests = [f for f in change.files if is_test_path(f.path)]
    code = [f for f in change.files if not is_test_path(f.path)]
    if not tests:
        return NO_TEST_CHANGE
    if not code:
        return NO_CODE_CHANGE
    if all(f.left_out for f in tests):
        return TESTS_LEFT_OUT
    if all(f.left_out for f in code):
        return CODE_LEFT_OUT
    text = "\n".join([change.message, *change.merged_messages])
    linked, source = issue_links.linked_issues(text, issues)
    if linked:
        statement, hints = issue_links.problem_statement(linked), issue_links.hints_text(linked, change.written_at)
    elif change.message.strip():
        statement, hints = change.message, ""
    else:
        return NO_MESSAGE
    return TaskRecord(
        repo=repo_name, instance_id=_instance_id(repo_name, change.commit[:ID_DIGITS]),
        base_commit=change.parent, patch=_joined(code), test_patch=_joined(tests), problem_statement=statement,
        hints_text=hints, created_at=change.written_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        environment_setup_commit=change.parent, commit=change.commit, problem_statement_source=source,
        issue_numbers=tuple(str(issue.number) for issue in linked),
        left_out=tuple(LeftOut(f.path, f.left_out) for f in change.files if f.left_out),
    )


def _joined(files: list[FileChange]) -> str:
    return "".join(f.diff for f in files if not f.left_out)

