"""SWE-bench's own recipe for an instance, from the `swebench` package (pinned 4.1.0, the last
line whose harness still carries the Python spec tables in swebench.harness.constants; read
through swebench_harness.py), in the harness's two layers: the environment (interpreter,
requirements, packages; shared by every instance of a (repo, version)) and the testbed (the
spec's pre-install edits and its install, run at the instance's own base commit). Where the
harness would fetch a requirements file or an environment.yml from GitHub, it is read from the
local repository at the environment's setup commit instead; conda package lists and
environment.yml files map to pip (conda.py); an `apt-get install` of the spec needs the package
on this machine already.

A user's own repository (`custom_spec`) needs none of it: its tests are pytest's, read by the
core's parser, so a plain install tests it."""
from __future__ import annotations

import dataclasses
import json
import re
import shlex
from dataclasses import dataclass
from typing import Callable

from magis_ray.events.errors import Unavailable
from magis_ray.actors.code.pytest_log import parse_pytest_log
from magis_ray.actors.code import swebench_harness
from magis_ray.actors.execution.environments.conda import as_conda_has_it, pip_equivalent
from magis_ray.actors.execution.environments import Recipe
from magis_ray.actors.execution.environments.system import system_packages_of
from magis_ray.actors.execution.testbeds import TestbedRecipe
from magis_ray.actors.code.workspaces import read_file_at


# SWE-bench's specs leave most versions free, and its FAIL_TO_PASS / PASS_TO_PASS lists were made
# with the releases of their time: today's break the older code and tests (NumPy 2 removed np.Inf;
# pytest 8 dropped nose-style setup()). Environments resolve as of the start of 2024.
SWEBENCH_ERA = "2024-01-01T00:00:00Z"
# Debian packages of a spec's apt-get line that only some tests use: without them those tests skip
# (matplotlib's usetex, pgf and PostScript-distiller tests, its animation writers, its ImageMagick
# comparisons), so grading goes on and names them (a PASS_TO_PASS test among those skipped is then
# unresolved, for that reason). Every other package of the line is needed to build or run: one
# missing makes the environment unsupported, named with its install command.
TEST_ONLY_PACKAGES = frozenset({
    "imagemagick", "ffmpeg", "dvipng", "cm-super", "texlive", "texlive-latex-extra", "texlive-fonts-recommended",
    "texlive-xetex", "texlive-luatex", "ghostscript", "inkscape",
})
# matplotlib's build downloads FreeType and Qhull (its spec even fetches Qhull with wget); a test
# run has no network, so it builds with the system's (Debian's libfreetype-dev, libqhull-dev), as
# its build option mplsetup.cfg [libs] system_freetype / system_qhull says.
# ImageMagick and TeX Live bring Ghostscript into the spec's image (a dependency); matplotlib
# compares its PDF and EPS baseline images with it, and most of its instances' PASS_TO_PASS hold
# such comparisons (they skip without it): needed to grade, where those two only make tests skip.
BROUGHT_BY = {"imagemagick": "ghostscript", "texlive": "ghostscript"}
SYSTEM_LIBRARIES_CFG = "printf '[libs]\\nsystem_freetype = True\\nsystem_qhull = True\\n' > mplsetup.cfg"
SYSTEM_LIBRARIES_PACKAGES = ("libfreetype-dev", "libqhull-dev", "pkg-config")
LOCALE_SETUP = re.compile(r"locale-gen|/etc/locale\.gen")
LOCALE_NAME = re.compile(r"(?:\bLANG=|\bLC_ALL=|locale-gen\s+)([A-Za-z]{2,3}_[A-Za-z]{2}\.[A-Za-z0-9-]+)")


@dataclass(frozen=True)
class InstanceSpec:
    testbed: TestbedRecipe  # the environment (testbed.env) and the install at the base commit
    test_command: str  # the spec's test_cmd with the test patch's files as directives
    test_files: tuple[str, ...]  # files the test patch touches (reset to the base commit before it applies)
    eval_commands: tuple[str, ...]  # the spec's extra eval steps, before the tests
    parse: Callable[[str], dict[str, str]]  # test output -> {test: PASSED/FAILED/...}
    harness_specs: dict | None = None  # the swebench spec itself (None for a user's own setup)
    optional_packages: tuple[str, ...] = ()  # Debian packages of the spec that only some tests use

    @property
    def recipe(self) -> Recipe:
        return self.testbed.env


def _requirements(repo: str, repo_path, commit: str, constants, spec_python) -> str:
    """The requirements file the harness would fetch, read from the repository (with -r files)."""
    paths = constants.MAP_REPO_TO_REQS_PATHS.get(repo, ["requirements.txt"])
    for path in paths:
        text = read_file_at(repo_path, commit, path)
        if text is not None:
            break
    else:
        raise ValueError(f"no requirements file at {', '.join(paths)} in {repo}@{commit[:12]}")
    folder = "/".join(path.split("/")[:-1])
    excluded = ("-e .", "#", ".[test")
    original, extra = [], []
    for line in text.split("\n"):
        if line.strip().startswith("-r"):
            name = line.strip()[2:].strip()
            nested = read_file_at(repo_path, commit, f"{folder}/{name}" if folder else name)
            for nested_line in (nested or "").split("\n"):
                if not any(nested_line.strip().startswith(x) for x in excluded):
                    extra.append(nested_line)
        elif not any(line.strip().startswith(x) for x in excluded):
            original.append(line)
    extra.append("\n".join(original))
    return spec_python.clean_requirements("\n".join(extra))


class NoSpec(Unavailable, KeyError):
    """The swebench package has no spec for this (repo, version)."""


def _environment_yml(repo: str, repo_path, commit: str, constants) -> tuple[tuple[str, ...], str]:
    """The environment.yml the harness would fetch, as pip packages; ("", why) when there is none."""
    paths = constants.MAP_REPO_TO_ENV_YML_PATHS.get(repo, ["environment.yml"])
    for path in paths:
        text = read_file_at(repo_path, commit, path)
        if text is not None:
            mapped = pip_equivalent(swebench_harness.clean_environment_yml(text))
            return mapped.packages, ""
    return (), f"no environment.yml at {', '.join(paths)} in {repo}@{commit[:12]}"


def instance_spec(record: dict, repo_path) -> InstanceSpec:
    """The recipe and test command of a SWE-bench record (a dict with the dataset's fields; a run's
    issue has no test patch, and then the command names no test files). NoSpec when the harness
    has no spec for its (repo, version); HarnessMissing without the harness."""
    constants, _, _, spec_python, _ = swebench_harness.harness()
    repo, version = record["repo"], str(record.get("version", ""))
    try:
        specs = constants.MAP_REPO_VERSION_TO_SPECS[repo][version]
    except KeyError:
        raise NoSpec(f"the swebench package has no spec for {repo} version {version!r}") from None
    setup_commit = record.get("environment_setup_commit") or record["base_commit"]
    unsupported = ""
    requirements = ""
    packages: tuple[str, ...] = ()
    wanted = specs.get("packages", "")
    if wanted == "requirements.txt":
        try:
            requirements = _requirements(repo, repo_path, setup_commit, constants, spec_python)
        except ValueError as exc:
            unsupported = str(exc)
    elif wanted == "environment.yml":
        packages, unsupported = _environment_yml(repo, repo_path, setup_commit, constants)
    elif wanted:
        # conda names that pip has under the same names; the spec quotes some as a shell would (scikit-learn 1.3)
        packages = tuple(as_conda_has_it(_conda_to_pip(p), str(specs["python"])) for p in shlex.split(wanted))
    system = system_setup(specs)
    env = Recipe(python=str(specs["python"]), requirements=requirements, packages=packages,
                 pip_packages=tuple(specs.get("pip_packages", ())), unsupported=unsupported, label=f"{repo} {version}",
                 uploaded_before=SWEBENCH_ERA)
    install = tuple(c for c in (constants.MAP_REPO_TO_INSTALL.get(repo, ""), specs.get("install", "")) if c)
    testbed = TestbedRecipe(env=env, repo=repo, commit=record["base_commit"], pre_install=system.pre_install,
                            install=install, system_packages=system.required, label=f"{repo} {version}",
                            system_locales=system.locales)
    test_cmd = specs["test_cmd"]
    test_cmd = test_cmd[-1] if isinstance(test_cmd, list) else test_cmd
    directives = swebench_harness.test_directives(record) if record.get("test_patch") else []
    test_files = tuple(swebench_harness.modified_files(record["test_patch"])) if record.get("test_patch") else ()
    return InstanceSpec(
        testbed=testbed, test_command=" ".join([test_cmd, *directives]), test_files=test_files,
        eval_commands=tuple(specs.get("eval_commands", ())), parse=swebench_harness.repository_parser(record),
        harness_specs=dict(specs),
        optional_packages=system.optional,
    )


@dataclass(frozen=True)
class SystemSetup:
    """What a spec does to its image's system, as this machine must have it instead."""

    pre_install: tuple[str, ...]  # the spec's pre-install steps that remain: edits of the checkout
    required: tuple[str, ...]  # Debian packages needed to build or run
    optional: tuple[str, ...]  # Debian packages only some tests use
    locales: tuple[str, ...]  # locales it generates


def system_setup(specs: dict) -> SystemSetup:
    """The spec's pre-install steps sorted: an apt-get install names Debian packages (required, or
    only for some tests); generating a locale (editing /etc/locale.gen, locale-gen) names the locale;
    a download of Qhull becomes the build option for the system's FreeType and Qhull, and their
    packages. What remains edits the checkout, and runs at the testbed's build."""
    pre_install: list[str] = []
    required: list[str] = []
    optional: list[str] = []
    locales: list[str] = []
    system_libraries = False
    generates_locales = any(LOCALE_SETUP.search(c) for c in (*specs.get("pre_install", ()), *specs.get("eval_commands", ())))
    for command in specs.get("pre_install", ()):
        named = system_packages_of(command)
        if named is not None:
            for package in named:
                (optional if package in TEST_ONLY_PACKAGES else required).append(package)
                if package in BROUGHT_BY:
                    required.append(BROUGHT_BY[package])
        elif LOCALE_SETUP.search(command):
            pass  # the locales named below
        elif "qhull" in command.lower():
            system_libraries = True
        else:
            pre_install.append(command)
    if system_libraries:
        pre_install.insert(0, SYSTEM_LIBRARIES_CFG)
        required += [p for p in SYSTEM_LIBRARIES_PACKAGES if p not in required and not
                     (p == "libfreetype-dev" and "libfreetype6-dev" in required)]
    if generates_locales:
        for command in (*specs.get("pre_install", ()), *specs.get("eval_commands", ())):
            locales += [name for name in LOCALE_NAME.findall(command) if name not in locales]
    return SystemSetup(tuple(pre_install), tuple(dict.fromkeys(required)), tuple(dict.fromkeys(optional)), tuple(locales))


def _conda_to_pip(package: str) -> str:
    """A conda package argument as pip's: `name=1.2` (conda: any 1.2.x) -> `name==1.2.*`."""
    name, sep, version = package.partition("=")
    if sep and not version.startswith("=") and not any(c in name for c in "<>!"):
        return f"{name}=={version}" if "*" in version or version.count(".") >= 2 else f"{name}=={version}.*"
    return package


DEFAULT_TEST_CMD = "pytest -rA"
TESTS_PLACE = "{tests}"  # in a user's test command: where the instance's tests go


def _listed(record: dict, name: str) -> list[str]:
    value = record.get(name) or []
    return json.loads(value) if isinstance(value, str) else list(value)


def with_record_tests(spec: InstanceSpec, record: dict, test_cmd: str = "") -> InstanceSpec:
    """`spec` running the record's tests with `test_cmd` (default: the spec's own command): in
    place of {tests} in the command, the record's FAIL_TO_PASS and PASS_TO_PASS by id; else after
    it, the files its test patch touches, as the harness names them. A record without a test patch
    (a team's run) adds none."""
    test_patch = record.get("test_patch", "")
    command = test_cmd or spec.test_command
    if TESTS_PLACE in command:
        tests = [*_listed(record, "FAIL_TO_PASS"), *_listed(record, "PASS_TO_PASS")]
        command = command.replace(TESTS_PLACE, " ".join(shlex.quote(test) for test in tests))
    elif test_patch:
        command = " ".join([command, *swebench_harness.test_directives(record)])
    files = tuple(swebench_harness.modified_files(test_patch)) if test_patch else ()
    return dataclasses.replace(spec, test_command=command, test_files=files, parse=parse_pytest_log)


def custom_spec(record: dict, python: str, env_setup: str, test_cmd: str | None = None) -> InstanceSpec:
    """A user's own repository installed their own way: an environment of `python` alone, and a
    testbed made by `env_setup` at the record's base commit; the tests are `test_cmd` (default
    `pytest -rA`), parsed as pytest's -rA summary. A changed command or commit is another testbed."""
    env = Recipe(python=python, label=f"{record['repo']} (--env-setup)")
    testbed = TestbedRecipe(env=env, repo=record["repo"], commit=record["base_commit"], install=(env_setup,),
                            label=f"{record['repo']} (--env-setup)")
    spec = InstanceSpec(testbed=testbed, test_command=DEFAULT_TEST_CMD, test_files=(), eval_commands=(), parse=parse_pytest_log)
    return with_record_tests(spec, record, test_cmd or "")
