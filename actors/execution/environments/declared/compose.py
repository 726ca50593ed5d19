"""What the sources come to: the test entries are installed, or the dev entries when there is no
test entry, and what an installable project's build fetches itself (`setup_requires`); the
extras they ask for install with the project (`-e .[extras]`), and so do the extras those name
through the project itself; pip's arguments, the constraints and pytest's pin follow from what
is installed."""
from __future__ import annotations

from collections.abc import Iterable

import msgspec
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion

from .project import Project
from .pyproject import pyproject_extras
from .python import pytest_requirement
from .result import BUILD, DEV, TEST, Declared, Source
from .values import lines, parse_requirement, unique


def compose(project: Project, found: list[Source], python: str, requires: str, requires_from: str) -> Declared:
    wanted = TEST if any(s.role == TEST and (s.requirements or s.extras) for s in found) else DEV
    installable, backend = project.build()
    # what setuptools would fetch itself (setup_requires) is installed as of the date, so it finds it
    picked = [(s.role == wanted and bool(s.requirements or s.extras))
              or (s.role == BUILD and installable and bool(s.requirements)) for s in found]
    extras = unique(e for s, chosen in zip(found, picked) if chosen for e in s.extras)
    declared_extras = _all_extras(project)
    installed_extras = _extras_closure(project, declared_extras, extras)
    # an extra's own source counts as chosen when another chosen source installs that extra
    sources = tuple(msgspec.structs.replace(s, chosen=chosen or (s.through_extras and installable and bool(s.extras)
                                                                  and set(s.extras) <= set(installed_extras)))
                    for s, chosen in zip(found, picked))
    chosen = [s for s in sources if s.chosen]
    requirements = _first_place_pins([s for s in chosen if not (s.through_extras and installable)], project.problems)
    constraints = unique(c for s in chosen for c in s.constraints)
    own = ["-e", "." + (f"[{','.join(extras)}]" if extras else "")] if installable else []
    extra_lines = [line for name in installed_extras for line in declared_extras.get(name, [])]
    return Declared(
        sources=sources, install_args=(*own, *requirements), requirements=requirements, extras=extras,
        constraints=constraints, python=python, requires_python=requires, requires_python_from=requires_from,
        pytest=pytest_requirement([*requirements, *constraints, *extra_lines], python),
        project_name=project.name, installable=installable, build_backend=backend, problems=unique(project.problems))


def _first_place_pins(chosen: list[Source], problems: list[str]) -> tuple[str, ...]:
    """The chosen sources' requirement lines, in the places' order, less a line that cannot hold
    together with one an earlier place gives the same distribution under the same marker (an exact
    version the other excludes): places drift apart as they age (requests' tox deps pin
    pytest-httpbin 1.0.0, its setup.py's tests_require 0.0.7), and no resolution holds both. The
    earlier place says it more precisely; each line left out is a problem."""
    earlier: dict[tuple[str, str], list[tuple[SpecifierSet, str]]] = {}
    kept: list[str] = []
    for source in chosen:
        for line in source.requirements:
            requirement = parse_requirement(line)
            if requirement is not None:
                key = (canonicalize_name(requirement.name), str(requirement.marker or ""))
                clash = next((f"{place} asks for {requirement.name}{specifier}" for specifier, place in earlier.get(key, [])
                              if place != source.name and _exclusive(specifier, requirement.specifier)), None)
                if clash is not None:
                    problems.append(f"{source.name}: {line} left out: {clash}")
                    continue
                earlier.setdefault(key, []).append((requirement.specifier, source.name))
            kept.append(line)
    return unique(kept)


def _exclusive(one: SpecifierSet, other: SpecifierSet) -> bool:
    """Whether no version meets both, as an exact version either names tells."""
    for exact, rest in ((one, other), (other, one)):
        for specifier in exact:
            if specifier.operator in ("==", "===") and "*" not in specifier.version:
                try:
                    if not rest.contains(specifier.version, prereleases=True):
                        return True
                except InvalidVersion:
                    continue
    return False


def _all_extras(project: Project) -> dict[str, list[str]]:
    """Every extra the project declares, wherever, by name: its requirement lines."""
    found = {name: requirement_lines for name, (_, requirement_lines) in pyproject_extras(project).items()}
    if project.setup_cfg is not None and project.setup_cfg.has_section("options.extras_require"):
        for name, value in project.setup_cfg.items("options.extras_require"):
            found.setdefault(name.split(":")[0], lines(value))
    for name, requirement_lines in project.setup_py.extras().items():
        found.setdefault(name.split(":")[0], requirement_lines)
    return found


def _extras_closure(project: Project, declared: dict[str, list[str]], names: Iterable[str]) -> list[str]:
    """The extras, and those they name through the project itself (`dev = ["attrs[tests]"]`)."""
    seen, todo = [], list(names)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.append(name)
        todo.extend(project.own_extras(declared.get(name, []))[0])
    return seen
