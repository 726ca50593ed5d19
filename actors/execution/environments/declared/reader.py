"""The reading itself: the project's files opened once, its Python chosen, then every place read in
the order the package's docstring gives, and what they declare composed."""
from __future__ import annotations

from collections.abc import Sequence

from .compose import compose
from .files import ListFolder, ProjectFiles, ReadText
from .project import Project
from .pyproject import dependency_group_sources, extra_sources
from .python import classifier_versions, newest_allowed, requires_python
from .requirement_files import requirement_file_sources
from .result import Declared
from .setup_sources import setup_cfg_sources, setup_py_sources
from .tools import hatch_sources, pdm_sources, poetry_sources
from .tox import tox_sources


def read_declared(read: ReadText, listdir: ListFolder, *, pythons: Sequence[str]) -> Declared:
    """What the project whose files `read` and `listdir` give declares for its tests.

    `read(path)` is a file's text or None; `listdir(folder)` a folder's entry names or None
    ("" is the root); paths are relative to the root, with "/". `pythons` are the versions on
    offer ("3.11", or "3.11.7")."""
    project = Project(ProjectFiles(read, listdir))
    requires, requires_from = requires_python(project)
    python = newest_allowed(tuple(pythons), requires, classifier_versions(project), project.problems)
    sources = [
        *dependency_group_sources(project),
        *extra_sources(project),
        *requirement_file_sources(project),
        *tox_sources(project, python),
        *hatch_sources(project),
        *pdm_sources(project),
        *poetry_sources(project),
        *setup_cfg_sources(project),
        *setup_py_sources(project),
    ]
    return compose(project, sources, python, requires, requires_from)
