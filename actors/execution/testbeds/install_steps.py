"""A testbed's install steps as commands: which are pip's, the date's pins on their command line,
the spec's pre-install edits as one script, what a step asks uv to resolve, and what building the
project needs."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PIP_INSTALL = re.compile(r"^\s*(?:python -m pip|pip) install (.*)$")
DEFAULT_BUILD_REQUIRES = ("setuptools>=40.8.0", "wheel")  # pip's own default for a project without pyproject.toml
CONFLICT_SIGNS = ("ResolutionImpossible", "conflicting dependencies", "Could not find a version that satisfies")
_SECTION = re.compile(r"^\s*\[([^\]]+)\]")
_VERSION_TAG = re.compile(r"^\s*tag[_-](build|date)\s*[=:]\s*(.*?)\s*$", re.IGNORECASE)
_TRUE = ("1", "true", "yes", "on", "y", "t")


def pre_install_script(commands: tuple[str, ...]) -> str:
    """The spec's pre-install commands as lines of one script, as the harness's setup script has
    them (`set -eux`, its bash's pipefail aside): it stops at the first that fails, a `cd` or a
    variable carries to the next line, and the log shows each line as it runs."""
    return "\n".join(("set -eux", *commands))


def pinned(command: str, constraints: dict[str, str]) -> str:
    """A pip install step with the constraints on its command line: there they bind what it
    installs and not the build dependencies pip gets for it in an environment of their own (the
    harness's builds were free; pylint 2.15 asks for setuptools~=62.6 to build)."""
    if constraints and PIP_INSTALL.match(command):
        return f"{command} -c {shlex.quote(constraints['PIP_CONSTRAINT'])}"
    return command


def unpinned_env(command: str, constraints: dict[str, str]) -> dict[str, str]:
    """Another step (a user's own setup command) gets the constraints from the environment."""
    return {} if PIP_INSTALL.match(command) else constraints


def uv_requirements(arguments: str, tree: Path) -> tuple[list[str], tuple[str, ...]] | None:
    """A pip install step's arguments as what `uv pip compile` resolves: (requirement lines, uv's
    options), or None for an argument this does not know (pip then resolves). The project is named
    by the tree's own path, not /testbed: uv keeps a local project's metadata in its cache by path,
    and every testbed's tree is /testbed in its sandbox. It is resolved as installed, not editable:
    its requirements are the same, and an editable install's metadata needs the backend's PEP 660
    hooks, which no setuptools before 64 (August 2022) has: uv builds with the setuptools of the
    date, where pip falls back to `setup.py develop`. Verbosity and pip's choice of build interface
    change nothing that is resolved."""
    try:
        words = shlex.split(arguments)
    except ValueError:
        return None

    def located(requirement: str) -> str | None:
        """The tree's own path for a requirement that names the project, else None."""
        if requirement == "." or requirement.startswith((".[", "./")):
            return str(tree) + requirement[1:]
        return None

    lines: list[str] = []
    options: list[str] = []
    words.reverse()
    while words:
        word = words.pop()
        if word in ("-v", "--verbose", "-q", "--quiet", "--no-use-pep517"):
            continue
        if word == "--no-build-isolation":
            options.append(word)
        elif word in ("-e", "--editable") and words:
            requirement = words.pop()
            project = located(requirement)
            lines.append(project if project is not None else f"-e {requirement}")
        elif word.startswith("-"):
            return None
        else:
            lines.append(located(word) or word)
    return (lines, tuple(options)) if lines else None


def without_version_tags(setup_cfg: str) -> str | None:
    """setup.cfg's text without `[egg_info]`'s tags of the version (a tag_build that says one, a
    tag_date that is on), or None where it has none. A tag changes no requirement, and the
    metadata the setuptools of 2022 and before builds tags the version twice, with the build's
    date, in a form uv refuses (`1.0.dev20261129.dev-20261129`), so uv could not resolve the
    project's requirements."""
    section, kept, dropped = "", [], False
    for line in setup_cfg.splitlines(keepends=True):
        header = _SECTION.match(line)
        tag = _VERSION_TAG.match(line) if section == "egg_info" and not header else None
        if header:
            section = header.group(1).strip().lower()
        elif tag and (tag.group(2) if tag.group(1).lower() == "build" else tag.group(2).lower() in _TRUE):
            dropped = True
            continue
        kept.append(line)
    return "".join(kept) if dropped else None


def build_requirements(tree: Path) -> tuple[str, ...]:
    """What building the project needs: its pyproject.toml's [build-system] requires, else pip's
    default; and wheel, which setuptools asks for when it builds an editable install."""
    try:
        requires = list(tomllib.loads((tree / "pyproject.toml").read_text()).get("build-system", {}).get("requires", []))
    except (OSError, ValueError):
        requires = []
    if not requires:
        requires = list(DEFAULT_BUILD_REQUIRES)
    if not any(re.match(r"wheel\b", r) for r in requires):
        requires.append("wheel")
    return tuple(requires)
