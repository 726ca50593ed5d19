"""The Python and the pytest a project's tests want: its requires-python (pyproject's, setup.cfg's,
setup.py's or poetry's python dependency, else none with the classifiers said), the newest
offered Python it allows, and the pytest requirement the chosen lines add up to."""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .poetry_versions import poetry_specifier
from .project import Project
from .values import ini_value, lines, parse_requirement, table, unique

_PY_CLASSIFIER = re.compile(r"^Programming Language :: Python :: (3\.\d+)\s*$")


def requires_python(project: Project) -> tuple[str, str]:
    """The project's requires-python, and where it says so."""
    found = [
        (table(project.pyproject, "project").get("requires-python"), "pyproject.toml [project] requires-python"),
        (ini_value(project.setup_cfg, "options", "python_requires"), "setup.cfg [options] python_requires"),
        (project.setup_py.keyword("python_requires"), "setup.py python_requires"),
    ]
    poetry_python = table(project.pyproject, "tool", "poetry", "dependencies").get("python")
    if isinstance(poetry_python, str):
        found.append((poetry_specifier(poetry_python, project.problems, "[tool.poetry.dependencies] python"),
                      "pyproject.toml [tool.poetry.dependencies] python"))
    for value, where in found:
        if isinstance(value, str) and value.strip():
            try:
                return str(SpecifierSet(value.strip())), where
            except InvalidSpecifier:
                project.problems.append(f"{where} {value.strip()!r} is not a version specifier")
    versions = classifier_versions(project)
    return ("", f"classifiers (Python {', '.join(versions)})") if versions else ("", "")


def classifier_versions(project: Project) -> list[str]:
    """The Python versions the project's classifiers name, oldest first."""
    classifiers: list[str] = []
    for value in (table(project.pyproject, "project").get("classifiers"),
                  table(project.pyproject, "tool", "poetry").get("classifiers"),
                  project.setup_py.keyword("classifiers")):
        if isinstance(value, list):
            classifiers.extend(item for item in value if isinstance(item, str))
    classifiers.extend(lines(ini_value(project.setup_cfg, "metadata", "classifiers") or ""))
    versions = {match.group(1) for line in classifiers if (match := _PY_CLASSIFIER.match(line.strip()))}
    return sorted(versions, key=Version)


def newest_allowed(pythons: Sequence[str], requires: str, classifiers_name: list[str], problems: list[str]) -> str:
    """The newest offered Python that `requires` allows, and no newer than the newest Python the
    classifiers name (`classifiers_name`, oldest first) when an allowed one is: an open-ended `>=3.7` says nothing of 3.13, and an
    old commit of a project seldom runs on the Python of years later."""
    try:
        specifier = SpecifierSet(requires)
    except InvalidSpecifier:
        specifier = SpecifierSet()

    def allowed(python: str) -> bool:
        # "3.8" stands for every 3.8.x: `>=3.8.1` allows it, and so does `<=3.11` allow "3.11"
        probes = [python] if python.count(".") > 1 else [f"{python}.0", f"{python}.99"]
        return any(specifier.contains(probe, prereleases=True) for probe in probes)

    candidates = sorted((p for p in pythons if _is_version(p) and allowed(p)), key=Version)
    if classifiers_name:
        capped = [p for p in candidates if Version(".".join(p.split(".")[:2])) <= Version(classifiers_name[-1])]
        candidates = capped or candidates
    if not candidates and pythons:
        problems.append(f"no offered Python ({', '.join(pythons)}) satisfies requires-python {requires}")
    return candidates[-1] if candidates else ""


def _is_version(text: str) -> bool:
    try:
        Version(text)
        return True
    except InvalidVersion:
        return False


def pytest_requirement(requirement_lines: Iterable[str], python: str) -> str:
    """pytest with every specifier the lines put on it, markers decided for `python`."""
    environment = ({"python_version": ".".join(python.split(".")[:2]),
                    "python_full_version": python if python.count(".") > 1 else f"{python}.0"} if python else None)
    specifiers: list[str] = []
    named = False
    for line in requirement_lines:
        requirement = parse_requirement(line)
        if requirement is None or canonicalize_name(requirement.name) != "pytest":
            continue
        if requirement.marker is not None and environment is not None:
            try:
                if not requirement.marker.evaluate(environment):
                    continue
            except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
                pass
        named = True
        specifiers.extend(str(s) for s in requirement.specifier)
    return "pytest" + ",".join(unique(specifiers)) if named else ""
