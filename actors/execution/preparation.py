"""A repository's tests made ready and measured before anyone relies on them: the environment its
declarations give (inferred.py) built, its suite collected in the sandbox, each module the
collection says is missing mapped to the distribution that provides it and added, a bounded number
of times, and then the suite run once at the base, bounded in time.

What the run at the base fails is a known failure, never held against a patch; a failure for want of
the network or of a server this sandbox does not give is counted apart, with the reason. The report
(`SuiteReport`) is what the team's preparation records and what `magis-ray tests` prints.

A missing module is mapped to its distribution by pipreqs' map of import names (`yaml` is PyYAML,
`PIL` is Pillow), else by its own name, and only a distribution the package index has is added: a
module of the project itself (its install failed, or its layout hides it) is never one."""
from __future__ import annotations

import functools
import time
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import msgspec
from packaging.utils import canonicalize_name

from magis_ray.events.schema import SourceRead, SuiteReport

from magis_ray.actors.code.pytest_log import (NETWORK_SIGNS, SERVICE_SIGNS, Collection, failures_wanting,
                                              parse_pytest_log, read_collection, read_counts, read_progress)
from magis_ray.actors.code.suites import PYTEST_COMMAND

from .environments.dated import on_the_index
from .inferred import Inference
from .specs import InstanceSpec
from .runner import TestRunner
from .testbeds import Testbed, TestbedCache

ROUNDS = 3  # collections that may each add what the one before found missing
# One test id a line: `--verbosity` sets the level outright, where a `-q` would add to the
# project's own addopts (`-q` there makes `-qq`: counts per file, no ids; `-v` makes a tree)
COLLECT_COMMAND = f"{PYTEST_COMMAND} --collect-only --verbosity=-1"


@dataclass(frozen=True)
class Prepared:
    """The environment as the preparation left it, its testbed, and what it found."""

    spec: InstanceSpec
    inference: Inference | None  # where the project's declarations gave the recipe (None: the user's env-setup)
    testbed: Testbed
    report: SuiteReport

    @property
    def usable(self) -> bool:
        """Whether the team can run tests here: the suite collected at least one test."""
        return self.report.collected > 0

    def line(self) -> str:
        """The one line the terminal says of it: "on: 2,016 collected (...)", "on, partly: ..."."""
        report = self.report
        sources = self.inference.sources_line() if self.inference is not None else "env-setup"
        where = f"{sources}; Python {report.python}"
        if not self.usable:
            why = report.collection_errors[-1] if report.collection_errors else "pytest collected no test"
            return f"off: {why} ({where})"
        if report.collection_errors:
            files = len(report.collection_errors)
            return (f"on, partly: {files} file{'s' if files != 1 else ''} not collectable "
                    f"({report.collection_errors[0].split(': ', 1)[-1]}); {report.collected:,} collected ({where})")
        return f"on: {report.collected:,} collected ({where})"


def prepare_suite(spec: InstanceSpec, testbeds: TestbedCache, runner: TestRunner, repo_path: str | Path,
                  mirrors: str | Path | None = None, collect_only: bool = False, inference: Inference | None = None,
                  rounds: int = ROUNDS) -> Prepared:
    """Build `spec`'s environment and testbed, collect the suite, then run it once at the base
    unless `collect_only`. Where the recipe is an `inference` of the project's declarations, what
    the collection finds missing is added, `rounds` times at most. Raises what TestbedCache.get
    raises."""
    build_seconds = collect_seconds = 0.0
    for round_ in range(rounds + 1):
        testbed = testbeds.get(spec.testbed, repo_path, mirrors=mirrors)
        build_seconds += testbed.env.build_seconds + testbed.build_seconds
        collecting = time.monotonic()
        collection = read_collection(runner.run(testbed, COLLECT_COMMAND, installs=False, name="collect").output)
        collect_seconds += time.monotonic() - collecting
        wanted = distributions_for(collection, Path(testbed.tree), inference) if inference is not None else ()
        if not wanted or round_ == rounds:
            break
        inference = inference.with_added(wanted)
        spec = inference.spec
    if inference is not None and any(plugin.startswith("cov-") for plugin in collection.plugins):
        # pytest-cov, which the project's own addopts may ask for: no coverage measured in its runs
        # (a tracer slows every test, and a minimum it sets fails runs that test a part of the suite)
        inference = inference.with_options(("--no-cov",))
        spec = inference.spec
    report = SuiteReport(
        python=testbed.env.python_version.rsplit(".", 1)[0], date=inference.date if inference is not None else "",
        sources=sources_read(inference) if inference is not None else [], added=list(inference.added) if inference else [],
        options=list(inference.options) if inference else [], collected=collection.collected, deselected=collection.deselected, build_seconds=round(build_seconds, 1),
        collect_seconds=round(collect_seconds, 1),
        collection_errors=[f"{file}: {why}" for file, why in collection.errors]
                          + ([f"pytest: {collection.internal_error}"] if collection.internal_error else []),
        problems=list(inference.declared.problems) if inference is not None else [])
    if collection.collected and not collect_only:
        report = run_at_the_base(report, spec, testbed, runner)
    return Prepared(spec, inference, testbed, report)


def run_at_the_base(report: SuiteReport, spec: InstanceSpec, testbed: Testbed, runner: TestRunner) -> SuiteReport:
    """The whole suite once on the base commit, within the runner's limits: its counts, its known
    failures, and those among them that need what the sandbox does not give."""
    # a line per test as it runs, whatever the project's addopts make of a `-v`
    run = runner.run(testbed, f"{spec.test_command} --verbosity=1", parse_pytest_log, installs=False, name="base")
    # a run cut off at its time limit has no summary: what its lines said as each test ran
    statuses = run.results or read_progress(run.output)
    # tests by id (a log line of the run that starts ERROR is no test)
    failing = sorted(test for test, status in statuses.items() if status in ("FAILED", "ERROR") and "::" in test)
    network = failures_wanting(run.output, failing, NETWORK_SIGNS)
    services = [test for test in failures_wanting(run.output, failing, SERVICE_SIGNS) if test not in network]
    left_out = [*([f"{len(network)} need the network"] if network else []),
                *([f"{len(services)} need a server (a database, a cache)"] if services else [])]
    # pytest's own count (an id with a space, a skip summarized per file, a log line would miscount
    # the lines); a run cut off before it says, by what its lines said
    tally = Counter(statuses.values())
    said = read_counts(run.output) or {"passed": tally["PASSED"], "xfailed": tally["XFAIL"], "failed": tally["FAILED"],
                                       "error": tally["ERROR"], "skipped": tally["SKIPPED"]}
    return msgspec.structs.replace(report, ran=True, timed_out=run.timed_out,
                                   passed=said.get("passed", 0) + said.get("xfailed", 0), failed=said.get("failed", 0),
                                   errors=said.get("error", 0), skipped=said.get("skipped", 0), known_failures=failing,
                                   left_out=left_out, run_seconds=round(run.duration_s, 1))


def distributions_for(collection: Collection, tree: Path, inference: Inference) -> tuple[str, ...]:
    """The distributions that provide the modules `collection` found missing: none for a module of
    the project's own, one already asked for, or one the index does not have."""
    asked = {canonicalize_name(name) for name in inference.added}
    wanted = []
    for module in collection.missing_modules:
        if (tree / module).exists() or (tree / f"{module}.py").exists() or (tree / "src" / module).exists():
            continue  # the project's own: its install, not a distribution, is missing
        wanted.append(import_names().get(module, module))
    # an option of the project's addopts pytest does not know: its plugin, named as plugins are (pytest-cov's --cov)
    wanted += [f"pytest-{word}" for word in collection.plugin_options]
    found = []
    for name in wanted:
        if canonicalize_name(name) not in asked and on_the_index(name):
            found.append(name)
            asked.add(canonicalize_name(name))
    return tuple(found)


@functools.cache
def import_names() -> dict[str, str]:
    """pipreqs' map of import names to the distributions that provide them (`yaml` -> PyYAML)."""
    text = resources.files("pipreqs").joinpath("mapping").read_text(encoding="utf-8")
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def sources_read(inference: Inference) -> list[SourceRead]:
    """Each place read, with what of it is installed: a chosen place's lines, but those left out
    for clashing with an earlier place's (an extra's come with the project, and are all installed)."""
    declared = inference.declared

    def installed(source) -> list[str]:
        lines = [line for line in source.requirements
                 if line in declared.requirements or (source.through_extras and declared.installable)]
        return [*lines, *(f".[{e}]" for e in source.extras)]

    return [SourceRead(name=source.name, installed=installed(source) if source.chosen else []) for source in declared.sources]
