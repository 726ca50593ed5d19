"""Git-style unified diffs: make them for one file, join them, read back what they change.

Diffs come from libgit2 (pygit2), so they are what `git diff` prints, including
"new file mode" / "deleted file mode" headers, "\\ No newline at end of file" markers
and C-quoted non-ASCII paths; `git apply` takes them as they are (tests/test_edits_diffs.py).
"""
from __future__ import annotations

import re

import pygit2
from pygit2.enums import DiffOption


def file_diff(path: str, old_text: str | None, new_text: str | None) -> str:
    """The diff of one file from `old_text` to `new_text`; None means the file is absent.

    Returns "" when nothing changed. Texts are diffed as UTF-8, always as text (a NUL
    byte does not turn the diff into "Binary files differ").
    """
    if old_text == new_text:
        return ""
    patch = pygit2.Patch.create_from(
        old_text,
        new_text,
        old_as_path=path,
        new_as_path=path,
        flag=DiffOption.FORCE_TEXT,
    )
    return patch.text or ""


def join_diffs(diffs: list[str]) -> str:
    """One repository-level diff from per-file diffs, in the given order; empty ones dropped."""
    return "".join(d if d.endswith("\n") else d + "\n" for d in diffs if d)


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def changed_line_ranges(diff: str) -> dict[str, list[tuple[int, int]]]:
    """For each file of `diff`, the base-file lines its changes remove or replace.

    One (start, end) per run of consecutive -/+ lines (a hunk can hold several runs
    separated by context), 1-based and inclusive like LineRange: a run that only adds
    lines is the empty range (p, p - 1), an insertion before base line p. Files are
    keyed by their base path (the new path for a new file); a file with no hunks
    (e.g. a new empty file) maps to [].
    """
    ranges: dict[str, list[tuple[int, int]]] = {}
    lines = diff.split("\n")
    old_path: str | None = None
    current: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("diff --git "):
            old_path = None
            current = _path_from_git_header(line)
            if current is not None:
                ranges.setdefault(current, [])
        elif line.startswith("--- "):
            old_path = _diff_path(line[4:])
        elif line.startswith("+++ "):
            new_path = _diff_path(line[4:])
            current = old_path or new_path
            if current is None:
                raise ValueError("a diff names /dev/null on both sides")
            ranges.setdefault(current, [])
        elif (match := _HUNK.match(line)) and current is not None:
            old_start, old_count, new_count = (
                int(match.group(1)),
                int(match.group(2) or 1),
                int(match.group(4) or 1),
            )
            i = _read_hunk(lines, i, old_start, old_count, new_count, ranges[current])
    return ranges


def _read_hunk(
    lines: list[str],
    i: int,
    old_start: int,
    old_count: int,
    new_count: int,
    out: list[tuple[int, int]],
) -> int:
    """Walk one hunk's body from lines[i], appending its change runs to `out`.

    The counts from the "@@" header, not the look of a line, end the hunk: a removed
    line reading "-- x" must not pass for a "--- " file header.
    """
    # "-5,0" means "after line 5": the first base line the hunk is positioned at is 6.
    line_no = old_start if old_count else old_start + 1
    run_start: int | None = None  # base line where the current -/+ run began
    run_removed = 0

    def close_run() -> None:
        nonlocal run_start, run_removed
        if run_start is not None:
            out.append((run_start, run_start + run_removed - 1))
        run_start, run_removed = None, 0

    while (old_count > 0 or new_count > 0) and i < len(lines):
        line = lines[i]
        i += 1
        kind = line[:1]
        if kind == "\\":  # "\ No newline at end of file"
            continue
        if kind in (" ", ""):  # an empty line: context whose blank was trimmed
            close_run()
            line_no += 1
            old_count -= 1
            new_count -= 1
        elif kind == "-":
            if run_start is None:
                run_start = line_no
            run_removed += 1
            line_no += 1
            old_count -= 1
        elif kind == "+":
            if run_start is None:
                run_start = line_no
            new_count -= 1
        else:
            raise ValueError(f"malformed hunk line: {line[:80]!r}")
    close_run()
    return i


def _diff_path(name: str) -> str | None:
    """The path of a "---"/"+++" line: without "a/"/"b/", None for /dev/null."""
    name = name.rstrip("\r")
    if name.startswith('"'):
        name = _unquote(name)
    elif "\t" in name:  # git ends the name with a tab when it contains a space
        name = name.split("\t", 1)[0]
    if name == "/dev/null":
        return None
    if name.startswith(("a/", "b/")):
        return name[2:]
    return name


def _path_from_git_header(line: str) -> str | None:
    """The path of "diff --git a/P b/P" when both sides are the same unquoted P."""
    rest = line[len("diff --git ") :].rstrip("\r")
    half = (len(rest) - 1) // 2
    old, new = rest[:half], rest[half + 1 :]
    if rest[half : half + 1] == " " and old.startswith("a/") and new == "b/" + old[2:]:
        return old[2:]
    return None


_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _unquote(quoted: str) -> str:
    """Undo git's C-style quoting of a path: "a/caf\\303\\251.py" -> a/café.py."""
    body = quoted[1 : quoted.rindex('"')] if quoted.count('"') >= 2 else quoted[1:]
    out = bytearray()
    i = 0
    while i < len(body):
        char = body[i]
        if char == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in "01234567":
                out.append(int(body[i + 1 : i + 4], 8))
                i += 4
                continue
            out.append(_ESCAPES.get(nxt, ord(nxt)))
            i += 2
            continue
        out.extend(char.encode("utf-8"))
        i += 1
    return out.decode("utf-8", errors="replace")
