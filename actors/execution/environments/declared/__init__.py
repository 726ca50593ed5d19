"""What a project declares for its tests, read from its files at one commit, nothing run.

`read_declared(read, listdir, pythons=...)` looks in these places, in this order:

1. pyproject.toml `[dependency-groups]` (PEP 735), resolved by PyPA's `dependency-groups`;
2. the project's extras in pyproject.toml: `[project.optional-dependencies]`, setuptools'
   dynamic ones (read from their files) or poetry's `[tool.poetry.extras]`; they install as
   `-e .[extra]` (pyproject.py);
3. requirement files: requirements-dev.txt, test-requirements.txt, requirements/test*.txt,
   tests/requirements.txt and the like, following `-r` and `-c` lines (requirement_files.py);
4. tox: the default test environment of tox.toml, tox.ini, setup.cfg `[tox:tox]` or pyproject's
   `[tool.tox]`: its `deps`, `extras` and `dependency_groups`, and what its commands install
   (`pip install -e .[d]`, `poetry install`, `pdm sync -G test`, `uv sync`) (tox.py, commands.py);
5. hatch's test and default environments, pdm's `[tool.pdm.dev-dependencies]`, poetry's
   `[tool.poetry.group.*.dependencies]` and legacy `[tool.poetry.dev-dependencies]` (tools.py);
6. setup.cfg `[options.extras_require]` and setup.py's `extras_require` and `tests_require`,
   setup.py read as a syntax tree (literals, and names bound to them), never executed
   (setup_sources.py, setup_py.py).

The order is how precisely each place says what the tests need: a dependency group or an extra
is the project saying it in standard metadata; a requirement file says it in a format pip reads
but no standard names; tox and the tools' tables say it for one tool; setup.py says it in code.

Every place is read and reported. An entry is a test entry (named test, tests or testing, or
else test-something such as msgspec's `test-unit`; a tox environment that runs a test runner;
hatch's test environments; a requirement file named for tests) or a dev entry (named dev;
hatch's default environment; poetry's legacy dev-dependencies; a root requirements.txt that
names pytest). All test entries are taken, because projects split what their tests need between
them (anyio's tox environment adds the `trio` extra to its `test` group; black's tox environment
installs the `d` extra with pip); dev entries are taken only when there is no test entry,
because they carry linters, type checkers and documentation tools besides the tests'
requirements: build time and resolution failures, and no more tests run (compose.py).

Nothing here raises for a project's files: a broken pyproject.toml, a requirement pip would not
read or a group that includes itself is one line in `problems`, and the other places are still
read. Requirements pip cannot take from a package index (a git URL, a path outside the project)
are left out, with a line saying so. The reader knows no sandbox, no sharing and no testbeds."""
from __future__ import annotations

from .files import files_in_folder, files_in_snapshot
from .reader import read_declared
from .result import DEV, TEST, Declared, Source

__all__ = ["read_declared", "Declared", "Source", "TEST", "DEV", "files_in_folder", "files_in_snapshot"]
