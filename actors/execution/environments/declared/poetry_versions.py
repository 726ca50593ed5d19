"""Poetry's dependency tables as PEP 440 requirement lines: its version syntax (`^1.2` is
`>=1.2,<2.0`, `~1.2` is `>=1.2,<1.3`, `1.2.*` is `==1.2.*`, a bare version is `==`, `||` is "or"),
its extras, markers and python restrictions; a dependency from git, a URL or a path is left out."""
from __future__ import annotations

import re

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .values import parse_requirement


def poetry_requirements(table: dict, where: str, problems: list[str]) -> list[str]:
    """Poetry's dependency table as requirement lines (`pytest = "^7.1"` is `pytest>=7.1,<8.0`)."""
    requirements = []
    for name, value in table.items():
        if canonicalize_name(name) != "python":
            for constraint in value if isinstance(value, list) else [value]:
                if line := _poetry_requirement(name, constraint, where, problems):
                    requirements.append(line)
    return requirements


def _poetry_requirement(name: str, constraint, where: str, problems: list[str]) -> str:
    if isinstance(constraint, str):
        constraint = {"version": constraint}
    if not isinstance(constraint, dict):
        problems.append(f"{where} {name}: {constraint!r} is not a poetry constraint; left out")
        return ""
    for key in ("git", "url", "path"):
        if key in constraint:
            problems.append(f"{where} {name} from {key} {constraint[key]} left out (not from a package index)")
            return ""
    specifier = poetry_specifier(str(constraint.get("version", "*")), problems, f"{where} {name}")
    if specifier is None:
        return ""
    extras = constraint.get("extras")
    markers = [f"({constraint['markers']})"] if isinstance(constraint.get("markers"), str) else []
    if isinstance(constraint.get("python"), str):
        python = poetry_specifier(constraint["python"], problems, f"{where} {name} python")
        if python:
            markers.append("(" + " and ".join(f'python_version {s.operator} "{s.version}"' for s in SpecifierSet(python)) + ")")
    line = (name + (f"[{','.join(extras)}]" if isinstance(extras, list) and extras else "") + specifier
            + (f"; {' and '.join(markers)}" if markers else ""))
    if parse_requirement(line) is None:
        problems.append(f"{where} {name}: {constraint!r} gives {line!r}, not a requirement; left out")
        return ""
    return line


def poetry_specifier(constraint: str, problems: list[str], where: str) -> str | None:
    """Poetry's version constraint as a PEP 440 specifier: `^1.2` is `>=1.2,<2.0`, `~1.2` is
    `>=1.2,<1.3`, `1.2.*` is `==1.2.*`, a bare version is `==`. PEP 440 has no "or": ranges
    joined by `||` become the one range from their lowest bound to their highest, which allows
    them all."""
    alternatives = []
    for alternative in [part for part in re.split(r"\|\|?", constraint) if part.strip()] or ["*"]:
        specifiers = []
        for clause in re.split(r"\s*,\s*|\s+(?=[<>=!~^])", alternative.strip()):
            converted = _poetry_clause(clause.replace(" ", ""))
            if converted is None:
                problems.append(f"{where}: {constraint!r} is not a poetry constraint; left out")
                return None
            specifiers.extend(converted)
        alternatives.append(specifiers)
    if len(alternatives) == 1:
        return ",".join(alternatives[0])
    lower = [s for group in alternatives for s in group if s.startswith(">")]
    upper = [s for group in alternatives for s in group if s.startswith("<")]
    bounds = []
    if lower and all(any(s.startswith(">") for s in group) for group in alternatives):
        bounds.append(min(lower, key=lambda s: Version(s.lstrip("<>="))))
    if upper and all(any(s.startswith("<") for s in group) for group in alternatives):
        bounds.append(max(upper, key=lambda s: Version(s.lstrip("<>="))))
    return ",".join(bounds)


def _poetry_clause(clause: str) -> list[str] | None:
    try:
        if clause in ("*", ""):
            return []
        if clause.startswith("^"):
            release = list(Version(clause[1:]).release)
            first = next((i for i, part in enumerate(release) if part != 0), len(release) - 1)
            upper = [*release[:first], release[first] + 1]
            upper += [0] * max(0, min(len(release), 2) - len(upper))
            return [f">={clause[1:]}", f"<{'.'.join(map(str, upper))}"]
        if clause.startswith("~") and not clause.startswith("~="):
            release = list(Version(clause[1:]).release)
            upper = [release[0] + 1] if len(release) == 1 else [release[0], release[1] + 1]
            return [f">={clause[1:]}", f"<{'.'.join(map(str, upper))}"]
        if re.match(r"^(===|==|!=|<=|>=|~=|<|>)", clause):
            SpecifierSet(clause)
            return [clause]
        if clause.startswith("="):
            SpecifierSet("=" + clause)
            return ["=" + clause]
        SpecifierSet(f"=={clause}")
        return [f"=={clause}"]
    except (InvalidVersion, InvalidSpecifier):
        return None
