"""The comments a struct's fields carry in its source: the reference pages' descriptions come from
the code's own words, so the page changes when the code does.

A field's comment is the one at the end of its line (`top_k: int = 10  # BM25 candidates ...`), or
else the block of comment lines directly above it (no blank line between)."""
from __future__ import annotations

import inspect
import io
import tokenize


def field_comments(struct: type) -> dict[str, str]:
    """{field name: its comment} for the fields `struct`'s own class body declares."""
    try:
        source = inspect.getsource(struct)
    except (OSError, TypeError):  # a class made at run time has no source
        return {}
    comments: dict[int, str] = {}  # line number -> comment text
    code_lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            code_lines.update(range(token.start[0], token.end[0] + 1))
    lines = source.splitlines()
    found: dict[str, str] = {}
    names = set(getattr(struct, "__struct_fields__", ()))
    for number, line in enumerate(lines, start=1):
        name = line.strip().split(":", 1)[0].strip()
        if name not in names or name in found or not line.startswith((" ", "\t")) or ":" not in line:
            continue
        if number in comments and number in code_lines:  # at the end of the field's own line
            found[name] = comments[number]
            continue
        above = []
        previous = number - 1
        while previous in comments and previous not in code_lines:
            above.insert(0, comments[previous])
            previous -= 1
        if above:
            found[name] = " ".join(above)
    return found
