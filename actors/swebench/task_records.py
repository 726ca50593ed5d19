"""Tasks as records in SWE-bench's format, as `magis-ray tasks make` and `tasks validate` write
them: the 12 fields of SWE-bench's datasets, in the Hugging Face order, then the fields magis-ray
adds, which readers of SWE-bench records pass over (instances.load_dataset reads them as it reads
SWE-bench's). Beside the records, a file that says why each commit that gave no task gave none
(make), or why each candidate was dropped (validate). Each file is written whole or not at all."""
from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Iterable

import msgspec


class LeftOut(msgspec.Struct, frozen=True):
    """A file of the commit that neither patch carries, and why (history.BINARY, SUBMODULE, NOT_UTF8)."""

    path: str
    reason: str


class TaskRecord(msgspec.Struct, frozen=True, kw_only=True):
    repo: str  # owner/name
    instance_id: str
    base_commit: str
    patch: str  # the change to files that are not tests, as `git diff` prints it
    test_patch: str  # the change to test files
    problem_statement: str
    hints_text: str
    created_at: str  # ISO 8601 in UTC ("2024-05-01T12:00:00Z"), as SWE-bench's
    version: str = ""  # SWE-bench's spec tables key an environment by it; "" names none
    # JSON-encoded lists of test names, as the Hugging Face datasets hold them; empty until validated
    FAIL_TO_PASS: str = "[]"  # noqa: N815 - SWE-bench's names
    PASS_TO_PASS: str = "[]"  # noqa: N815
    environment_setup_commit: str
    # magis-ray's own fields; "" and empty in a record SWE-bench made, which decodes as one of these
    commit: str = ""  # the commit the task was made from; base_commit is its first parent
    problem_statement_source: str = ""  # issue_links.CLOSED_ISSUE, MENTIONED_ISSUE or COMMIT_MESSAGE
    issue_numbers: tuple[str, ...] = ()  # the linked issues, as SWE-bench's collection lists them
    left_out: tuple[LeftOut, ...] = ()


class PassedOver(msgspec.Struct, frozen=True):
    """A commit that gave no task, and why."""

    commit: str
    subject: str  # the first line of its message
    reason: str


class Dropped(msgspec.Struct, frozen=True):
    """A candidate that validation dropped, and why."""

    instance_id: str
    reason: str  # one of validation's reasons
    detail: str = ""  # its particulars, in one line
    commit: str = ""  # the commit it was made from ("" for a record SWE-bench made)


def validated(record: dict, fail_to_pass: list[str], pass_to_pass: list[str]) -> TaskRecord:
    """`record` (a candidate of `tasks make`, or any SWE-bench record) as a task record with the
    lists validation gave it, its own lists replaced."""
    fields = {name: record[name] for name in TaskRecord.__struct_fields__ if record.get(name) is not None}
    fields.update(version=str(fields.get("version", "")), hints_text=fields.get("hints_text", ""),
                  created_at=fields.get("created_at", ""),
                  environment_setup_commit=fields.get("environment_setup_commit") or record["base_commit"],
                  FAIL_TO_PASS=json.dumps(fail_to_pass), PASS_TO_PASS=json.dumps(pass_to_pass))
    return msgspec.convert(fields, TaskRecord)


def passed_over_path(out: str | os.PathLike) -> Path:
    """Where the reasons go beside the records: CANDIDATES.passed-over.jsonl for CANDIDATES.jsonl."""
    return beside(out, "passed-over")


def dropped_path(out: str | os.PathLike) -> Path:
    """Where the dropped candidates go beside the tasks: TASKS.dropped.jsonl for TASKS.jsonl."""
    return beside(out, "dropped")


def beside(out: str | os.PathLike, kind: str) -> Path:
    out = Path(out)
    stem = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(f"{stem}.{kind}.jsonl")


def write_jsonl(path: str | os.PathLike, items: Iterable[msgspec.Struct]) -> None:
    """One JSON line per item, written beside `path` and renamed over it: a reader never sees half."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.part")
    try:
        with temporary.open("wb") as f:
            for item in items:
                f.write(msgspec.json.encode(item) + b"\n")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
