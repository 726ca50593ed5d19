"""Path-level evidence for file localization: what an issue says about a file through the file's
place in the repository rather than its content.

- project_names: the repository's own package names ("sphinx", "sympy", "_pytest"). An issue says
  them in every sentence ("Sphinx version", `import sympy`), so they point at no file, least of all
  the one defining a class of that name (sphinx/application.py defines `Sphinx`).
- PathWordIndex: a file whose folder or module name the issue uses as a word ("autodoc", "napoleon",
  "typehints" in `autodoc_typehints`, "cds"), weighed by how rarely the code itself uses that word:
  "python" or "utils" are said everywhere, "linkcheck" is not.
- modules_under_test: a test file the issue quotes names the module it tests
  ("tests/test_pycode_ast.py" -> sphinx/pycode/ast.py), which the index leaves out as test code.
- generated_companions: a generated module named after the module beside it that it is generated
  from (astropy/units/format/cds_parsetab.py, PLY's parser table for cds.py): a fix to the grammar
  regenerates the table, so the table goes where its source goes.
"""
from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np


def project_names(paths: Iterable[str]) -> frozenset[str]:
    """The repository's top-level packages, lowercased: a first folder holding an __init__.py
    ("sympy/__init__.py"), or one under src/ ("src/_pytest/__init__.py" -> "_pytest" and "pytest")."""
    names = set()
    for path in paths:
        parts = path.split("/")
        if parts[-1] != "__init__.py":
            continue
        if len(parts) == 2:
            names.add(parts[0].lower())
        elif len(parts) == 3 and parts[0] == "src":
            names.add(parts[1].lower())
    return frozenset(names | {name.strip("_") for name in names})


# Path components that describe no subject: every package has them.
_GENERIC_COMPONENTS = frozenset({"__init__", "src", "lib", "core", "utils", "util", "base", "main", "__main__"})


def path_words(path: str, project: frozenset[str] = frozenset()) -> list[str]:
    """The words a file's path says about it: its folders and module name, lowercased, without
    the project's own package names, the extension and generic names (_GENERIC_COMPONENTS)."""
    folder, name = posixpath.split(path)
    components = [*folder.split("/"), posixpath.splitext(name)[0]] if folder else [posixpath.splitext(name)[0]]
    return [
        word for word in dict.fromkeys(c.lower() for c in components)
        if word and word not in project and word not in _GENERIC_COMPONENTS
    ]


# Paths ("pkg/mod.py", URLs) and file names ("test_mod.py"): they name files, which the mention
# rules weigh; their words are not also words the issue uses.
_PATH_OR_FILE_NAME = re.compile(r"[\w.-]*[/\\][\w./\\-]*|\b[\w.-]+\.pyx?\b")


def without_paths(text: str) -> str:
    return _PATH_OR_FILE_NAME.sub(" ", text)


def word_stem(word: str) -> str:
    """A crude stem, the same for a module's name and the words an issue uses about it: "mocked",
    "mocking" -> "mock"; "typehints" -> "typehint"; "modules", "module" -> "modul". Only a
    suffix that leaves four letters goes; "process" keeps its "ss"."""
    for suffix in ("ing", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4 and not word.endswith("ss"):
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


class PathWordIndex:
    """Which files' paths use which words, and how distinctive each word is in the code."""

    def __init__(self, paths: Sequence[str], document_frequency: Mapping[str, int], documents: int,
                 project: frozenset[str] = frozenset()) -> None:
        self.size = len(paths)
        self._files_with: dict[str, list[int]] = {}
        rarity: dict[str, float] = {}
        for position, path in enumerate(paths):
            for word in path_words(path, project):
                stem = word_stem(word)
                self._files_with.setdefault(stem, []).append(position)
                # A word's rarity in the code: 1 for one no file's text uses (beyond the path
                # itself), 0 for one every file uses. From the BM25 index's document frequencies.
                rarity[stem] = max(rarity.get(stem, 0.0), math.log(max(documents, 2) / max(document_frequency.get(word, 1), 1))
                                   / math.log(max(documents, 2)))
        self._rarity = rarity

    def scores(self, issue_tokens: Iterable[str]) -> np.ndarray:
        """Per file, the sum of the rarity of the path words the issue uses."""
        scores = np.zeros(self.size)
        for word in {word_stem(token) for token in issue_tokens}:
            files = self._files_with.get(word)
            if files:
                scores[files] += self._rarity[word]
        return scores


# A test module's file name anywhere in the text ("tests/test_pycode_ast.py", "foo_test.py").
_TEST_FILE = re.compile(r"\btest_(\w+)\.py\b|\b(\w+?)_test\.py\b")


def modules_under_test(text: str, all_paths: Sequence[str]) -> list[str]:
    """The files the test modules quoted in `text` test, in order of first mention.

    The subject is the one module whose path, folders joined by "_", ends with the test's name:
    test_pycode_ast.py -> .../pycode/ast.py, test_ext_autodoc_mock.py -> .../ext/autodoc/mock.py,
    test_reports.py -> .../reports.py; a package's __init__.py stands for the package. A name
    fitting no module or several (a reporter's own test_repro.py) names none.
    """
    by_joined: dict[str, list[str]] = {}
    for path in all_paths:
        stem = posixpath.splitext(path)[0]
        if stem.endswith("/__init__"):
            stem = stem[: -len("/__init__")]
        parts = stem.lower().split("/")
        for i in range(len(parts)):
            by_joined.setdefault("_".join(parts[i:]), []).append(path)
    found: dict[str, None] = {}
    for match in _TEST_FILE.finditer(text):
        subject = (match.group(1) or match.group(2)).lower()
        matches = by_joined.get(subject, [])
        if len(matches) == 1:
            found.setdefault(matches[0], None)
    return list(found)


# What a generated file says of itself near its top ("This file was automatically generated from
# ply", "Do NOT manually edit this file").
_GENERATED_NOTE = re.compile(r"automatically generated|auto-?generated|do not (?:manually )?edit|generated (?:by|from)\b",
                             re.IGNORECASE)


def generated_companions(documents: Sequence[tuple[str, str]]) -> list[tuple[int, int]]:
    """(generated, source) positions in `documents`: a file named <source stem>_<more> beside its
    source ("cds_parsetab.py" beside "cds.py", "ask_generated.py" beside "ask.py") whose first
    lines say it is generated. The longest source stem wins."""
    position = {path: i for i, (path, _) in enumerate(documents)}
    pairs = []
    for i, (path, text) in enumerate(documents):
        folder, name = posixpath.split(path)
        stem, extension = posixpath.splitext(name)
        parts = stem.split("_")
        if len(parts) < 2 or not parts[0]:  # "_private" names no source
            continue
        source = next((position[candidate] for n in range(len(parts) - 1, 0, -1)
                       if (candidate := posixpath.join(folder, "_".join(parts[:n]) + extension)) in position), None)
        if source is not None and _GENERATED_NOTE.search(text[:1000]):
            pairs.append((i, source))
    return pairs
