"""`magis-ray resume RUN`: go on with a cut-off run, talking to the model the run recorded. The
record is one more layer of the settings (cli/settings.py), under the flags and above the
environment and the files."""
from __future__ import annotations

import click

from .endpoint import check_endpoint, gateway_config, model_endpoint, resolve_llm
from .options import model_options, store_option
from .settings import Layer

RECORDED_LIMITS = (("timeout", "timeout_s"), ("concurrency", "concurrency"), ("response-format", "response_format"),
                   ("rpm", "requests_per_minute"), ("tpm", "tokens_per_minute"))


def recorded_layer(run_settings, flags: Layer) -> Layer:
    """What the run recorded of its model: its endpoint and name, unless the flags name another
    endpoint (then its name only if that endpoint is the recorded one), and its limits. A run
    recorded before model settings were kept gives its model's name only."""
    recorded = run_settings.llm
    values: dict = {}
    if not recorded.kind:
        values["model"] = run_settings.model
    elif "llm" in flags.values or "base-url" in flags.values:
        llm = resolve_llm(flags.values.get("llm", "auto"), flags.values.get("base-url"))
        same_openai = llm == recorded.kind == "openai" and "base-url" not in flags.values
        if same_openai and recorded.base_url:
            values["base-url"] = recorded.base_url
        if llm == recorded.kind and (same_openai or flags.values.get("base-url", "") == recorded.base_url):
            values["model"] = run_settings.model
    else:
        values.update({"llm": recorded.kind, "model": run_settings.model})
        if recorded.base_url:
            values["base-url"] = recorded.base_url
    values.update({key: getattr(recorded, field) for key, field in RECORDED_LIMITS if getattr(recorded, field)})
    return Layer("record", values={key: value for key, value in values.items() if value != ""})


@click.command("resume")
@click.argument("run")
@click.option("--repo", "repo", type=click.Path(), help="Where the repository is now, if it moved.")
@store_option
@model_options
@click.pass_context
def resume_command(ctx, run, repo, store_path, local_port, **_settings) -> None:
    """Go on with a run cut off by a crash, kill -9, Ctrl-C or a lost model: recorded answers
    are reused, never paid for again, and nothing is written twice. The run's own model and
    model options are used, except those given here."""
    from pathlib import Path

    from magis_ray.actors.runtime.continuation import CannotResume, resume_point
    from magis_ray.actors.runtime.deployment import resume_issue
    from magis_ray.actors.runtime.liveness import Liveness, RunIsLive
    from magis_ray.store import open_store

    from .config import effective_settings, given_flags
    from .endpoint import default_model
    from .errors import BadInput
    from .source import repo_of, resolve_run_id
    from .progress import Progress
    from .signals import stopped_by_signals
    from .submit import conclude, start_ray

    flags = given_flags(ctx)
    with open_store(store_path) as store:
        run_id = resolve_run_id(store, run)
    with Liveness(store_path) as liveness:
        try:
            fence = liveness.take(run_id)  # before reading where to go on from: no other driver appends meanwhile
        except RunIsLive as exc:
            raise BadInput(str(exc)) from None
        with open_store(store_path) as store:
            try:
                point = resume_point(store.read(run_id))
            except CannotResume as exc:
                raise BadInput(str(exc)) from None
        repo_path = repo_of(point.started, repo)
        recorded = point.started.settings
        settings = effective_settings(flags, Path(repo_path), recorded_layer(recorded, flags)).settings
        llm = resolve_llm(settings.llm, settings.base_url)
        with model_endpoint(llm, settings.base_url or None, store_path, local_port) as endpoint:
            check_endpoint(endpoint, default_model(llm, settings.model), recorded.roles)
            click.echo(f"resuming run {run_id} from event {point.kept_version} ({point.superseded} superseded)", err=True)
            start_ray(store_path, run_id)
            with Progress(store_path, run_id), stopped_by_signals():
                end = resume_issue(
                    store_path=store_path, run_id=run_id, point=point, repo_path=repo_path, liveness=liveness, fence=fence,
                    gateway_config=gateway_config(endpoint, settings, default_model(llm, settings.model), recorded.roles),
                )
    conclude(store_path, run_id, end)
