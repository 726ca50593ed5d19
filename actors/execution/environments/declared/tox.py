"""tox, the fourth place: its configuration is the first of tox.toml, tox.ini, setup.cfg's
`[tox:tox]` and pyproject's `[tool.tox]` (its `legacy_tox_ini`, or the TOML form), as tox itself
looks; its test environment for the chosen Python is one source, with its `deps`, `extras` and
`dependency_groups` and what its commands install."""
from __future__ import annotations

from packaging.utils import canonicalize_name

from .commands import CommandInstalls
from .project import Project
from .pyproject import group
from .requirement_files import RequirementFile
from .result import DEV, TEST, Source
from .roles import runs_tests
from .tox_environment import ToxEnvironment, python_factors
from .tox_ini import ToxIni
from .tox_toml import ToxToml
from .values import parse_requirement, table


def tox_sources(project: Project, python: str) -> list[Source]:
    environment = _test_environment(project, python_factors(python))
    return [] if environment is None else [_source(project, environment)]


def _test_environment(project: Project, factors: set[str]) -> ToxEnvironment | None:
    files, problems = project.files, project.problems
    tox_toml = files.toml("tox.toml")
    if tox_toml:
        return ToxToml(tox_toml, "tox.toml", problems).environment(factors)
    tox_ini = files.ini_file("tox.ini")
    if tox_ini is not None and tox_ini.sections():
        return ToxIni(tox_ini, "tox.ini", problems).environment(factors)
    if project.setup_cfg is not None and project.setup_cfg.has_section("tox:tox"):
        return ToxIni(project.setup_cfg, "setup.cfg", problems).environment(factors)
    tool_tox = table(project.pyproject, "tool", "tox")
    legacy = tool_tox.get("legacy_tox_ini")
    if isinstance(legacy, str):
        parser = files.ini(legacy, "pyproject.toml [tool.tox] legacy_tox_ini")
        if parser is not None:
            return ToxIni(parser, "pyproject.toml [tool.tox] legacy_tox_ini", problems).environment(factors)
    elif tool_tox:
        return ToxToml(tool_tox, "pyproject.toml [tool.tox]", problems).environment(factors)
    return None


def _source(project: Project, environment: ToxEnvironment) -> Source:
    """The environment's deps, extras and groups, and what its commands install."""
    label = environment.label
    parsed = RequirementFile(project.files, [])
    installed = CommandInstalls(project, parsed, label, environment.commands)
    for line in environment.deps:
        requirement = parse_requirement(line)
        if requirement is not None and canonicalize_name(requirement.name) in installed.tools:
            continue  # `deps = poetry` is how its commands install, not what the tests import
        parsed.take(line, label)
    for name in environment.dependency_groups:
        parsed.requirements.extend(group(project, name, f"{label} dependency_groups") or [])
    installed.read()
    requirements = [*parsed.requirements, *installed.requirements]
    role = TEST if runs_tests(environment.commands) else DEV
    # skip_install: tox does not install the project, so its `extras` go unused; deps and commands
    # that install the project themselves (`pip install -e .[d]`) still give theirs
    extras = [*([] if environment.skip_install else environment.extras), *parsed.extras, *installed.extras]
    return project.source(label, "tox", role, requirements, extras, parsed.constraints, parsed.files)
