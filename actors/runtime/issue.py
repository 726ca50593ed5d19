"""The input: an issue as the user has it, and the record a run starts from.

`read_issue` takes what `magis-ray submit ISSUE` reads: a Markdown or text file (its first line,
or first heading, is the title), the JSON that `gh issue view N --json number,title,body,url`
writes, or a SWE-bench record (a real SWE-bench line is valid). What the input leaves out (the
instance id, the repository's name, the base commit) `complete` fills in from the repository.
`parse_issue` stays the strict reader of SWE-bench records, for batches."""
from __future__ import annotations

import re

import msgspec

from magis_ray.events.errors import BadInput


class IssueRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    hints_text: str = ""
    repo_path: str | None = None
    # SWE-bench's environment fields: they name the spec the test environment is built from
    version: str = ""
    environment_setup_commit: str = ""
    issue_url: str = ""  # where the issue lives (a GitHub issue's url), for the pull request's text

    def brief(self, use_hints: bool) -> str:
        """The issue as the roles read it (the paper's ablation drops the hints)."""
        if use_hints and self.hints_text.strip():
            return f"{self.problem_statement.strip()}\n\nHints from the discussion:\n{self.hints_text.strip()}"
        return self.problem_statement.strip()


class BadIssue(BadInput):
    pass


def parse_issue(data: bytes | str, where: str = "issue") -> IssueRecord:
    try:
        issue = msgspec.json.decode(data, type=IssueRecord)
    except msgspec.ValidationError as exc:
        raise BadIssue(f"{where}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise BadIssue(f"{where}: not valid JSON ({exc})") from None
    for name in ("instance_id", "repo", "base_commit", "problem_statement"):
        if not getattr(issue, name).strip():
            raise BadIssue(f"{where}: `{name}` is empty")
    return issue


# --- an issue as the user has it ---------------------------------------------------------------


class IssueDraft(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """What the input says; "" where it says nothing (the defaults fill those in)."""

    problem_statement: str
    instance_id: str = ""
    repo: str = ""  # owner/name
    base_commit: str = ""
    hints_text: str = ""
    repo_path: str | None = None
    version: str = ""
    environment_setup_commit: str = ""
    issue_url: str = ""
    number: int | None = None  # the issue's number where it has one (GitHub)

    @property
    def title(self) -> str:
        return title_of(self.problem_statement)


class _GitHubIssue(msgspec.Struct, forbid_unknown_fields=False):
    """`gh issue view N --json number,title,body,url` (the number and url may be missing; the body
    must be there, though it may be empty)."""

    title: str
    body: str | None = ""
    number: int | None = None
    url: str = ""


def read_issue(data: bytes, where: str = "issue") -> IssueDraft:
    """The issue in `data` (a file's bytes, or standard input's); BadIssue names what is wrong."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadIssue(f"{where}: not UTF-8 text") from None
    if not text.strip():
        raise BadIssue(f"{where}: the issue is empty")
    if where.endswith(".json") or text.lstrip().startswith("{"):
        return _from_json(text, where)
    return _from_markdown(text, where)


def _from_json(text: str, where: str) -> IssueDraft:
    try:
        data = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise BadIssue(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadIssue(f"{where}: a JSON object is expected, not {type(data).__name__}")
    if "problem_statement" in data:
        try:
            draft = msgspec.convert(data, IssueDraft)
        except msgspec.ValidationError as exc:
            raise BadIssue(f"{where}: {exc}") from None
        if not draft.problem_statement.strip():
            raise BadIssue(f"{where}: `problem_statement` is empty")
        return draft
    if "title" in data:
        if "body" not in data:
            # `gh issue view N --json title` leaves the issue's text out; a run on its title alone is
            # rarely what was meant
            raise BadIssue(f"{where}: a GitHub issue without its body: ask gh for it "
                           "(gh issue view N --json number,title,body,url)")
        try:
            issue = msgspec.convert(data, _GitHubIssue)
        except msgspec.ValidationError as exc:
            raise BadIssue(f"{where}: {exc}") from None
        title, body = " ".join(issue.title.split()), (issue.body or "").strip()
        if not title and not body:
            raise BadIssue(f"{where}: the issue is empty (no title, no body)")
        owner_name = github_name(issue.url)
        return IssueDraft(
            problem_statement=f"{title}\n{body}".strip(), repo=owner_name, issue_url=issue.url, number=issue.number,
            instance_id=f"{owner_name.replace('/', '__')}-{issue.number}" if owner_name and issue.number is not None else "",
        )
    raise BadIssue(f"{where}: neither a SWE-bench record (problem_statement) nor a GitHub issue "
                   "(gh issue view N --json number,title,body,url)")


_HEADING = re.compile(r"^\s{0,3}#{1,6}(\s+|$)")
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")


def _from_markdown(text: str, where: str) -> IssueDraft:
    """The first line is the title (a heading's marks dropped); the rest is the body. The problem
    statement is "title\\nbody", as SWE-bench's are, with the blank line between them kept when
    the file has one (a reader sees the title apart from the body, as the author wrote it)."""
    lines = text.strip().splitlines()
    title, rest = lines[0], lines[1:]
    if _HEADING.match(title):
        title = _HEADING.sub("", title).rstrip().rstrip("#").rstrip()
    elif rest and _SETEXT.match(rest[0]):
        rest = rest[1:]
    title = " ".join(title.split())
    if not title:
        raise BadIssue(f"{where}: the first line, the issue's title, is empty")
    body = "\n".join(rest).strip()
    gap = "\n\n" if rest and not rest[0].strip() else "\n"
    return IssueDraft(problem_statement=f"{title}{gap}{body}".strip())


def title_of(problem_statement: str) -> str:
    """An issue's title: the first line of its problem statement, without Markdown heading marks."""
    first = next((line for line in problem_statement.splitlines() if line.strip()), "")
    return " ".join(_HEADING.sub("", first).split()).rstrip("#").rstrip()


_GITHUB_PATH = re.compile(r"^/([^/\s]+)/([^/\s]+?)(?:\.git)?/(?:issues|pull)/\d+")


def github_name(url: str) -> str:
    """"owner/name" from an issue's url (https://github.com/OWNER/NAME/issues/N); "" if none."""
    path = re.sub(r"^[a-z]+://[^/]+", "", url.strip())
    match = _GITHUB_PATH.match(path)
    return f"{match.group(1)}/{match.group(2)}" if match else ""


def slug(title: str, words: int = 6, chars: int = 40) -> str:
    """A short, path- and branch-safe slug of a title: "mean() returns the wrong value" ->
    "mean-returns-the-wrong-value"."""
    parts = re.findall(r"[a-z0-9]+", title.lower())[:words]
    out = ""
    for part in parts:
        if len(out) + len(part) + 1 > chars:
            break
        out = f"{out}-{part}" if out else part
    return out or "issue"


def complete(draft: IssueDraft, *, base_commit: str, repo_name: str, folder: str, repo_path: str) -> IssueRecord:
    """The record a run starts from: the draft's own values, else the repository's. The instance id
    is OWNER__NAME-NUMBER when the issue's number is known, else the folder's name and a slug."""
    repo = draft.repo or repo_name or folder
    instance_id = draft.instance_id
    if not instance_id:
        instance_id = (f"{repo.replace('/', '__')}-{draft.number}" if draft.number is not None and "/" in repo
                       else f"{folder}-{slug(draft.title)}")
    return IssueRecord(
        instance_id=instance_id, repo=repo, base_commit=base_commit, problem_statement=draft.problem_statement,
        hints_text=draft.hints_text, repo_path=repo_path, version=draft.version,
        environment_setup_commit=draft.environment_setup_commit, issue_url=draft.issue_url,
    )
