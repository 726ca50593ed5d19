"""What the sources come to: the test entries are installed, or the dev entries when there is no
test entry; the extras they ask for install with the project (`-e .[extras]`), and so do the
extras those name through the project itself; pip's arguments, the constraints and pytest's pin
follow from what is installed."""
from __future__ import annotations

from collections.abc import Iterable

import msgspec

from .project import Project
from .pyproject import pyproject_extras
from .python import pytest_requirement
from .result import DEV, TEST, Declared, Source
from .values import lines, unique


def compose(project: Project, found: list[Source], python: str, requires: str, requires_from: str) -> Declared:
    wanted = TEST if any(s.role == TEST and (s.requirements or s.extras) for s in found) else DEV
    picked = [s.role == wanted and bool(s.requirements or s.extras) for s in found]
    installable, backend = project.build()
    extras = unique(e for s, chosen in zip(found, picked) if chosen for e in s.extras)
    declared_extras = _all_extras(project)
    installed_extras = _extras_closure(project, declared_extras, extras)
    # an extra's own source counts as chosen when another chosen source installs that extra
    sources = tuple(msgspec.structs.replace(s, chosen=chosen or (s.through_extras and installable and bool(s.extras)
                                                                  and set(s.extras) <= set(installed_extras)))
                    for s, chosen in zip(found, picked))
    chosen = [s for s in sources if s.chosen]
    requirements = unique(r for s in chosen if not (s.through_extras and installable) for r in s.requirements)
    constraints = unique(c for s in chosen for c in s.constraints)
    own = ["-e", "." + (f"[{','.join(extras)}]" if extras else "")] if installable else []
    extra_lines = [line for name in installed_extras for line in declared_extras.get(name, [])]
    return Declared(
        sources=sources, install_args=(*own, *requirements), requirements=requirements, extras=extras,
        constraints=constraints, python=python, requires_python=requires, requires_python_from=requires_from,
        pytest=pytest_requirement([*requirements, *constraints, *extra_lines], python),
        project_name=project.name, installable=installable, build_backend=backend, problems=unique(project.problems))


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
