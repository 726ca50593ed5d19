"""Line edits against a base file: check them, apply them, derive them from two texts.

Line numbers are always those of the BASE file (1-based, inclusive), as in
events.schema.LineRange: an empty range (end == start - 1) inserts before line
`start`, and start == line_count + 1 inserts at the end. Lines are split on "\\n"
only, as git does, so the numbers agree with diff hunks; "\\r\\n" stays part of a line.
"""
from __future__ import annotations

import difflib

from magis_ray.events.errors import MagisError
from magis_ray.events.schema import Edit, LineRange


class InvalidEdits(MagisError, ValueError):
    """Ranges that cannot be applied; the message says what to fix, for the model to read."""


def split_lines(text: str) -> list[str]:
    """The lines of `text`, each keeping its "\\n" (the last one may have none)."""
    lines = text.split("\n")
    tail = lines.pop()
    out = [line + "\n" for line in lines]
    if tail:
        out.append(tail)
    return out


def count_lines(text: str) -> int:
    return len(split_lines(text))


def _describe(r: LineRange) -> str:
    if r.end == r.start - 1:
        return f"insertion before line {r.start} (range {r.start}-{r.end})"
    return f"range {r.start}-{r.end}"


def _outside(r: LineRange, line_count: int) -> str:
    if line_count == 0:
        return f"{_describe(r)} is outside the file, which is empty (insert with range 1-0)"
    return (
        f"{_describe(r)} is outside the file's 1-{line_count} lines "
        f"(insert at the end with range {line_count + 1}-{line_count})"
    )


def check_ranges(ranges: list[LineRange], line_count: int) -> None:
    """Raise InvalidEdits naming every range that is malformed, outside the file or overlapping.

    An insertion may touch a replaced range (before its first line or after its last)
    but not fall inside it, and two insertions at the same place would have no order.
    """
    problems: list[str] = []
    valid: list[LineRange] = []
    for r in ranges:
        if r.start < 1:
            problems.append(f"{_describe(r)} starts before line 1")
        elif r.end < r.start - 1:
            problems.append(
                f"range {r.start}-{r.end} ends before it starts "
                f"(lines {r.start}-{r.start} replace one line; {r.start}-{r.start - 1} inserts before it)"
            )
        elif r.start > line_count + 1 or r.end > line_count:
            problems.append(_outside(r, line_count))
        else:
            valid.append(r)
    ordered = sorted(valid, key=lambda r: (r.start, r.end))
    for before, after in zip(ordered, ordered[1:]):
        if _overlap(before, after):
            problems.append(f"{_describe(before)} and {_describe(after)} overlap")
    if problems:
        raise InvalidEdits("; ".join(problems))


def _overlap(before: LineRange, after: LineRange) -> bool:
    """`before` sorts first by (start, end), so an insertion at a replaced range's first
    line sorts before it (allowed) and one inside it sorts after it (not allowed)."""
    if before.end == before.start - 1:  # an insertion: only a second one at the same place clashes
        return after.end == after.start - 1 and after.start == before.start
    return after.start <= before.end


def _line_ending(text: str) -> str:
    crlf = text.count("\r\n")
    return "\r\n" if crlf > text.count("\n") - crlf else "\n"


def apply_edits(text: str, edits: list[Edit]) -> str:
    """`text` with every edit applied, all ranges read as base line numbers.

    Untouched lines keep their bytes. New code that lacks a final newline gets the
    file's line ending, except at the very end of a file whose last line had none;
    a file that is all "\\r\\n" turns "\\n"-only new code into "\\r\\n".
    Raises InvalidEdits for bad ranges (see check_ranges).
    """
    lines = split_lines(text)
    check_ranges([e.range for e in edits], len(lines))
    eol = _line_ending(text)
    all_crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")

    pieces: list[tuple[bool, str]] = []  # (is new code, text), top to bottom
    cursor = 0  # base lines [0, cursor) are placed
    # Sorting by (start, end) puts an insertion before a replacement starting at the
    # same line, and after one ending just above it: the same as applying bottom-up.
    for edit in sorted(edits, key=lambda e: (e.range.start, e.range.end)):
        start, end = edit.range.start, edit.range.end
        pieces.extend((False, line) for line in lines[cursor : start - 1])
        code = edit.new_code
        if all_crlf and "\r\n" not in code:
            code = code.replace("\n", "\r\n")
        pieces.append((True, code))
        cursor = end
    pieces.extend((False, line) for line in lines[cursor:])

    out: list[str] = []
    last_is_code = False
    for is_code, piece in pieces:
        if not piece:
            continue
        if out and not out[-1].endswith("\n"):
            out.append(eol)  # whatever precedes more content must end its line
        out.append(piece)
        last_is_code = is_code
    base_ends_open = bool(lines) and not lines[-1].endswith("\n")
    if out and last_is_code and not out[-1].endswith("\n") and not base_ends_open:
        out.append(eol)
    return "".join(out)


def edits_from_texts(old_text: str, new_text: str) -> list[Edit]:
    """The hunks turning `old_text` into `new_text`, as Edits in old line numbers.

    apply_edits(old, edits_from_texts(old, new)) == new, with the two exceptions
    apply_edits' conveniences imply: `new` lacking the final newline that `old`
    (or an empty `old`) has gets it back, and "\\n"-only new lines inside an
    all-"\\r\\n" `old` come back as "\\r\\n".
    """
    old_lines, new_lines = split_lines(old_text), split_lines(new_text)
    # autojunk off: otherwise lines frequent in big files (blank lines) match poorly.
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    edits: list[Edit] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        edits.append(Edit(range=LineRange(i1 + 1, i2), new_code="".join(new_lines[j1:j2])))
    return edits


def numbered(text: str, start: int = 1) -> str:
    """The lines with their numbers, for prompts: "  12 | code"; `start` numbers the first."""
    lines = split_lines(text)
    width = max(4, len(str(start + len(lines) - 1)))
    out = []
    for number, line in enumerate(lines, start):
        body = line.rstrip("\r\n")
        out.append(f"{number:>{width}} |" + (f" {body}" if body else ""))
    return "\n".join(out)
