"""`magis-ray submit ISSUE`: validate the input, settle the run's settings, run the team on Ray
(the lease taken once, before the run's id is shown), write the diff and the audit."""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import click

from .endpoint import check_endpoint, default_model, gateway_config, model_endpoint, resolve_llm
from magis_ray.events.errors import BadInput, Failed, Unavailable
from .options import DEFAULT_STORE, RUN, model_options, settings_options, store_option
from .signals import decide, interrupted_exit_code


@click.command("submit", short_help="Resolve an issue, or a dataset's issues, with the MAGIS team.")
@click.argument("issue", metavar="ISSUE")
@click.option("--repo", "repo", type=click.Path(), help="The issue's repository (default: the current folder's repository).")
@click.option("--base", metavar="REV", help="The commit the run starts from (default: the record's base_commit, else HEAD).")
@click.option("--repos-dir", type=click.Path(), help="A folder of owner__name repository checkouts.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("preds.jsonl"), show_default=True,
              help="Batch: the SWE-bench predictions file to write.")
@click.option("--workers", type=int, default=2, show_default=True, help="Batch: runs at once.")
@click.option("--instances", multiple=True, help="Batch: only these instance ids (repeatable).")
@click.option("--batch-budget", type=int, default=RUN.batch_budget, help="Batch: most tokens all its runs may spend together (0: no limit).")
@click.option("--batch", "batch_name", default="", help="Batch: its name, which resume goes by (default: the --out file's name).")
@click.option("--role-model", multiple=True, metavar="ROLE=MODEL",
              help="A role's own model (repeatable; custodian, manager, developer, qa).")
@click.option("--role-base-url", multiple=True, metavar="ROLE=URL", help="Where a role's model is served (default: --base-url).")
@store_option
@model_options
@settings_options
@click.pass_context
def submit_command(ctx, issue: str, repo, base, repos_dir, out, workers, instances, batch_name, store_path, local_port,
                   **_settings) -> None:
    """Resolve ISSUE with the MAGIS team: a Markdown or text file (`-`: standard input), the JSON of
    `gh issue view N --json number,title,body,url`, or a SWE-bench record; or, for a .jsonl
    dataset, every instance in it as a batch (resumable: run the same command again). Settings
    come from flags, the environment, magis.toml (or pyproject.toml's [tool.magis-ray]) and
    ~/.config/magis-ray/config.toml, in that order (`magis-ray config` shows them)."""
    from .batch import submit_batch
    from .config import effective_settings, given_flags, project_root
    from .issue_input import prepare_issue

    flags = given_flags(ctx)  # a bad flag (--llm bogus) is refused before the issue is read or Ray imported
    batch = issue.endswith(".jsonl")
    prepared = None if batch else prepare_issue(issue, repo, repos_dir, base)
    effective = effective_settings(flags, Path(prepared.issue.repo_path) if prepared else project_root(repo))
    run_config = run_settings(effective.settings)
    check_artifact_store(effective)
    if batch:
        return submit_batch(Path(issue), repos_dir, out, workers, instances, batch_name or out.stem, store_path, local_port,
                            run_config)
    issue_record = prepared.issue
    if prepared.notice:
        click.echo(f"magis-ray: notice: {prepared.notice}", err=True)
    with model_endpoint(run_config.endpoint.llm, run_config.endpoint.base_url or None, store_path, local_port) as endpoint:
        check_endpoint(endpoint, run_config.model, run_config.endpoint.models)  # before Ray: a wrong endpoint costs seconds
        from magis_ray.actors.runtime.deployment import new_run_id, run_issue  # imports Ray: after every check
        from magis_ray.actors.runtime.liveness import Liveness

        ensure_store(store_path)
        run_id = new_run_id()
        start_ray(store_path, run_id)  # before the id is shown: a Ray that does not start leaves no run behind
        with Liveness(store_path) as liveness:
            fence = liveness.take(run_id)  # before the id is shown: resume can tell a run that never started
            click.echo(f"run {run_id}: {issue_record.instance_id} ({issue_record.repo} @ {issue_record.base_commit[:10]})", err=True)
            end = drive(store_path, run_id, lambda: run_issue(
                store_path=store_path, issue=issue_record, settings=run_config, repo_path=issue_record.repo_path,
                gateway_config=gateway_config(endpoint, run_config), run_id=run_id, liveness=liveness, fence=fence,
            ), waiting="starting the team")
    conclude(store_path, run_id, end)


def drive(store_path: str, run_id: str, go, waiting: str = ""):
    """`go()` (the run, or its resume) with its progress lines: the run's ending. Stopped by a
    signal, what the store holds of the run (`recorded_end`). The Ray under it gone: one line
    naming that Ray, and how to go on with the run."""
    from magis_ray.actors.runtime.deployment import RayGone

    from .progress import Progress

    try:
        with Progress(store_path, run_id, waiting=waiting):
            end = go()
            decide(exit_status(end))  # from here on a signal no longer changes the outcome
    except KeyboardInterrupt:
        end = recorded_end(store_path, run_id)
        decide(exit_status(end))
    except RayGone as exc:
        raise Unavailable(f"run {run_id}: {exc}{resume_hint(store_path, run_id)}") from None
    return end


def exit_status(end) -> int:
    """What the command exits with after the run's ending `end`: 0 for a finished run, 128 + the
    signal's number for a run a signal stopped (None: before it began), 2 for a failed one."""
    from magis_ray.actors.runtime.deployment import INTERRUPTED
    from magis_ray.events.schema import RunFailed

    if end is None or (isinstance(end, RunFailed) and end.reason == INTERRUPTED):
        return interrupted_exit_code()
    return Failed.exit_status if isinstance(end, RunFailed) else 0


def recorded_end(store_path: str, run_id: str):
    """The ending of a run that a signal stopped, as its log holds it: its RunFinished or RunFailed;
    a RunFailed of its own (not recorded) when the log holds none, which leaves the run cut off and
    resumable; None when the log holds nothing of the run."""
    from magis_ray.actors.runtime.deployment import STOPPED
    from magis_ray.events.projections import fold
    from magis_ray.store import UnknownRun, open_store

    with open_store(store_path) as store:
        try:
            events = store.read(run_id)
        except UnknownRun:
            return None
    if not events:
        return None
    view = fold(events)
    return view.finished or view.failed or STOPPED


def check_artifact_store(effective) -> None:
    """The artifact store the settings name can be used here, or BadInput saying why (one line)."""
    from magis_ray.actors.execution.sharing.artifacts import ArtifactStoreUnusable, open_artifact_store

    try:
        open_artifact_store(effective.settings.artifact_store)
    except ArtifactStoreUnusable as exc:
        raise BadInput(f"{effective.given('artifact-store')}: {exc.reason}") from None


def run_settings(settings):
    """What a run records: its effective settings (cli/settings.py) with what the run settles
    itself: the endpoint `auto` stands for, a script's absolute path, the model's name. Resume and
    replay need no flag and no settings file again."""
    import msgspec

    section = settings.endpoint
    llm = resolve_llm(section.llm, section.base_url)
    kind = "scripted:" + os.path.abspath(llm.removeprefix("scripted:")) if llm.startswith("scripted:") else llm
    endpoint = msgspec.structs.replace(section, llm=kind, base_url=section.base_url if llm == "openai" else "")
    return msgspec.structs.replace(settings, model=default_model(llm, settings.model), endpoint=endpoint)


def write_outputs(store_path: str, run_id: str):
    """Write the run's diff, audit and page from its log; the folded log, for the summary."""
    from magis_ray.events.projections import audit_json, audit_markdown, final_diff, fold

    from .pages import audit_page
    from magis_ray.store import open_store

    store = open_store(store_path)
    try:
        view = fold(store.read(run_id))
    finally:
        store.close()
    out = Path(store_path) / "runs" / run_id
    out.mkdir(parents=True, exist_ok=True)
    (out / "diff.patch").write_text(final_diff(view))
    (out / "audit.md").write_text(audit_markdown(view))
    (out / "audit.html").write_text(audit_page(audit_json(view)))
    return view, out


def report(run_id: str, end, view, out: Path) -> None:
    """The terminal summary, from the log: the outcome, why a run ended without a patch (the step
    and its reason, as `apply` refuses it), the model used and what it cost, and where the files are."""
    from magis_ray.events.projections import metrics
    from magis_ray.events.projections.ending import ending
    from magis_ray.events.schema import RunFinished

    from .endpoint import model_used

    total = metrics(view)["total"]
    click.echo(f"run:      {run_id}")
    click.echo(f"outcome:  {end.outcome if isinstance(end, RunFinished) else 'failed'}")
    reason = ending(view)
    if reason:
        click.echo(f"reason:   {reason}")
    if view.started is not None:
        click.echo(f"model:    {model_used(view.started.settings)}")
    click.echo(
        f"usage:    {total['calls']} calls, {total['prompt_tokens']} prompt + {total['completion_tokens']} "
        f"completion tokens, ${total['cost_usd']:.4f}"
    )
    click.echo(f"diff:     {out / 'diff.patch'}")
    click.echo(f"audit:    {out / 'audit.md'}")
    click.echo(f"page:     {out / 'audit.html'}")


def conclude(store_path: str, run_id: str, end) -> None:
    """Write the diff and the audit, print the summary; a failed run exits non-zero. `end` None:
    the run was stopped before it started, and nothing of it is recorded."""
    from magis_ray.actors.runtime.deployment import INTERRUPTED
    from magis_ray.events.schema import RunFailed

    if end is None:
        click.echo(f"magis-ray: interrupted before run {run_id} started: nothing of it is recorded", err=True)
        sys.exit(interrupted_exit_code())
    interrupted = isinstance(end, RunFailed) and end.reason == INTERRUPTED
    report(run_id, end, *write_outputs(store_path, run_id))
    if interrupted:
        click.echo(f"magis-ray: interrupted{resume_hint(store_path, run_id, end)}", err=True)
        sys.exit(interrupted_exit_code())
    if isinstance(end, RunFailed):
        raise Failed(f"run {run_id} failed: {end.reason}{resume_hint(store_path, run_id, end)}")


def resume_hint(store_path: str, run_id: str, end=None) -> str:
    """"; resume it with `magis-ray resume RUN [--store S]`", or "" for an ending `end` that is not resumable."""
    if end is not None and not end.resumable:
        return ""
    store = "" if store_path == DEFAULT_STORE else f" --store {shlex.quote(store_path)}"
    return f"; resume it with `magis-ray resume {run_id}{store}`"


def ensure_store(store_path: str) -> None:
    from magis_ray.store import open_store

    open_store(store_path, create=True).close()
    folder = Path(store_path)
    if folder.is_dir() and not (folder / ".gitignore").exists():
        # the store often sits in the user's repository (`cd repo && magis-ray submit issue.md`): keep it out of git
        (folder / ".gitignore").write_text("# made by magis-ray: the store is no part of the repository\n*\n")


def start_ray(store_path: str, run_id: str) -> None:
    """Ray's start (or a warm Ray joined), with its progress line while it takes long; one line
    (exit 2) when it cannot start. `run_id`: the run about to start or go on."""
    from magis_ray.actors.runtime.deployment import RayStartFailed, ensure_ray, ray_address
    from magis_ray.events.settings import node_settings

    from magis_ray.events.errors import BadInput
    from .progress import Progress

    node = node_settings()
    address = ray_address(node)
    if address not in ("local", node.ray_address):
        click.echo(f"magis-ray: joining the running Ray at {address}, which another process started and which must "
                   "stay up while this command runs (MAGIS_RAY=own starts a Ray of this command's own)", err=True)
    try:
        # a stream no run writes: Progress shows its waiting line, and its heartbeat while Ray starts
        with Progress(store_path, f"{run_id}:ray-start", waiting="starting Ray"):
            ensure_ray(address)
    except RayStartFailed as exc:
        raise BadInput(str(exc)) from None
