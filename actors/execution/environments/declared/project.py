"""The project being read: its pyproject.toml, setup.cfg and setup.py parsed once, its name,
whether pip can install it and with which backend, the problems found on the way, and the one way
a place's lines become a `Source`."""
from __future__ import annotations

from collections.abc import Iterable

from packaging.utils import canonicalize_name

from .files import ProjectFiles
from .result import Source
from .setup_py import SetupPy
from .values import ini_value, parse_requirement, table, unique


class Project:
    def __init__(self, files: ProjectFiles) -> None:
        self.files = files
        self.problems = files.problems
        self.pyproject = files.toml("pyproject.toml")
        self.setup_cfg = files.ini_file("setup.cfg")
        self.setup_py = SetupPy(files.text("setup.py"), self.problems)
        self.name = self._name()

    def _name(self) -> str:
        for name in (table(self.pyproject, "project").get("name"),
                     table(self.pyproject, "tool", "poetry").get("name"),
                     ini_value(self.setup_cfg, "metadata", "name"),
                     self.setup_py.keyword("name")):
            if isinstance(name, str) and name.strip():
                return canonicalize_name(name.strip())
        return ""

    def build(self) -> tuple[bool, str]:
        """Whether pip can install the project, and its build backend."""
        system = table(self.pyproject, "build-system")
        backend = system.get("build-backend")
        if isinstance(backend, str) and backend.strip():
            return True, backend.strip()
        # pip builds a project from its setup.py, or from pyproject.toml's build system or [project];
        # a setup.cfg alone, or a pyproject.toml of tools' settings alone, it cannot build
        if self.files.text("setup.py") is not None or system or table(self.pyproject, "project"):
            return True, "setuptools.build_meta:__legacy__"  # pip's own choice when none is named
        return False, ""

    def source(self, name: str, kind: str, role: str, requirements: Iterable[str] = (), extras: Iterable[str] = (),
               constraints: Iterable[str] = (), files: Iterable[str] = (), through_extras: bool = False) -> Source:
        """A place as a source; a requirement on the project itself (`attrs[tests]` in attrs) is its extras."""
        own_extras, others = self.own_extras(requirements)
        return Source(name=name, kind=kind, role=role, requirements=unique(others), extras=unique([*extras, *own_extras]),
                      constraints=unique(constraints), files=unique(files), through_extras=through_extras)

    def own_extras(self, lines: Iterable[str]) -> tuple[list[str], list[str]]:
        """The extras of the lines that require the project itself, and the other lines."""
        extras, others = [], []
        for line in lines:
            requirement = parse_requirement(line)
            if requirement is not None and self.name and canonicalize_name(requirement.name) == self.name:
                extras.extend(sorted(requirement.extras))
            else:
                others.append(line)
        return extras, others

    def valid(self, lines: Iterable[str], where: str) -> list[str]:
        """The lines that are requirements pip can take from an index; a problem for each other."""
        kept = []
        for line in lines:
            requirement = parse_requirement(line)
            if requirement is None:
                self.problems.append(f"{where}: {line.strip()!r} is not a requirement; left out")
            elif requirement.url:
                self.problems.append(f"{where}: {requirement.name} from {requirement.url} left out (not from a package index)")
            else:
                kept.append(str(requirement))
        return kept
