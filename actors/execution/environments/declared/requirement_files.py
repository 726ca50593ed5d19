"""Requirement files as pip reads them: one requirement a line, `\\` continuing a line, `#`
comments; `-r` (more requirements) and `-c` (constraints) relative to the file naming them;
`-e .`, `.` and `.[extras]` (relative to the project's root, where pip runs) the project itself.
Index and build options (--index-url, --hash, --pre) are the environment's business, not the
project's, and are ignored. Which files are the tests' is told by their names and folders."""
from __future__ import annotations

import posixpath
import re

from packaging.utils import canonicalize_name

from .files import ProjectFiles, inside
from .project import Project
from .result import DEV, TEST, Source
from .values import parse_requirement

# The words of a file's name (split at - _ .) that make it a test or dev file, and those that make
# it a variant (minimum versions, one Python) taken only when nothing else is.
_TEST_WORDS = {"test", "tests", "testing", "pytest"}
_DEV_WORDS = {"dev", "develop", "development"}
_VARIANT_WORDS = {"min", "minimum", "minimal", "lowest", "oldest", "max", "latest", "upstream", "nightly"}
_PYTHON_WORD = re.compile(r"^(py|python)?\d{2,3}$|^(py|python)?\d\.\d+$")
_REQUIREMENT_FOLDERS = ("requirements", "reqs", "requirements-dev", "ci")
_TEST_FOLDERS = ("tests", "test", "testing")


def requirement_file_sources(project: Project) -> list[Source]:
    sources = []
    for path, role in _candidates(project.files):
        parsed = RequirementFile(project.files, [path])
        if path == "requirements.txt" and not parsed.names_pytest():
            continue
        sources.append(project.source(path, "requirements-file", role, parsed.requirements, parsed.extras,
                                      parsed.constraints, parsed.files))
    return sources


def _candidates(files: ProjectFiles) -> list[tuple[str, str]]:
    """Requirement files named for tests or development, at the root (test-requirements.txt,
    requirements-dev.txt), in a requirements folder (requirements/tests.txt) or a test folder
    (tests/requirements.txt); a variant (tests-min.txt, tests-py38.txt) only when its folder
    has no plain one; the root requirements.txt last, kept when it names pytest."""
    found: list[tuple[str, str]] = []
    for folder in ("", *_REQUIREMENT_FOLDERS, *_TEST_FOLDERS):
        entries = files.listing(folder)
        plain, variants = [], []
        for entry in entries:
            stem, suffix = posixpath.splitext(entry)
            if suffix not in (".txt", ".in") or suffix == ".in" and f"{stem}.txt" in entries:
                continue  # a pip-compile input counts only without its compiled file
            words = set(re.split(r"[-_.]+", stem.lower()))
            if folder not in _REQUIREMENT_FOLDERS and not words & {"requirements", "requirement", "reqs"}:
                continue
            role = TEST if words & _TEST_WORDS or folder in _TEST_FOLDERS else DEV if words & _DEV_WORDS else ""
            if not role:
                continue
            variant = bool(words & _VARIANT_WORDS) or any(_PYTHON_WORD.match(word) for word in words)
            (variants if variant else plain).append((f"{folder}/{entry}" if folder else entry, role))
        found.extend(plain or variants)
    if files.text("requirements.txt") is not None:
        found.append(("requirements.txt", DEV))
    return found


class RequirementFile:
    """The requirements, constraints and project extras of requirement files and what they include,
    or of lines given one by one (a tox setting's)."""

    _FILE_OPTIONS = {"-r": "r", "--requirement": "r", "-c": "c", "--constraint": "c"}
    _EDITABLE = ("-e", "--editable")

    def __init__(self, files: ProjectFiles, paths: list[str]) -> None:
        self.project_files = files
        self.problems = files.problems
        self.requirements: list[str] = []
        self.constraints: list[str] = []
        self.extras: list[str] = []
        self.files: list[str] = []
        for path in paths:
            self._read(path, constraint=False, chain=())

    def names_pytest(self) -> bool:
        return any((r := parse_requirement(line)) is not None and canonicalize_name(r.name) == "pytest"
                   for line in self.requirements)

    def _read(self, path: str, constraint: bool, chain: tuple[str, ...]) -> None:
        if path in chain:
            self.problems.append(f"{path}: included again by {' -> '.join((*chain, path))}; the loop is cut")
            return
        if path in self.files:
            return
        text = self.project_files.text(path)
        if text is None:
            self.problems.append(f"{path}: no such file" + (f" (named in {chain[-1]})" if chain else ""))
            return
        self.files.append(path)
        for line in _logical_lines(text):
            self.take(line, path, posixpath.dirname(path), constraint, (*chain, path))

    def take(self, line: str, path: str, folder: str = "", constraint: bool = False, chain: tuple[str, ...] = ()) -> None:
        """One logical line of `path` (a file in `folder`, or a tox setting)."""
        option, value = _option(line)
        if option in self._FILE_OPTIONS:
            target = inside(folder, value)
            if target is None:
                self.problems.append(f"{path}: {option} {value} is outside the project; not read")
            else:
                self._read(target, constraint or self._FILE_OPTIONS[option] == "c", chain)
        elif option in self._EDITABLE or option is None and _looks_like_path(line):
            self._local(_without_options(value if option else line), path)
        elif option is not None:
            return  # how to install (--index-url, --pre, --no-binary ...), not what
        elif "${" in line:
            self.problems.append(f"{path}: {line!r} needs an environment variable; left out")
        else:
            requirement = parse_requirement(_without_options(line))
            if requirement is None and re.match(r"^[a-z][a-z0-9+.-]*://|^git\+", line):
                self.problems.append(f"{path}: {line} left out (not from a package index)")
            elif requirement is None:
                self.problems.append(f"{path}: {line!r} is not a requirement; left out")
            elif requirement.url:
                self.problems.append(f"{path}: {requirement.name} from {requirement.url} left out (not from a package index)")
            else:
                (self.constraints if constraint else self.requirements).append(str(requirement))

    def _local(self, target: str, path: str) -> None:
        match = re.match(r"^(.*?)(\[([^\]]*)\])?$", target.strip())
        where, extras = match.group(1), match.group(3)
        if where.startswith("file:"):
            where = re.sub(r"^file:(//)?", "", where).split("#")[0]
        if inside("", where or ".") == "":
            self.extras.extend(e.strip() for e in (extras or "").split(",") if e.strip())
        else:
            self.problems.append(f"{path}: {target.strip()} left out (not the project, not from a package index)")


def join_continuations(text: str) -> str:
    return re.sub(r"\\\s*\n", " ", text)


def _logical_lines(text: str) -> list[str]:
    """A requirement file's lines, continuations joined and comments gone."""
    lines = []
    for raw in join_continuations(text).splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if line:
            lines.append(line)
    return lines


def _option(line: str) -> tuple[str | None, str]:
    """A requirement line's option and its value ("-r", "dev.txt"); (None, line) for a requirement."""
    if not line.startswith("-"):
        return None, line
    match = re.match(r"^(--[\w-]+)(?:[=\s]\s*(.*))?$", line) or re.match(r"^(-[a-zA-Z])\s*(.*)$", line)
    if not match:
        return line, ""
    return match.group(1), (match.group(2) or "").strip()


def _without_options(line: str) -> str:
    """A requirement without its per-requirement options (--hash=..., --config-settings ...)."""
    return re.split(r"\s+--?[a-zA-Z]", line)[0].strip()


def _looks_like_path(line: str) -> bool:
    return bool(re.match(r"^(\.{1,2}(/|\[|$|\s)|/|file:)", line))
