"""pyproject.toml's standard places: `[dependency-groups]` (PEP 735), each resolved through its
include-groups by PyPA's dependency-groups as pip resolves them, and the project's extras:
`[project.optional-dependencies]`, setuptools' dynamic ones (read from their files) and poetry's
`[tool.poetry.extras]`, which install with the project as `-e .[extra]`."""
from __future__ import annotations

from dependency_groups import CyclicDependencyError, DependencyGroupResolver
from packaging.requirements import InvalidRequirement

from magis_ray.actors.code.workspaces import one_line

from .project import Project
from .requirement_files import RequirementFile
from .result import Source
from .roles import roles
from .values import strings, table


def dependency_group_sources(project: Project) -> list[Source]:
    groups = project.pyproject.get("dependency-groups")
    if groups is None:
        return []
    if not isinstance(groups, dict):
        project.problems.append("pyproject.toml [dependency-groups] is not a table")
        return []
    sources = []
    for name, role in roles(groups).items():
        requirements = group(project, name, "pyproject.toml")
        if requirements is not None:
            sources.append(project.source(f"pyproject.toml [dependency-groups] {name}", "dependency-groups", role,
                                          requirements))
    return sources


def group(project: Project, name: str, where: str) -> list[str] | None:
    """A dependency group's requirements, its include-groups resolved; None when it cannot be.
    `where` names the place that asks for it."""
    groups = project.pyproject.get("dependency-groups")
    if not isinstance(groups, dict):
        project.problems.append(f"{where} names dependency group {name}, but pyproject.toml has no [dependency-groups]")
        return None
    try:
        resolved = DependencyGroupResolver(groups).resolve(name)
        return project.valid([str(requirement) for requirement in resolved], f"pyproject.toml [dependency-groups] {name}")
    except CyclicDependencyError as error:
        project.problems.append(f"pyproject.toml [dependency-groups] {name}: {error}")
    except LookupError:
        project.problems.append(f"{where} names dependency group {name}, which [dependency-groups] does not have")
    except (ValueError, TypeError, InvalidRequirement) as error:
        project.problems.append(f"pyproject.toml [dependency-groups] {name}: {one_line(str(error), 200)}")
    return None


def extra_sources(project: Project) -> list[Source]:
    declared = pyproject_extras(project)
    sources = []
    for name, role in roles(declared).items():
        where, requirements = declared[name]
        sources.append(project.source(f"{where} {name}", "extras", role, project.valid(requirements, f"{where} {name}"),
                                      [name], through_extras=True))
    return sources


def pyproject_extras(project: Project) -> dict[str, tuple[str, list[str]]]:
    """pyproject.toml's extras by name: where each is declared and its requirements."""
    found: dict[str, tuple[str, list[str]]] = {}
    optional = table(project.pyproject, "project").get("optional-dependencies")
    if isinstance(optional, dict):
        for name, value in optional.items():
            found[name] = ("pyproject.toml [project.optional-dependencies]", strings(value))
    dynamic = table(project.pyproject, "tool", "setuptools", "dynamic").get("optional-dependencies")
    if isinstance(dynamic, dict):
        for name, value in dynamic.items():
            paths = value.get("file") if isinstance(value, dict) else None
            paths = [paths] if isinstance(paths, str) else strings(paths)
            found[name] = ("pyproject.toml [tool.setuptools.dynamic] optional-dependencies",
                           RequirementFile(project.files, paths).requirements)
    for name, value in table(project.pyproject, "tool", "poetry", "extras").items():
        found.setdefault(name, ("pyproject.toml [tool.poetry.extras]", strings(value)))
    return found
