"""The test environment of a repository that no one wrote down, from what the project itself declares
at the commit (environments/declared/): the recipe a run or a grading gets for a repository outside
SWE-bench's spec tables.

- **The interpreter**: the newest Python on this machine that the project's `requires-python` (or,
  without it, its classifiers) allows, and that had been released by the commit's date: a commit
  was never tested on a Python younger than itself. A `python` setting overrides.
- **The date**: the commit's own. Everything resolves as of then (`--exclude-newer`), as
  SWE-bench's environments resolve as of their instances' era, so a commit of 2023 gets the
  pytest, the plugins and the libraries of 2023.
- **The environment**: the requirement lines of the test entries the project declares (dependency
  groups, requirement files, tox's deps, the tools' groups), pytest (the project's own pin, else
  whichever was current at the date), and what the suite's collection found missing.
- **The testbed**: the project installed editable with the extras its test entries name
  (`pip install -e .[test]`), nothing where it is no installable package (a folder of modules
  and tests, which pytest imports from the checkout).

The tests run with pytest (`runner`'s suite, read by the core's parser): a repository whose tests
need another runner gives its own `test-cmd`, as it gives `env-setup` to install it its own way."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from magis_ray.actors.code.pytest_log import parse_pytest_log
from magis_ray.actors.code.workspaces import CommitFiles, WorkspaceError
from magis_ray.actors.code.suites import PYTEST_COMMAND

from .environments import EnvironmentUnsupported, Recipe
from .environments.declared import Declared, files_in_snapshot, read_declared
from .environments.interpreters import available_versions
from .specs import InstanceSpec
from .testbeds import TestbedRecipe

# When each CPython line was first released: a commit made before a line existed is never run on it.
PYTHON_RELEASED = {"3.6": "2016-12-23", "3.7": "2018-06-27", "3.8": "2019-10-14", "3.9": "2020-10-05",
                   "3.10": "2021-10-04", "3.11": "2022-10-24", "3.12": "2023-10-02", "3.13": "2024-10-07",
                   "3.14": "2025-10-07"}


@dataclass(frozen=True)
class Inference:
    """A repository's test environment as its declarations give it at one commit."""

    spec: InstanceSpec
    declared: Declared
    python: str  # the interpreter chosen ("3.12")
    date: str  # what everything resolves as of (ISO 8601, UTC): the commit's date
    added: tuple[str, ...] = ()  # distributions added for modules the suite's collection found missing
    options: tuple[str, ...] = ()  # pytest's options the preparation chose ("--no-cov": no coverage measured)

    def with_added(self, distributions: tuple[str, ...]) -> Inference:
        """The same inference with `distributions` in its environment too (another recipe, so
        another environment: the one without them stays as it was)."""
        added = tuple(dict.fromkeys((*self.added, *distributions)))
        env = replace(self.spec.testbed.env, requirements=_requirements_text(self.declared, added))
        return replace(self, spec=replace(self.spec, testbed=replace(self.spec.testbed, env=env)), added=added)

    def with_options(self, options: tuple[str, ...]) -> Inference:
        """The same inference with its tests run with pytest's `options` too."""
        command = " ".join([PYTEST_COMMAND, *options])
        return replace(self, spec=replace(self.spec, test_command=command), options=tuple(options))

    def sources_line(self) -> str:
        """Where the requirements came from, in words: "group tests, tox deps" or "nothing declared"."""
        chosen = [source.name for source in self.declared.chosen()]
        return ", ".join(chosen) if chosen else "nothing declared"


def inferred_spec(record: dict, repo_path: str | Path, python: str = "", pythons: dict[str, str] | None = None) -> Inference:
    """The test environment of `record`'s repository at its base commit, from its declarations;
    `python` ("3.12") overrides the interpreter the declarations choose. EnvironmentUnsupported
    when no interpreter here satisfies the project."""
    try:
        snapshot = CommitFiles(repo_path, record["base_commit"])
    except WorkspaceError as exc:
        raise EnvironmentUnsupported(f"the project's files cannot be read: {exc}") from None
    when = snapshot.committed_at
    offered = [v for v in available_versions(pythons) if v.startswith("3.") and released_by(v, when)]
    read, listdir = files_in_snapshot(snapshot)
    declared = read_declared(read, listdir, pythons=offered)
    chosen = python or declared.python
    if not chosen:
        needs = declared.requires_python or "its classifiers' Python"
        raise EnvironmentUnsupported(f"{record['repo']} needs Python {needs} ({declared.requires_python_from or 'classifiers'}), "
                                     f"and none of those here ({', '.join(offered) or 'none'}) does; give the python setting")
    date = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    label = f"{record['repo']} (declared)"
    own = (declared.project_name,) if declared.installable and declared.project_name else ()
    env = Recipe(python=chosen, requirements=_requirements_text(declared, ()), label=label, uploaded_before=date, without=own)
    install = (f"python -m pip install -e {shlex.quote('.' + _extras(declared))}",) if declared.installable else ()
    testbed = TestbedRecipe(env=env, repo=record["repo"], commit=record["base_commit"], install=install, label=label)
    spec = InstanceSpec(testbed=testbed, test_command=PYTEST_COMMAND, test_files=(), eval_commands=(), parse=parse_pytest_log)
    return Inference(spec=spec, declared=declared, python=chosen, date=date)


def declared_python(record: dict, repo_path: str | Path, pythons: dict[str, str] | None = None) -> str:
    """The interpreter the project's declarations choose at the record's base commit (for a user's
    own `env-setup`, which says how to install but not on which Python)."""
    return inferred_spec(record, repo_path, pythons=pythons).python


def released_by(version: str, when: datetime) -> bool:
    """Whether CPython `version` ("3.12") had been released by `when` (a line not in the table is
    newer than it, so never)."""
    released = PYTHON_RELEASED.get(version)
    return released is not None and datetime.fromisoformat(released).replace(tzinfo=timezone.utc) <= when


def _extras(declared: Declared) -> str:
    return f"[{','.join(declared.extras)}]" if declared.extras else ""


def _requirements_text(declared: Declared, added: tuple[str, ...]) -> str:
    """The environment's requirements file: the chosen entries' requirement lines (setup_requires'
    among them), pytest (the project's own pin, else as of the date), and what collection found
    missing."""
    lines = [line for line in declared.requirements if line.strip()]
    named_pytest = any(_name(line) == "pytest" for line in lines)
    if not named_pytest:
        lines.append(declared.pytest or "pytest")
    lines += [name for name in added if _name(name) not in {_name(line) for line in lines}]
    return "\n".join(lines) + "\n"


def _name(line: str) -> str:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement:
        return ""
