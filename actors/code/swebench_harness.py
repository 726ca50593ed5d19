"""The SWE-bench harness (the optional `swebench` package, the `grade` extra, pinned 4.1.0): the
one module that imports it. Grading and the SWE-bench instances' recipes use it: its spec tables,
its log parsers per repository (Django's runner's among them), its eval script and its report
functions. The team's tests on a user's own repository never come here (pytest's output is read by
actors/code/pytest_log.py), so a plain install tests a user's repository; tests/test_layout.py
checks that no other module imports swebench.

It sits in the execution layer, not in actors/swebench, because the team's bench (actors/runtime)
builds a SWE-bench instance's testbed from the same recipe grading builds, and the runtime knows
nothing of grading."""
from __future__ import annotations

from typing import Callable, NamedTuple

from magis_ray.events.errors import Unavailable

# What installs the harness, for the messages that name it.
EXTRA = "grade"
INSTALL = "pip install 'magis-ray[grade]'"


class HarnessMissing(Unavailable):
    """The optional `swebench` package is not installed; the message is one line, without the
    words of what needed it (the caller says that)."""


class Harness(NamedTuple):
    """The harness's modules that grading reads directly (its constants, its grading functions)
    and the tables the recipes read."""

    constants: object  # swebench.harness.constants
    grading: object  # swebench.harness.grading
    parsers: dict  # swebench.harness.log_parsers.MAP_REPO_TO_PARSER: repo -> parser(log, spec)
    spec_python: object  # swebench.harness.test_spec.python
    TestSpec: type  # swebench.harness.test_spec.test_spec.TestSpec


def harness() -> Harness:
    """The harness's modules; HarnessMissing when the package is absent."""
    try:
        from swebench.harness import constants, grading
        from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
        from swebench.harness.test_spec import python as spec_python
        from swebench.harness.test_spec.test_spec import TestSpec
    except ImportError as exc:
        raise HarnessMissing(f"the swebench package is not installed ({exc}); it comes with the '{EXTRA}' extra: "
                             f"{INSTALL}") from None
    return Harness(constants, grading, MAP_REPO_TO_PARSER, spec_python, TestSpec)


def available() -> bool:
    """Whether the harness can be imported here."""
    try:
        harness()
    except HarnessMissing:
        return False
    return True


def test_spec(record: dict, fail_to_pass: list[str] | None = None, pass_to_pass: list[str] | None = None):
    """The harness's TestSpec of a record, as its parsers and its report read it (no Docker fields)."""
    spec_class = harness().TestSpec
    return spec_class(instance_id=record["instance_id"], repo=record["repo"], version=str(record.get("version", "")),
                      repo_script_list=[], eval_script_list=[], env_script_list=[], arch="x86_64",
                      FAIL_TO_PASS=list(fail_to_pass or []), PASS_TO_PASS=list(pass_to_pass or []), language="py",
                      docker_specs={}, namespace=None)


def repository_parser(record: dict) -> Callable[[str], dict[str, str]]:
    """The harness's log parser for the record's repository: test output -> {test: status}."""
    parser = harness().parsers[record["repo"]]
    spec = test_spec(record)
    return lambda log: parser(log, spec)


def parse_django_log(log: str) -> dict[str, str]:
    """Django's runner's output (`tests/runtests.py --verbosity 2`) read as the harness reads it."""
    harness()
    from swebench.harness.log_parsers.python import parse_log_django

    return parse_log_django(log, None)


def test_directives(record: dict) -> list[str]:
    """What the harness's test command is given for the record's test patch (files, or Django labels)."""
    return harness().spec_python.get_test_directives(record)


def modified_files(patch: str) -> list[str]:
    """The files a patch changes that exist before it (the harness's get_modified_files)."""
    harness()
    from swebench.harness.utils import get_modified_files

    return get_modified_files(patch)


def clean_environment_yml(text: str) -> str:
    harness()
    from swebench.harness.test_spec.python import clean_environment_yml as clean

    return clean(text)


def git_apply_commands() -> list[str]:
    """The harness's three ways of applying a prediction, in its order."""
    harness()
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    return list(GIT_APPLY_CMDS)


def eval_script_lines(record: dict, specs: dict, base_commit: str, test_patch: str) -> list[str]:
    """The harness's own eval script for a SWE-bench spec (its make_eval_script_list_py)."""
    harness()
    from swebench.harness.test_spec.python import make_eval_script_list_py

    return make_eval_script_list_py(record, specs, "testbed", "/testbed", base_commit, test_patch)
