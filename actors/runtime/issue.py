"""The input: a SWE-bench instance record (a real SWE-bench line is valid), plus an optional repo_path."""
from __future__ import annotations

import msgspec


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

    def brief(self, use_hints: bool) -> str:
        """The issue as the roles read it (the paper's ablation drops the hints)."""
        if use_hints and self.hints_text.strip():
            return f"{self.problem_statement.strip()}\n\nHints from the discussion:\n{self.hints_text.strip()}"
        return self.problem_statement.strip()


class BadIssue(ValueError):
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
