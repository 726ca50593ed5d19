"""What reading a project gives: each place it declares requirements in (`Source`), and what they
come to for its tests (`Declared`). A place is a test entry (TEST), a dev entry (DEV), or what
setuptools fetches itself to build the project (BUILD: `setup_requires`)."""
from __future__ import annotations

import msgspec

TEST = "test"
DEV = "dev"
BUILD = "build"


class Source(msgspec.Struct, frozen=True):
    """One place the project declares requirements in.

    `name` says where ("pyproject.toml [dependency-groups] tests"); `role` is TEST, DEV or BUILD;
    `chosen` whether it is installed; `requirements` are its requirement lines, `extras` the
    project's own extras it asks for (`-e .[extras]`), `constraints` lines of `-c` files;
    `files` every file read for it (a requirement file and those it includes). An extra's
    requirements come with the project (`through_extras`), so they are not installed again
    unless the project cannot be installed."""

    name: str
    kind: str
    role: str
    chosen: bool = False
    requirements: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    through_extras: bool = False


class Declared(msgspec.Struct, frozen=True):
    """What a project declares for its tests at one commit.

    `install_args` are pip's arguments for the chosen sources: `-e .[extras]` for the project
    when it is installable, then the requirement lines (less those that clash with an earlier
    place's, each a problem); `constraints` belong in a `-c` file. `python` is the newest of the
    offered versions that `requires_python` allows ("" when none does); `pytest` the project's own
    pytest requirement, with every specifier those lines, the constraints and the extras put on it
    ("pytest" when unpinned, "" when nothing chosen names pytest)."""

    sources: tuple[Source, ...]
    install_args: tuple[str, ...]
    requirements: tuple[str, ...]
    extras: tuple[str, ...]
    constraints: tuple[str, ...]
    python: str
    requires_python: str
    requires_python_from: str
    pytest: str
    project_name: str
    installable: bool
    build_backend: str
    problems: tuple[str, ...]

    def chosen(self) -> tuple[Source, ...]:
        return tuple(source for source in self.sources if source.chosen)
