"""The `magis-ray` command. Heavy modules (ray, openai) are imported inside the commands that use them."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from .batch import submit_batch
from .divergence import describe_side, first_difference
from .errors import UserError
from .options import DEFAULT_STORE, model_options, settings_options, store_option
from .submit import (
    configured_run, gateway_config, model_endpoint, report, resume_model, write_outputs,
)



class Commands(click.Group):
    def invoke(self, ctx: click.Context):
        """Every command, with a closed pipe as no error: the reader of our output went away
        (`magis-ray events RUN | head -1`), which is how pipes end. Stdout then points at /dev/null
        so the interpreter's last flush does not raise again, and the exit code is 0."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            import os

            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            raise click.exceptions.Exit(0) from None


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
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
            if info.run_id.startswith("grading:"):  # a grading's stream, not a run (`magis-ray grade` reports it)
                continue
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
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + shorten(row[4], 80))


def shorten(text: str, width: int) -> str:
    """`text` on one line, cut at a word with an ellipsis when longer than `width`."""
    line = " ".join(text.split())
    if len(line) <= width:
        return line
    cut = line[: width - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(" ,;:.") + "…"


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

    view = fold(load_run(store_path, run))
    diff = final_diff(view)
    if not diff:
        why = view.finished.outcome if view.finished else view.status
        click.echo(f"magis-ray: run {view.run_id} has no patch ({why})", err=True)
    click.echo(diff, nl=False)


@cli.command("audit")
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["md", "json", "html", "pr"]), default="md", show_default=True,
              help="Markdown, JSON, one self-contained HTML page, or a pull request's description (Markdown).")
@store_option
def audit_command(run: str, fmt: str, store_path: str) -> None:
    """Print the run's audit trail: every decision, who made it, why and at what cost. `--format
    pr`: a pull request's description (the issue, the plan, the changes, the tests, the cost)."""
    from magis_ray.events.projections import audit_json, audit_markdown, fold, pr_description

    from .source import load_run

    view = fold(load_run(store_path, run))
    if fmt == "pr":
        written = Path(store_path) / "runs" / view.run_id / "audit.html"
        click.echo(pr_description(view, str(written) if written.is_file() else ""), nl=False)
    elif fmt == "json":
        click.echo(json.dumps(audit_json(view), indent=2))
    elif fmt == "html":
        from .inspector.pages import audit_page

        click.echo(audit_page(audit_json(view)), nl=False)
    else:
        click.echo(audit_markdown(view), nl=False)


@cli.command("submit")
@click.argument("issue", metavar="ISSUE")
@click.option("--repo", "repo", type=click.Path(), help="The issue's repository (default: the current folder's repository).")
@click.option("--base", metavar="REV", help="The commit the run starts from (default: the record's base_commit, else HEAD).")
@click.option("--repos-dir", type=click.Path(), help="A folder of owner__name repository checkouts.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("preds.jsonl"), show_default=True,
              help="Batch: the SWE-bench predictions file to write.")
@click.option("--workers", type=int, default=2, show_default=True, help="Batch: runs at once.")
@click.option("--instances", multiple=True, help="Batch: only these instance ids (repeatable).")
@click.option("--batch-budget", type=int, default=0, help="Batch: most tokens all its runs may spend together (0: no limit).")
@click.option("--batch", "batch_name", default="", help="Batch: its name, which resume goes by (default: the --out file's name).")
@click.option("--role-model", multiple=True, metavar="ROLE=MODEL",
              help="A role's own model (repeatable; custodian, manager, developer, qa).")
@click.option("--role-base-url", multiple=True, metavar="ROLE=URL", help="Where a role's model is served (default: --base-url).")
@store_option
@model_options
@settings_options
@click.pass_context
def submit_command(ctx, issue: str, repo, base, repos_dir, out, workers, instances, batch_name, store_path, local_port,
                   no_qa, no_hints, no_memory, memory_any_model, **_options) -> None:
    """Resolve ISSUE with the MAGIS team: a Markdown or text file (`-`: standard input), the JSON of
    `gh issue view N --json number,title,body,url`, or a SWE-bench record; or, for a .jsonl
    dataset, every instance in it as a batch (resumable: run the same command again). Settings
    come from flags, the environment, magis.toml (or pyproject.toml's [tool.magis-ray]) and
    ~/.config/magis-ray/config.toml, in that order (`magis-ray config` shows them)."""
    from .config import effective_settings, project_root
    from .issue_input import prepare_issue

    batch = issue.endswith(".jsonl")
    prepared = None if batch else prepare_issue(issue, repo, repos_dir, base)
    resolved = effective_settings(ctx, Path(prepared.issue.repo_path) if prepared else project_root(repo))
    llm, base_url, limits, run_config = configured_run(resolved, no_qa, no_hints, no_memory, memory_any_model)
    if batch:
        return submit_batch(Path(issue), repos_dir, out, workers, instances, resolved["batch-budget"].value,
                            batch_name or out.stem, store_path, llm, base_url, local_port, limits, run_config)
    from magis_ray.actors.runtime.deployment import new_run_id, run_issue
    from magis_ray.actors.runtime.liveness import Liveness

    issue_record = prepared.issue
    if prepared.notice:
        click.echo(f"magis-ray: notice: {prepared.notice}", err=True)
    with model_endpoint(llm, base_url, store_path, local_port) as endpoint:
        _ensure_store(store_path)
        run_id = new_run_id()
        with Liveness(store_path) as liveness:
            liveness.take(run_id)  # before the id is shown: resume can tell a run that never started
            click.echo(f"run {run_id}: {issue_record.instance_id} ({issue_record.repo} @ {issue_record.base_commit[:10]})", err=True)
            end = run_issue(
                store_path=store_path, issue=issue_record, settings=run_config, repo_path=issue_record.repo_path,
                gateway_config=gateway_config(endpoint, run_config.model, limits, run_config.roles),
                run_id=run_id, liveness=liveness,
            )
    conclude(store_path, run_id, end)


@cli.command("resume")
@click.argument("run")
@click.option("--repo", "repo", type=click.Path(), help="Where the repository is now, if it moved.")
@store_option
@model_options
@click.pass_context
def resume_command(ctx, run, repo, store_path, llm, base_url, local_port, model, timeout, concurrency, response_format,
                   rpm, tpm) -> None:
    """Go on with a run cut off by a crash, kill -9, Ctrl-C or a lost model: recorded answers
    are reused, never paid for again, and nothing is written twice. The run's own model and
    model options are used, except those given here."""
    from click.core import ParameterSource

    from magis_ray.actors.runtime.continuation import CannotResume, resume_point
    from magis_ray.actors.runtime.deployment import resume_issue
    from magis_ray.actors.runtime.liveness import Liveness, RunIsLive
    from magis_ray.store import open_store

    from .errors import BadInput
    from .source import resolve_run_id

    with open_store(store_path) as store:
        run_id = resolve_run_id(store, run)
    with Liveness(store_path) as liveness:
        try:
            liveness.take(run_id)  # before reading where to go on from: no other driver appends meanwhile
        except RunIsLive as exc:
            raise BadInput(str(exc)) from None
        with open_store(store_path) as store:
            try:
                point = resume_point(store.read(run_id))
            except CannotResume as exc:
                raise BadInput(str(exc)) from None
        repo_path = repo_of(point.started, repo)
        llm, base_url, model, limits = resume_model(
            lambda name: ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE, point.started.settings,
            llm, base_url, model,
            dict(timeout=timeout, concurrency=concurrency, response_format=response_format, rpm=rpm, tpm=tpm),
        )
        with model_endpoint(llm, base_url, store_path, local_port) as endpoint:
            click.echo(f"resuming run {run_id} from event {point.kept_version} ({point.superseded} superseded)", err=True)
            end = resume_issue(
                store_path=store_path, run_id=run_id, point=point, repo_path=repo_path,
                gateway_config=gateway_config(endpoint, model, limits, point.started.settings.roles), liveness=liveness,
            )
    conclude(store_path, run_id, end)


@cli.command("replay")
@click.argument("run")
@click.option("--repo", "repo", type=click.Path(), help="Where the repository is now, if it moved.")
@store_option
def replay_command(run, repo, store_path) -> None:
    """Rebuild every projection from the log, and re-execute the team with the recorded answers
    (no model call): exit 1 and show both sides of the first event that differs. RUN may be a
    .jsonl file of `magis-ray events`."""
    from magis_ray.actors.runtime.replay import CannotReplay, replay_run
    from magis_ray.events.projections import audit_json, final_diff, fold, metrics
    from magis_ray.store import open_store
    from magis_ray.store.memory import InMemoryStore

    from .errors import BadInput
    from .source import load_run

    events = load_run(store_path, run)
    view = fold(events)
    total = metrics(view)["total"]
    click.echo(
        f"projections rebuilt from {len(events)} events: {len(final_diff(view).splitlines())} diff lines, "
        f"{len(audit_json(view)['timeline'])} audit entries, {total['calls']} model calls, "
        f"{total['prompt_tokens'] + total['completion_tokens']} tokens"
    )
    # the summary memory as the run saw it: the store's, or none for a log read from a file
    memory = InMemoryStore() if run.endswith(".jsonl") else open_store(store_path)
    try:
        report_ = replay_run(events, memory, repo_of(view.started, repo) if view.started else repo)
    except CannotReplay as exc:
        raise BadInput(str(exc)) from None
    finally:
        memory.close()
    if report_.divergence is None:
        click.echo(f"replayed {report_.events} events: no divergence")
        return
    d = report_.divergence
    click.echo(f"divergence in lane {d.lane} after {report_.events} matching events:")
    click.echo(f"  log:    {describe_side(d.expected.event if d.expected else None)}")
    click.echo(f"  replay: {describe_side(d.got)}")
    where = first_difference(d.expected.event if d.expected else None, d.got)
    if where:
        click.echo(f"  first difference: {where}")
    sys.exit(1)


@cli.command("stop")
@click.option("--force", is_flag=True, help="Stop them even while runs of the store are live.")
@store_option
def stop_command(force: bool, store_path: str) -> None:
    """End the shared actors on the Ray cluster RAY_ADDRESS names: the store's, and the model
    gateways its drivers used (not one another store's drivers use too). They outlive the
    drivers that made them, so that drivers share them."""
    import os
    import time

    from magis_ray.actors.runtime.liveness import describe_holder, holder_state
    from magis_ray.store import NotAStore, open_store

    from .errors import BadInput

    try:
        with open_store(store_path) as store:
            live = [lease for lease in store.leases()
                    if ":" not in lease.key and lease.live(time.time()) and holder_state(lease) != "dead"]
    except NotAStore:
        live = []
    if live and not force:
        first = live[0]
        raise BadInput(f"{len(live)} run(s) of this store have a live driver ({describe_holder(first, f'run {first.key}')}); "
                       "let them end, or give --force")
    if not os.environ.get("RAY_ADDRESS"):
        click.echo("nothing to stop: RAY_ADDRESS names no cluster, and a Ray of magis-ray's own ends with its command")
        return
    from magis_ray.actors.runtime.deployment import ensure_ray
    from magis_ray.actors.runtime.remote import stop_shared

    ensure_ray()
    ended, shared = stop_shared(os.path.abspath(store_path))
    click.echo(f"stopped {len(ended)} shared actor(s)" + (": " + ", ".join(ended) if ended else "")
               + (f"; left {', '.join(shared)}: other stores' drivers use it too" if shared else ""))


def repo_of(started, repo: str | None) -> str:
    """Where the run's repository is: the --repo given, else where the run found it."""
    from magis_ray.actors.code.repository import RepoError, RepoSnapshot

    from .errors import BadInput

    path = repo or (started.repo_path if started else "")
    if not path:
        raise BadInput("the log does not say where the repository is; give --repo")
    try:
        RepoSnapshot.open(path, started.base_commit)
    except RepoError as exc:
        raise BadInput(str(exc)) from None
    return path


def conclude(store_path: str, run_id: str, end) -> None:
    """Write the diff and the audit, print the summary; a failed run exits non-zero."""
    from magis_ray.actors.runtime.deployment import INTERRUPTED
    from magis_ray.events.schema import RunFailed

    report(run_id, end, *write_outputs(store_path, run_id))
    if isinstance(end, RunFailed):
        store = "" if store_path == DEFAULT_STORE else f" --store {shlex.quote(store_path)}"
        hint = f"; resume it with `magis-ray resume {run_id}{store}`" if end.resumable else ""
        if end.reason == INTERRUPTED:
            click.echo(f"magis-ray: interrupted{hint}", err=True)
            sys.exit(130)
        raise UserError(f"run {run_id} failed: {end.reason}{hint}")


def _ensure_store(store_path: str) -> None:
    from magis_ray.store import open_store

    open_store(store_path, create=True).close()
    folder = Path(store_path)
    if folder.is_dir() and not (folder / ".gitignore").exists():
        # the store often sits in the user's repository (`cd repo && magis-ray submit issue.md`): keep it out of git
        (folder / ".gitignore").write_text("# made by magis-ray: the store is no part of the repository\n*\n")


from .evaluate import eval_command  # noqa: E402 - a click command; its heavy imports are inside it

cli.add_command(eval_command)
from .grade import grade_command  # noqa: E402 - a click command; its heavy imports are inside it

cli.add_command(grade_command)
from .inspector.commands import serve_command, watch_command  # noqa: E402 - click commands; their heavy imports are inside

cli.add_command(serve_command)
cli.add_command(watch_command)
from .apply import apply_command  # noqa: E402 - a click command; its heavy imports are inside it

cli.add_command(apply_command)
from .config import config_command  # noqa: E402 - a click command; its heavy imports are inside it

cli.add_command(config_command)


def main(argv: list[str] | None = None) -> None:
    from magis_ray.actors.runtime.logs import configure_logging

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

    from .errors import BadInput, extra_of, missing_extra

    if isinstance(exc, (StoreError, BadInput)):
        return UserError(str(exc))
    if isinstance(exc, ModuleNotFoundError) and (extra := extra_of(exc)):
        return UserError(missing_extra(extra, "this command", [exc.name]))
    if isinstance(exc, OSError):
        return UserError(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
    if "ray" in sys.modules and isinstance(exc, sys.modules["ray"].exceptions.RayError):
        return UserError(_ray_error_line(exc))
    return None


def _ray_error_line(exc: Exception) -> str:
    """A Ray error as one line: its root cause's first line (Ray wraps it in tracebacks)."""
    from magis_ray.actors.runtime.team import root_cause

    cause = root_cause(exc)
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    # Ray's own errors put "Traceback"/frames after a first line that names the failure
    first = next((line for line in lines if not line.startswith(("Traceback", "File ", "^"))), type(cause).__name__)
    return f"Ray: {type(cause).__name__}: {first}"[:300]


if __name__ == "__main__":
    main()
