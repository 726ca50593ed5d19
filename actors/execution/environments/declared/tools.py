"""The tools' own tables in pyproject.toml: hatch's test and default environments (each over its
template), pdm's `[tool.pdm.dev-dependencies]` (where an editable line of the project itself names
its extras), poetry's dependency groups and its legacy `[tool.poetry.dev-dependencies]`."""
from __future__ import annotations

import re

from .files import inside
from .poetry_versions import poetry_requirements
from .project import Project
from .pyproject import group
from .result import DEV, TEST, Source
from .roles import TEST_NAMES, roles
from .values import strings, table


def hatch_sources(project: Project) -> list[Source]:
    envs = table(project.pyproject, "tool", "hatch", "envs")
    sources = []
    for name, env in envs.items():
        role = TEST if name in (*TEST_NAMES, "hatch-test") else DEV if name == "default" else ""
        if not role or not isinstance(env, dict):
            continue
        config = _hatch_env(envs, name, set())
        requirements = [*strings(config.get("dependencies")), *strings(config.get("extra-dependencies"))]
        for group_name in strings(config.get("dependency-groups")):
            requirements.extend(group(project, group_name, f"[tool.hatch.envs.{name}]") or [])
        extras = strings(config.get("features"))
        if requirements or extras:
            where = f"pyproject.toml [tool.hatch.envs.{name}]"
            sources.append(project.source(where, "hatch", role, project.valid(requirements, where),
                                          [] if config.get("skip-install") is True else extras))
    return sources


def _hatch_env(envs: dict, name: str, seen: set[str]) -> dict:
    """An environment's settings over those of its template (`default` unless it names one)."""
    env = envs.get(name) if isinstance(envs.get(name), dict) else {}
    template = env.get("template", "default" if name != "default" else None)
    if not isinstance(template, str) or template == name or template in seen:
        return dict(env)
    base = _hatch_env(envs, template, seen | {name})
    merged = {**base, **env}
    merged["extra-dependencies"] = [*strings(base.get("extra-dependencies")), *strings(env.get("extra-dependencies"))]
    return merged


def pdm_sources(project: Project) -> list[Source]:
    groups = table(project.pyproject, "tool", "pdm", "dev-dependencies")
    sources = []
    for name, role in roles(groups).items():
        requirements, extras = pdm_group(project, name)
        sources.append(project.source(f"pyproject.toml [tool.pdm.dev-dependencies] {name}", "pdm", role,
                                      requirements, extras))
    return sources


def pdm_group(project: Project, name: str) -> tuple[list[str], list[str]]:
    """A pdm dev-dependencies group's requirements, and the project's extras it names."""
    where = f"[tool.pdm.dev-dependencies] {name}"
    requirements, extras = [], []
    for line in strings(table(project.pyproject, "tool", "pdm", "dev-dependencies").get(name)):
        own = _pdm_editable_extras(line)
        if own is not None:
            extras.extend(own)
        elif line.strip().startswith("-e"):
            project.problems.append(f"{where}: {line.strip()} left out (not from a package index)")
        else:
            requirements.append(line)
    return project.valid(requirements, where), extras


def _pdm_editable_extras(line: str) -> list[str] | None:
    """The project's extras when a pdm line installs the project itself (`-e .[test]`,
    `-e file:///${PROJECT_ROOT}/#egg=name[test]`); None for any other line."""
    text = line.strip()
    if not text.startswith("-e"):
        return None
    target = text[2:].strip()
    path = re.sub(r"^file:(//)?/?\$\{PROJECT_ROOT\}/?", "", target).split("#")[0].split("[")[0]
    if inside("", path or ".") != "":
        return None
    egg = re.search(r"#egg=[^\[]*\[([^\]]*)\]", target)
    brackets = re.search(r"^[^#\[]*\[([^\]]*)\]", target)
    extras = egg.group(1) if egg else brackets.group(1) if brackets else ""
    return [e.strip() for e in extras.split(",") if e.strip()]


def poetry_sources(project: Project) -> list[Source]:
    sources = []
    for name, role in roles(table(project.pyproject, "tool", "poetry", "group")).items():
        where = f"[tool.poetry.group.{name}.dependencies]"
        sources.append(project.source(f"pyproject.toml {where}", "poetry", role, poetry_group(project, name)))
    if table(project.pyproject, "tool", "poetry", "dev-dependencies"):
        sources.append(project.source("pyproject.toml [tool.poetry.dev-dependencies]", "poetry", DEV,
                                      poetry_group(project, None)))
    return sources


def poetry_group(project: Project, name: str | None) -> list[str]:
    """A poetry group's requirements (None: the legacy dev-dependencies)."""
    poetry = table(project.pyproject, "tool", "poetry")
    if name is None:
        return poetry_requirements(table(poetry, "dev-dependencies"), "[tool.poetry.dev-dependencies]", project.problems)
    return poetry_requirements(table(poetry, "group", name, "dependencies"),
                               f"[tool.poetry.group.{name}.dependencies]", project.problems)
