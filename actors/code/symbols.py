"""Symbol-level evidence for file localization: which names a file defines, which names an issue
uses, which files are test code by their content, and the import statements that only refer to
code defined elsewhere.

A regular-expression scan, not a parse: it must take milliseconds on a repository of thousands of
files, at any commit, in any Python version's syntax (old commits do not parse under ours).
"""
from __future__ import annotations

import builtins
import keyword
import math
import re
from collections.abc import Iterable, Sequence

import numpy as np

# `def name`, `async def name`, `class Name`, at any indentation (methods and nested functions too).
_DEFINITION = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", re.MULTILINE)
_TEST_FUNCTION = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+test\w*[ \t]*\(", re.MULTILINE)
# An import statement with its continuation: a parenthesized list or backslash-continued lines.
_IMPORT_STATEMENT = re.compile(
    r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+)?import[ \t]+(?:\([^)]*\)|(?:[^\n\\]|\\\n)*)", re.MULTILINE
)


def defined_names(text: str) -> frozenset[str]:
    """The names of the functions, methods and classes `text` defines."""
    return frozenset(_DEFINITION.findall(text))


def without_imports(text: str) -> str:
    """`text` without its import statements. An import says a name is defined elsewhere, so its
    words are no evidence that the file is where an issue's code lives; a package __init__.py
    that only re-exports keeps next to nothing."""
    return _IMPORT_STATEMENT.sub("", text)


def is_test_module(text: str) -> bool:
    """Code made of test functions (`def test_...`): at least one, and at least half of what it
    defines (test classes and helpers being the rest). Finds test code wherever it lives, e.g.
    pytest's own testing/ folder, which no path rule can tell from library code."""
    if "def test" not in text:  # most files: no regular-expression scan at all
        return False
    tests = len(_TEST_FUNCTION.findall(text))
    return tests > 0 and 2 * tests >= len(_DEFINITION.findall(text))


# --- the names an issue uses ---------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Paths and URLs name files, which the mention rules handle; their folder names ("functions" in
# "sympy/functions/elementary/piecewise.py") are not names the issue uses.
_PATH_LIKE = re.compile(r"[\w.-]*[/\\][\w./\\-]*")
# Words every Python text uses that a repository may still define somewhere ("filter", "self").
_NOT_NAMES = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | {"self", "cls", "args", "kwargs"}


def issue_names(text: str) -> set[str]:
    """The identifiers of an issue's text (case kept), leaving out paths and URLs."""
    return set(_IDENTIFIER.findall(_PATH_LIKE.sub(" ", text)))


def is_compound_name(name: str) -> bool | None:
    """Whether `name` surely names code: a compound or capitalized name ("as_set", "getUser",
    "Contains", "L031") is True; a plain lowercase word ("copy", "stack"), which may just be
    English, False; a short name or one of Python's own ("in", "list"), None: no evidence."""
    core = name.strip("_")
    if len(core) < 3 or name in _NOT_NAMES:
        return None
    return (
        "_" in core
        or any(c.isdigit() for c in core)
        or any(a.islower() and b.isupper() for a, b in zip(core, core[1:]))
        or (core[0].isupper() and not core.isupper())
    )


class SymbolIndex:
    """Which of a set of files define which names."""

    def __init__(self, definitions: Sequence[Iterable[str]]) -> None:
        self.size = len(definitions)
        self._files_defining: dict[str, list[int]] = {}
        for position, names in enumerate(definitions):
            for name in names:
                self._files_defining.setdefault(name, []).append(position)

    def scores(self, names: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
        """Per file, the sum of the rarity of the given names it defines, compound names
        (is_compound_name) and plain ones apart. A name's rarity is
        log(files / files defining it) / log(files): 1 for a name only one file of a large
        repository defines, 0 for one every file defines."""
        compound, plain = np.zeros(self.size), np.zeros(self.size)
        if self.size < 2:
            return compound, plain
        for name in set(names):
            files = self._files_defining.get(name)
            kind = is_compound_name(name) if files else None
            if kind is None:
                continue
            (compound if kind else plain)[files] += math.log(self.size / len(files)) / math.log(self.size)
        return compound, plain
