"""The repository's own tests nearest a changed file: test files that import its module, then
test files named after it. Chosen from the repository at the base commit alone, never from a
dataset's test lists; which of them pass on the base commit is for a test run to say. Which files
are tests, and how a test file is addressed, is the suite's to say (actors/code/suites.py): pytest's
files by default, Django's test modules by their labels."""
from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Protocol

from magis_ray.actors.code.repository import RepoSnapshot

MAX_TEST_FILES = 4  # per changed file: enough to catch a break, few enough to run on every patch


def is_test_file(path: str) -> bool:
    name = PurePosixPath(path).name
    return path.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def module_of(path: str) -> tuple[str, str] | None:
    """The dotted module of a Python source path and its package ("pkg.mod", "pkg"), with a
    leading src/ or lib/ folder dropped; None for a non-Python file."""
    if not path.endswith(".py"):
        return None
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[0] in ("src", "lib") and len(parts) > 1:
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts:
        return None
    return ".".join(parts), ".".join(parts[:-1])


def imports_module(text: str, module: str, package: str) -> bool:
    """`text` imports `module`: `import pkg.mod`, `from pkg.mod import x`, or `from pkg import mod`."""
    name = re.escape(module)
    if re.search(rf"^\s*(?:import|from)\s+{name}\b(?!\.)", text, re.M):
        return True
    leaf = re.escape(module.rpartition(".")[2])
    return bool(package) and bool(re.search(rf"^\s*from\s+{re.escape(package)}\s+import\s+[^#\n]*\b{leaf}\b", text, re.M))


class TestLayout(Protocol):
    def is_test_file(self, path: str) -> bool: ...

    def target_of(self, path: str) -> str:
        """How the runner is told to run the test file `path`."""

    def name_of(self, path: str) -> str:
        """The words that say what the test file `path` tests."""


class PytestLayout:
    """pytest's: test_*.py and *_test.py files anywhere, run by their paths, named by their files."""

    @staticmethod
    def is_test_file(path: str) -> bool:
        return is_test_file(path)

    @staticmethod
    def target_of(path: str) -> str:
        return path

    @staticmethod
    def name_of(path: str) -> str:
        return PurePosixPath(path).stem


def nearest_tests(snapshot: RepoSnapshot, changed: str, layout: TestLayout = PytestLayout(),
                  limit: int = MAX_TEST_FILES) -> tuple[str, ...]:
    """Up to `limit` tests for `changed`, as the runner is told to run them: the test files
    importing its module first (the ones whose name mentions the module before others), then
    those merely named after it (by the layout's name of a test)."""
    target = module_of(changed)
    if target is None or is_test_file(changed) or layout.is_test_file(changed):
        return ()
    module, package = target
    stem = module.rpartition(".")[2]
    tests = [f.path for f in snapshot.files() if layout.is_test_file(f.path)]
    name = layout.name_of
    importing = [p for p in tests if imports_module(_text(snapshot, p), module, package)]
    named = [p for p in tests if stem in name(p) and p not in importing]
    importing.sort(key=lambda p: (stem not in name(p), len(p), p))
    return tuple(layout.target_of(p) for p in (importing + sorted(named, key=lambda p: (len(p), p)))[:limit])


def _text(snapshot: RepoSnapshot, path: str) -> str:
    try:
        return snapshot.read_text(path)
    except (UnicodeDecodeError, KeyError, ValueError):
        return ""
