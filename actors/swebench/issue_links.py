"""The issues a commit resolves, among those of the file `gh issue list --json number,title,body,url`
writes, and the problem statement and hints SWE-bench's collection forms from them.

SWE-bench (swebench 4.1.0, swebench/collect/utils.py) reads a pull request's title, body and commit
messages, HTML comments removed, for "<word> #N" where the word is one of GitHub's closing keywords
(`extract_resolved_issues`). Its problem statement is each such issue's "title\\nbody\\n", one after
the other; its hints are the issue's comments made before the pull request's first commit, joined by
newlines (`extract_problem_statement_and_hints`, `_extract_hints`). Here the text is the commit's
message, with a merge's merged commits' messages after it (the pull request's commits), and the
issues are those the file holds. When no closing keyword names one of them, an issue the text merely
mentions (#N) stands in, and the record says so. The hints need the comments in the file
(`--json number,title,body,url,comments`); a comment counts when it was made before the change was
first written (gh gives when a comment was made; SWE-bench's API read when it was last edited).
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from magis_ray.events.errors import BadInput
import msgspec

# swebench.collect.utils.PR_KEYWORDS: GitHub's closing keywords
CLOSING_KEYWORDS = {"close", "closes", "closed", "fix", "fixes", "fixed", "resolve", "resolves", "resolved"}
_KEYWORD_REFERENCE = re.compile(r"(\w+)\s+\#(\d+)")  # swebench's issues_pat
_HTML_COMMENT = re.compile(r"(?s)<!--.*?-->")  # swebench's comments_pat
# "#12", but not "owner/name#12" (another repository's), "name#12" or an HTML entity ("&#12;")
_MENTION = re.compile(r"(?<![\w&/])#(\d+)\b")

# where a record's problem statement came from
CLOSED_ISSUE = "issue"
MENTIONED_ISSUE = "mentioned issue"
COMMIT_MESSAGE = "commit message"


class IssueComment(msgspec.Struct, forbid_unknown_fields=False):
    body: str
    createdAt: Annotated[datetime, msgspec.Meta(tz=True)]  # noqa: N815 - gh's name


class ListedIssue(msgspec.Struct, forbid_unknown_fields=False):
    """One issue of `gh issue list --json number,title,body,url[,comments]`."""

    number: int
    title: str
    body: str | None = ""
    url: str = ""
    comments: list[IssueComment] = []


class IssuesFileError(BadInput):
    """An issues file that is not what gh writes; the message is one line."""


def read_issues(data: bytes, where: str) -> dict[int, ListedIssue]:
    """The issues of the file, by number."""
    try:
        listed = msgspec.json.decode(data, type=list[ListedIssue])
    except msgspec.ValidationError as exc:
        raise IssuesFileError(f"{where}: not the JSON list `gh issue list --json number,title,body,url` writes ({exc})") from None
    except msgspec.DecodeError as exc:
        raise IssuesFileError(f"{where}: not valid JSON ({exc})") from None
    issues: dict[int, ListedIssue] = {}
    for issue in listed:
        if issue.number in issues:
            raise IssuesFileError(f"{where}: issue #{issue.number} is listed twice")
        issues[issue.number] = issue
    return issues


def _unique(numbers: list[str]) -> list[int]:
    return list(dict.fromkeys(int(n) for n in numbers))


def linked_issues(text: str, issues: dict[int, ListedIssue]) -> tuple[list[ListedIssue], str]:
    """The issues of `issues` that `text` resolves, in the order it names them, and where the problem
    statement comes from: those a closing keyword names ("fixes #12"); else those it mentions
    ("see #12"); else none, and the commit message."""
    text = _HTML_COMMENT.sub("", text)
    closed = _unique([number for word, number in _KEYWORD_REFERENCE.findall(text) if word.lower() in CLOSING_KEYWORDS])
    if held := [issues[n] for n in closed if n in issues]:
        return held, CLOSED_ISSUE
    if held := [issues[n] for n in _unique(_MENTION.findall(text)) if n in issues]:
        return held, MENTIONED_ISSUE
    return [], COMMIT_MESSAGE


def problem_statement(issues: list[ListedIssue]) -> str:
    return "".join(f"{issue.title}\n{issue.body or ''}\n" for issue in issues)


def hints_text(issues: list[ListedIssue], written_at: datetime) -> str:
    """Each issue's comments up to the first made at or after `written_at`, joined by newlines."""
    per_issue = []
    for issue in issues:
        earlier = []
        for comment in sorted(issue.comments, key=lambda c: c.createdAt):
            if comment.createdAt >= written_at:
                break
            earlier.append(comment.body)
        per_issue.append("\n".join(earlier))
    return "\n".join(per_issue)
