"""The `magis-ray` command. Heavy modules (ray, openai) are imported inside the commands that use them."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .submit import (
    gateway_config, load_issue, locate_repo, model_endpoint, model_options, report, run_settings, settings_options, write_outputs,
)

DEFAULT_STORE = ".magis"
store_option = click.option(
    "--store", "store_path", default=DEFAULT_STORE, envvar="MAGIS_STORE", show_default=True,
    help="The magis store: a folder (or its events.sqlite3 file).",
)


class UserError(click.ClickException):
    """A one-line error with exit code 2 and no traceback."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"magis-ray: error: {self.format_message()}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="magis-ray")
def cli() -> None:
    """magis-ray: a team of LLM agents (MAGIS) resolving GitHub issues, as an event-sourced Ray actor system."""


@cli.command("runs")
@store_option
def runs_command(store_path: str) -> None:
    """List the runs in the store."""
    from magis_ray.events.projections import fold
    from magis_ray.store import open_store

    store = open_store(store_path)
    try:
        rows = []
        for info in store.list_runs():
            view = fold(store.read(info.run_id))
            instance = view.started.instance_id if view.started else "-"
            outcome = view.finished.outcome if view.finished else (view.failed.reason if view.failed else "")
            rows.append((info.run_id, instance, view.status, str(info.version), outcome))
    finally:
        store.close()
    if not rows:
        click.echo("no runs")
        return
    header = ("RUN", "INSTANCE", "STATUS", "EVENTS", "OUTCOME")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4][:80])


@cli.command("events")
@click.argument("run")
@store_option
def events_command(run: str, store_path: str) -> None:
    """Print a run's events as JSON lines (the input `audit` and `diff` also accept)."""
    from magis_ray.events.codec import encode

    from .source import load_run

    out = sys.stdout.buffer
    for rec in load_run(store_path, run):
        out.write(encode(rec) + b"\n")
    out.flush()


@cli.command("diff")
@click.argument("run")
@store_option
def diff_command(run: str, store_path: str) -> None:
    """Print the run's repository diff (applies to the base commit)."""
    from magis_ray.events.projections import final_diff, fold

    from .source import load_run

    click.echo(final_diff(fold(load_run(store_path, run))), nl=False)


@cli.command("audit")
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@store_option
def audit_command(run: str, fmt: str, store_path: str) -> None:
    """Print the run's audit trail: every decision, who made it, why and at what cost."""
    from magis_ray.events.projections import audit_json, audit_markdown, fold

    from .source import load_run

    view = fold(load_run(store_path, run))
    if fmt == "json":
        click.echo(json.dumps(audit_json(view), indent=2))
    else:
        click.echo(audit_markdown(view), nl=False)


@cli.command("submit")
@click.argument("issue_file", type=click.Path(path_type=Path))
@click.option("--repo", "repo", type=click.Path(), help="The issue's repository checkout (a git repository).")
@click.option("--repos-dir", type=click.Path(), help="A folder of owner__name repository checkouts.")
@store_option
@model_options
@settings_options
def submit_command(issue_file: Path, repo, repos_dir, store_path, llm, base_url, model, timeout, concurrency,
                   response_format, **settings) -> None:
    """Resolve the issue in ISSUE_FILE (a SWE-bench instance record) with the MAGIS team."""
    from magis_ray.actors.deployment import new_run_id, run_issue
    from magis_ray.actors.gateway import DEFAULT_MODEL
    from magis_ray.events.schema import RunFailed

    issue = load_issue(issue_file)
    repo_path = locate_repo(issue, repo, repos_dir)
    if not model and llm.startswith("scripted:"):
        model = "scripted"
    run_config = run_settings(model or DEFAULT_MODEL, **settings)
    with model_endpoint(llm, base_url) as endpoint:
        _ensure_store(store_path)
        run_id = new_run_id()
        click.echo(f"run {run_id}: {issue.instance_id} ({issue.repo} @ {issue.base_commit[:10]})", err=True)
        end = run_issue(
            store_path=store_path, issue=issue, settings=run_config, repo_path=repo_path,
            gateway_config=gateway_config(endpoint, model, timeout, concurrency, response_format), run_id=run_id,
        )
    report(run_id, end, *write_outputs(store_path, run_id))
    if isinstance(end, RunFailed):
        raise UserError(f"run {run_id} failed: {end.reason}" + (f"; resume it with `magis-ray resume {run_id}`" if end.resumable else ""))


def _ensure_store(store_path: str) -> None:
    from magis_ray.store import open_store

    open_store(store_path, create=True).close()


def main(argv: list[str] | None = None) -> None:
    from .logs import configure_logging

    configure_logging()
    try:
        cli.main(args=argv, prog_name="magis-ray", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("magis-ray: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"magis-ray: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except Exception as exc:  # noqa: BLE001 - every known user-facing failure becomes one line
        user_error = _as_user_error(exc)
        if user_error is None:
            raise
        user_error.show()
        sys.exit(2)


def _as_user_error(exc: Exception) -> UserError | None:
    from magis_ray.store import StoreError

    from .source import BadInput

    if isinstance(exc, (StoreError, BadInput)):
        return UserError(str(exc))
    if isinstance(exc, OSError) and not isinstance(exc, (BrokenPipeError,)):
        return UserError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
    return None


if __name__ == "__main__":
    main()
