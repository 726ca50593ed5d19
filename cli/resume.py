"""`magis-ray resume RUN`: go on with a cut-off run, talking to the model the run recorded. The
record is one more layer of the settings (cli/settings.py), under the flags and above the
environment and the files."""
from __future__ import annotations

import click

from .endpoint import check_endpoint, gateway_config, model_endpoint, resolve_llm
from .options import model_options, store_option
from .settings import FIELDS, KEYS, Layer, record_layer

# The model's settings a record gives back: the endpoint section's keys, the roles' models, the model's name
MODEL_KEYS = tuple(key for key in KEYS if key == "model" or key.startswith("models.") or FIELDS[key][0] == "endpoint")
ENDPOINT_NAMING = ("llm", "base-url", "model")  # the keys that say which model, where


def recorded_layer(recorded, flags: Layer) -> Layer:
    """What the run recorded of its model, as a layer by the settings' own names: all of it, unless
    the flags name another endpoint (then the recorded model's name and URL only where that endpoint
    is the recorded one). A run recorded before its endpoint was kept (`llm` still auto: a run
    records what auto resolved to) gives its model's name only."""
    values = dict(record_layer(recorded, MODEL_KEYS).values)
    kind, base_url = recorded.endpoint.llm, recorded.endpoint.base_url
    if kind == "auto":
        values = {key: value for key, value in values.items() if key == "model" or key.startswith("models.")}
    elif "llm" in flags.values or "base-url" in flags.values:
        llm = resolve_llm(flags.values.get("llm", "auto"), flags.values.get("base-url"))
        same_openai = llm == kind == "openai" and "base-url" not in flags.values
        same = llm == kind and (same_openai or flags.values.get("base-url", "") == base_url)
        for key in ENDPOINT_NAMING:
            values.pop(key, None)
        if same_openai and base_url:
            values["base-url"] = base_url
        if same:
            values["model"] = recorded.model
    return Layer("record", values={key: value for key, value in values.items() if value != ""})


@click.command("resume", short_help="Go on with a cut-off run, reusing its recorded answers.")
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
    from magis_ray.events.errors import BadInput
    from .source import repo_of, resolve_run_id
    from .submit import conclude, drive, run_settings, start_ray

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
        resumed = run_settings(effective_settings(flags, Path(repo_path), recorded_layer(point.started.settings, flags)).settings)
        with model_endpoint(resumed.endpoint.llm, resumed.endpoint.base_url or None, store_path, local_port) as endpoint:
            check_endpoint(endpoint, resumed.model, resumed.endpoint.models)
            click.echo(f"resuming run {run_id} from event {point.kept_version} ({point.superseded} superseded)", err=True)
            start_ray(store_path, run_id)
            end = drive(store_path, run_id, lambda: resume_issue(
                store_path=store_path, run_id=run_id, point=point, repo_path=repo_path, liveness=liveness, fence=fence,
                gateway_config=gateway_config(endpoint, resumed),
            ))
    conclude(store_path, run_id, end)
