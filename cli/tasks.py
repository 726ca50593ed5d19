"""`magis-ray tasks`: tasks in SWE-bench's format made from a repository's history. The commands'
shell over actors/swebench/task_making.py (make) and validation_service.py (validate): they read
the flags and the files they name, and print the summary."""
from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click

from magis_ray.events.errors import BadInput, Unavailable

from .grade import grade_options, grade_settings, input_error, parse_pythons, run_with_progress
from .options import store_option


class DateType(click.ParamType):
    """A date or a moment in ISO 8601 ("2024-05-01", "2024-05-01T12:00", "2024-05-01T12:00:00+02:00"),
    in UTC unless it says otherwise. A date alone is its first moment; given to --until, its last
    moment is included."""

    name = "DATE"

    def __init__(self, whole_day_included: bool = False) -> None:
        self.whole_day_included = whole_day_included

    def convert(self, value, param, ctx) -> datetime:
        if isinstance(value, datetime):
            return value
        text = value.strip()
        try:
            moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            self.fail(f"{value!r} is not an ISO 8601 date (2024-05-01, or 2024-05-01T12:00)", param, ctx)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        if self.whole_day_included and len(text) == len("2024-05-01"):
            moment += timedelta(days=1)
        return moment


def read_lines(path: Path, what: str) -> list[str]:
    """The non-empty lines of a file, without '#' comments."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read {what} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return [line.split("#", 1)[0].strip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


@click.group("tasks", short_help="Make SWE-bench tasks from a repository's history, and validate them.")
def tasks_group() -> None:
    """Tasks in SWE-bench's format made from a repository's history, and validated: `make`, then `validate`."""


@tasks_group.command("make", short_help="Make candidate tasks from the commits of a repository's history.")
@click.option("--repo", "repo_path", type=click.Path(file_okay=False),
              help="The repository: a clone or a bare mirror (default: the one holding the current folder).")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The candidates, one SWE-bench record a line (NAME.jsonl); why each other commit gave none goes "
                   "beside it, in NAME.passed-over.jsonl.")
@click.option("--since", type=DateType(), help="Only commits committed at or after DATE (UTC unless it says otherwise).")
@click.option("--until", type=DateType(whole_day_included=True),
              help="Only commits committed before DATE; a date alone includes its whole day.")
@click.option("--commits", "commits_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read these commits (a sha or revision a line; '#' starts a comment) instead of HEAD's "
                   "first-parent history; --since and --until narrow them too.")
@click.option("--issues", "issues_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The repository's issues, as `gh issue list --state all --limit 100000 --json "
                   "number,title,body,url` writes them (add `comments` for the hints): a commit that resolves "
                   "one takes its text as the problem statement.")
@click.option("--repo-name", metavar="OWNER/NAME", help="The repository's OWNER/NAME, for the records and their instance ids "
                                  "(default: what its `origin` remote names).")
def make_command(repo_path: str | None, out: Path, since: datetime | None, until: datetime | None,
                 commits_file: Path | None, issues_file: Path | None, repo_name: str | None) -> None:
    """Make candidate tasks from the commits of HEAD's first-parent history (or those --commits lists)
    that change both test files and other files: the commit's parent is the base commit, its change to
    test files the test patch, the rest the gold patch, and the issue it resolves (or its message) the
    problem statement. FAIL_TO_PASS and PASS_TO_PASS stay empty until the tasks are validated."""
    from magis_ray.actors.swebench.issue_links import read_issues
    from magis_ray.actors.swebench.task_making import (check_issues_belong, commits_to_read, make_tasks, open_history,
                                                       repository_name)
    from magis_ray.actors.swebench.task_records import passed_over_path, write_jsonl

    if not out.parent.is_dir():
        raise BadInput(f"--out {out}: the folder {out.parent} does not exist")
    started = time.monotonic()
    revisions = read_lines(commits_file, "the commits file") if commits_file else None
    history, copy = open_history(repo_path or ".", search=repo_path is None)
    name = repository_name(copy, repo_name)
    issues = read_issues(issues_file.read_bytes(), str(issues_file)) if issues_file else {}
    check_issues_belong(issues, name)
    commits = commits_to_read(history, since, until, revisions)
    made = make_tasks(history, commits, name, issues)

    reasons_path = passed_over_path(out)
    write_jsonl(reasons_path, made.passed_over)
    write_jsonl(out, made.records)
    seconds = time.monotonic() - started
    read = f"listed in {commits_file}" if commits_file else "of HEAD's first-parent history"
    click.echo(f"{name}: {made.commits} commits {read}{_window(since, until)}, read in {seconds:.1f} s")
    sources = _counts(r.problem_statement_source for r in made.records)
    partial = sum(1 for r in made.records if r.left_out)
    click.echo(f"  candidates: {len(made.records)}" + (f" (problem statement from: {sources})" if sources else "")
               + (f"; {partial} with binary, submodule or non-UTF-8 files left out" if partial else ""))
    click.echo(f"  passed over: {len(made.passed_over)}")
    for reason, count in made.reasons():
        click.echo(f"    {count:>6}  {reason}")
    click.echo(f"wrote {out} ({len(made.records)} records); each commit passed over, with its reason: {reasons_path}")


def _window(since: datetime | None, until: datetime | None) -> str:
    parts = ([f"from {since:%Y-%m-%d %H:%M %Z}"] if since else []) + ([f"before {until:%Y-%m-%d %H:%M %Z}"] if until else [])
    return (" " + " ".join(parts)) if parts else ""


def _counts(values) -> str:
    return ", ".join(f"{source} {n}" for source, n in Counter(values).most_common())


@tasks_group.command("validate", short_help="Validate candidate tasks: their tests' lists, or why each is dropped.")
@click.argument("records", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--repo", "repo_path", type=click.Path(), help="The repository every record is of: a clone or a bare mirror.")
@click.option("--repos-dir", type=click.Path(), help="Or a folder of OWNER__NAME repositories, for records of several.")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The tasks: the candidates kept, with their lists (NAME.jsonl); each one dropped goes beside it "
                   "with its reason, in NAME.dropped.jsonl.")
@click.option("--instances", multiple=True, help="Only these instance ids (repeatable).")
@click.option("--name", help="The validation's name in the store (default: the records file's name); the same name resumes it.")
@grade_options
@store_option
@click.pass_context
def validate_command(ctx: click.Context, records: Path, repo_path: str | None, repos_dir: str | None, out: Path,
                     instances: tuple[str, ...], name: str | None, **flags) -> None:
    """Validate candidate tasks (those `tasks make` wrote, or any SWE-bench records) as SWE-bench's
    own validation does: each candidate's tests run in the sandbox with its test patch alone, then
    with its gold patch too, each twice. FAIL_TO_PASS are the tests that fail before and pass after,
    PASS_TO_PASS those that pass both ways, less any test whose two runs differ; a record's own
    lists are replaced. A candidate is kept when a test goes from fail to pass, the gold patch
    resolves it and the test patch alone does not; each other is dropped with its reason. The
    environment is SWE-bench's spec where its tables have one, else what the project declares at
    the base commit. The test runs take the [grade] settings, as `grade` does."""
    from magis_ray.actors.code.swebench_harness import HarnessMissing
    from magis_ray.actors.swebench.grading_service import GradingInputError
    from magis_ray.actors.swebench.validation_service import ValidationOptions, plan_validation, run_validation_plan

    from .errors import missing_extra

    if bool(repo_path) == bool(repos_dir):
        raise BadInput("give the records' repository: --repo PATH, or --repos-dir DIR (exactly one)")
    effective = grade_settings(ctx)
    options = ValidationOptions(
        records=str(records), out=str(out), store=str(flags["store_path"]), repos_dir=repos_dir or "",
        repository=repo_path or "", instances=instances, name=name or "", grade=effective.grade,
        pythons=parse_pythons(flags["pythons"]), env_cache=flags["env_cache"] or None,
        artifact_store=effective.settings.artifact_store, use_ray=not flags["no_ray"])
    try:
        plan = plan_validation(options, notice=lambda line: click.echo(f"magis-ray: notice: {line}", err=True))
    except GradingInputError as exc:
        raise input_error(exc, effective, repos_dir or "") from None
    except HarnessMissing:
        raise Unavailable(missing_extra("grade", "magis-ray tasks validate", ["swebench"])) from None
    earlier: list[str] = []  # validated by an earlier run of the command

    def state(event, skipped: bool) -> str:
        if skipped:
            earlier.append(event.instance_id)
            return "validated before"
        return "kept" if event.kept else event.reason

    print_validation(run_with_progress(plan, run_validation_plan, "validation", "candidate", state), len(earlier))


def print_validation(outcome, earlier: int) -> None:
    """The summary: candidates, kept, dropped by reason, the seconds per candidate, what was written."""
    results = outcome.results
    kept = sum(r.kept for r in results)
    click.echo(f"validation {outcome.name}: {len(results)} candidates"
               + (f" ({earlier} validated before)" if earlier else "") + f", in {outcome.seconds:.1f} s")
    click.echo(f"  kept: {kept}")
    click.echo(f"  dropped: {len(results) - kept}")
    for reason, count in Counter(r.reason for r in results if not r.kept).most_common():
        click.echo(f"    {count:>6}  {reason}")
    if results:
        fresh = len(results) - earlier
        wall = f", {outcome.seconds / fresh:.1f} s of this run's wall time" if fresh else ""
        click.echo(f"  seconds per candidate: {sum(r.seconds for r in results) / len(results):.1f} s on its node "
                   f"(its builds and test runs){wall}")
    click.echo(f"wrote {outcome.out} ({kept} tasks); each candidate dropped, with its reason: {outcome.dropped_path}")
    click.echo(f"logs: {outcome.logs_dir}")
