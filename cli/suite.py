"""`magis-ray tests`: what the team will be able to run on a repository, before a batch relies on
it. It builds the test environment a run would use at the commit (the run's settings: the same
recipe, the same sandbox and limits), collects the repository's suite in the sandbox and runs it
once at the base, and says what it found and where each requirement came from. Exit status 0 when
the suite ran (or, with --collect-only, collected), 1 when it could not, 2 on bad input."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .options import test_settings_options
from .wording import count

# --json: every key always there, so that a script reads the same object whatever happened
JSON_COUNTS = ("collected", "passed", "failed", "errors", "skipped", "deselected")


@click.command("tests", short_help="Build the test environment a run would use and run its suite once.")
@click.argument("issue", metavar="[ISSUE]", required=False)
@click.option("--repo", "repo", type=click.Path(), help="The repository (default: the current folder's repository).")
@click.option("--base", metavar="REV", help="The commit (default: the record's base_commit, else HEAD).")
@click.option("--repos-dir", type=click.Path(), help="With a record: a folder of owner__name repository checkouts.")
@click.option("--collect-only", is_flag=True, help="Collect the suite, do not run it.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on standard output instead of the report.")
@test_settings_options
@click.pass_context
def tests_command(ctx, issue: str | None, repo, base, repos_dir, collect_only: bool, as_json: bool, **_settings) -> None:
    """Check the tests a run would use on a repository: build its test environment (SWE-bench's spec,
    your env-setup, or what the project declares), collect its suite in the sandbox and run it once
    at the base. ISSUE (optional) is a record, as submit takes it, for its repository and commit."""
    from magis_ray.actors.runtime.bench import BenchSetup, ExecutionBench

    from .config import effective_settings, given_flags
    from .issue_input import prepare_issue, prepare_repository

    flags = given_flags(ctx)
    found = (prepare_issue(issue, repo, repos_dir, base) if issue else prepare_repository(repo, base)).issue
    settings = effective_settings(flags, Path(found.repo_path)).settings
    setup = BenchSetup.of(found, settings, found.repo_path)
    record = setup.record
    prepared = ExecutionBench(setup).prepare(collect_only=collect_only)
    suite = prepared.suite
    ran = prepared.outcome == "passed" and (collect_only or suite is None or suite.ran)
    if as_json:
        click.echo(json.dumps(as_object(record, prepared, ran), indent=2))
    else:
        click.echo(report(record, prepared))
    sys.exit(0 if ran else 1)


def as_object(record: dict, prepared, ran: bool) -> dict:
    """The --json object: at least collected, passed, failed, errors, skipped, deselected, python,
    sources and seconds."""
    suite = prepared.suite
    found = {name: getattr(suite, name) if suite is not None else 0 for name in JSON_COUNTS}
    return {"repo": record["repo"], "commit": record["base_commit"], "ran": ran, "outcome": prepared.outcome,
            "line": prepared.output, "command": prepared.command, **found,
            "python": suite.python if suite is not None else "", "date": suite.date if suite is not None else "",
            "sources": [{"name": s.name, "installed": s.installed} for s in suite.sources] if suite is not None else [],
            "added": list(suite.added) if suite is not None else [],
            "problems": list(suite.problems) if suite is not None else [],
            "collection_errors": list(suite.collection_errors) if suite is not None else [],
            "known_failures": list(suite.known_failures) if suite is not None else [],
            "left_out": list(suite.left_out) if suite is not None else [],
            "timed_out": suite.timed_out if suite is not None else False, "seconds": prepared.duration_s}


def report(record: dict, prepared) -> str:
    """The report a person reads: the line a run would say, where the environment came from, and
    what the suite did at the base."""
    said = " ".join(prepared.output.split())
    line = f"tests {said}" if prepared.outcome == "passed" else f"tests off: {said.removeprefix('off: ')}"
    lines = [f"{record['repo']} at {record['base_commit'][:12]}", line]
    suite = prepared.suite
    if suite is None:
        return "\n".join(lines)
    lines.append(f"environment: Python {suite.python}, packages as of {suite.date or 'today'}")
    for source in suite.sources:
        taken = ", ".join(source.installed) if source.installed else "read, not taken"
        lines.append(f"  {source.name}: {taken}")
    for problem in suite.problems:
        lines.append(f"  not read: {problem}")
    if suite.added:
        lines.append(f"  added for modules the collection found missing: {', '.join(suite.added)}")
    for error in suite.collection_errors[:10]:
        lines.append(f"  not collectable: {error}")
    if suite.ran:
        lines.append(f"at the base: {suite.passed:,} passed, {suite.failed:,} failed, {count(suite.errors, 'error')}, "
                     f"{suite.skipped:,} skipped"
                     + (" (ran out of time: the counts are of what finished)" if suite.timed_out else ""))
        if suite.known_failures:
            shown = ", ".join(suite.known_failures[:5]) + (" ..." if len(suite.known_failures) > 5 else "")
            lines.append(f"  known failures, never held against a patch: {shown}")
        if suite.left_out:
            lines.append(f"  left out: {'; '.join(suite.left_out)}")
    lines.append(f"seconds: environment {suite.build_seconds:.1f}, collection {suite.collect_seconds:.1f}, "
                 f"run {suite.run_seconds:.1f}")
    return "\n".join(lines)
