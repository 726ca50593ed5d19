"""The `magis-ray` command. Heavy modules (ray, openai) are imported inside the commands that use them."""
from __future__ import annotations

import json
import sys

import click

from .divergence import describe_side, first_difference
from magis_ray.events.errors import BadInput, MagisError, Unavailable

from .options import store_option


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


@cli.command("runs", short_help="List the runs in the store (--last: the newest run's id).")
@click.option("--last", is_flag=True, help="Print only the id of the run started last (RUN=$(magis-ray runs --last)).")
@store_option
def runs_command(last: bool, store_path: str) -> None:
    """List the runs in the store."""
    from magis_ray.events.projections import fold
    from magis_ray.events.streams import StreamKind
    from magis_ray.store import open_store

    from magis_ray.actors.runtime.liveness import driver_gone

    from magis_ray.events.errors import BadInput

    store = open_store(store_path)
    try:
        rows = []
        leases = {lease.key: lease for lease in store.leases()}
        runs = [info for info in store.list_runs() if StreamKind.of(info.run_id) is StreamKind.RUN]  # not gradings' streams
        if last:
            if not runs:
                raise BadInput(f"no runs in the store {store_path}")
            click.echo(runs[-1].run_id)  # the store lists runs in the order they began
            return
        for info in runs:
            view = fold(store.read(info.run_id))
            instance = view.started.instance_id if view.started else "-"
            outcome = view.finished.outcome if view.finished else (view.failed.reason if view.failed else "")
            status = view.status
            if status == "running" and driver_gone(leases.get(info.run_id)):
                status, outcome = "cut off", outcome or "its driver is gone; `magis-ray resume` goes on with it"
            rows.append((info.run_id, instance, status, str(info.version), outcome))
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


@cli.command("events", short_help="Print a run's events as JSON lines.")
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


@cli.command("diff", short_help="Print the run's diff, which applies to its base commit.")
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


@cli.command("audit", short_help="Print the run's audit trail: who decided what, why, at what cost.")
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
        click.echo(pr_description(view), nl=False)
    elif fmt == "json":
        click.echo(json.dumps(audit_json(view), indent=2))
    elif fmt == "html":
        from .pages import audit_page

        click.echo(audit_page(audit_json(view)), nl=False)
    else:
        click.echo(audit_markdown(view), nl=False)


@cli.command("replay", short_help="Rebuild a run's projections and re-run its team from its log.")
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

    from magis_ray.events.errors import BadInput
    from .source import load_run, repo_of

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


@cli.command("stop", short_help="End the shared store and gateway actors on a Ray cluster.")
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

    from magis_ray.events.errors import BadInput

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


from .submit import submit_command  # noqa: E402 - click commands; their heavy imports are inside them
from .resume import resume_command  # noqa: E402

cli.add_command(submit_command)
cli.add_command(resume_command)
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
from .suite import tests_command  # noqa: E402 - a click command; its heavy imports are inside it

cli.add_command(tests_command)
from .tasks import tasks_group  # noqa: E402 - a click group; its heavy imports are inside it

cli.add_command(tasks_group)
from .doctor import doctor_command  # noqa: E402 - a click command; its heavy imports are inside it

cli.add_command(doctor_command)
from .repos import repos_command  # noqa: E402 - a click command; its heavy imports are inside it

cli.add_command(repos_command)


def main(argv: list[str] | None = None) -> None:
    from magis_ray.actors.runtime.logs import configure_logging

    from .signals import decide, end_now, handle_signals, interrupted_exit_code

    handle_signals()  # first of all: a signal at any moment of the command stops it with one line
    configure_logging()
    try:
        cli.main(args=argv, prog_name="magis-ray", standalone_mode=False)
        status, line = 0, ""
    except click.exceptions.Abort:
        status, line = interrupted_exit_code(), "magis-ray: interrupted"
    except SystemExit as exc:  # a command's own exit status (replay's 1, an interrupted batch's), its lines printed
        status, line = exc.code if isinstance(exc.code, int) else 0, ""
    except click.ClickException as exc:  # a usage error click found (an unknown flag, a missing argument)
        status, line = 2, f"magis-ray: error: {exc.format_message()}"
    except Exception as exc:  # noqa: BLE001 - every failure of ours becomes one line; anything else is a bug
        failure = as_magis_error(exc)
        if failure is None:
            raise
        status, line = failure.exit_status, f"magis-ray: error: {failure.line}"
    decide(status)
    if line:
        click.echo(line, err=True)
    # only where this command started or joined a Ray: importing Ray to ask would cost every command a second
    deployment = sys.modules.get("magis_ray.actors.runtime.deployment")
    if deployment is not None and deployment.ray_gone():
        end_now(status)  # Ray's own exit would wait a minute for its GCS, then crash
    sys.exit(status)


def as_magis_error(exc: Exception) -> MagisError | None:
    """The one place a failure becomes the user's line: one of ours as it is; a missing module of
    an optional extra, a file the system refused and a Ray that failed as the kind they are; None
    for anything else (a bug, which keeps its traceback)."""
    from .errors import extra_of, missing_extra

    if isinstance(exc, MagisError):
        return exc
    if isinstance(exc, ModuleNotFoundError) and (extra := extra_of(exc)):
        return Unavailable(missing_extra(extra, "this command", [exc.name]))
    if isinstance(exc, OSError):
        return BadInput(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc))
    from magis_ray.actors.runtime.deployment import ray_failure

    return ray_failure(exc)


if __name__ == "__main__":
    main()
