"""A tox test environment as either of tox's configuration formats gives it, and tox's names for
the chosen Python, which decide the environment."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToxEnvironment:
    """The settings of one tox environment that say what it installs; `label` says where it is
    ("tox.ini [testenv]")."""

    label: str
    deps: list[str]
    extras: list[str]
    dependency_groups: list[str]
    commands: list[str]
    skip_install: bool


def python_factors(python: str) -> set[str]:
    """tox's names for the chosen Python: py, py3, py311, py3.11, 3.11."""
    if not python:
        return {"py", "py3"}
    major, minor = python.split(".")[:2]
    return {"py", f"py{major}", f"py{major}{minor}", f"py{major}.{minor}", f"{major}.{minor}"}
