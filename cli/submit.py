"""`magis-ray submit ISSUE.json`: validate the input, run the team on Ray, write the diff and audit."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import click

from .errors import BadInput, require_extra


def write_outputs(store_path: str, run_id: str) -> tuple[Path, Path, dict]:
    from magis_ray.events.projections import audit_json, audit_markdown, final_diff, fold, metrics

    from .inspector.pages import audit_page
    from magis_ray.store import open_store

    store = open_store(store_path)
    try:
        view = fold(store.read(run_id))
    finally:
        store.close()
    out = Path(store_path) / "runs" / run_id
    out.mkdir(parents=True, exist_ok=True)
    diff_path, audit_path = out / "diff.patch", out / "audit.md"
    diff_path.write_text(final_diff(view))
    audit_path.write_text(audit_markdown(view))
    (out / "audit.html").write_text(audit_page(audit_json(view)))
    if view.environment is not None and view.environment.outcome != "passed":
        # --tests is on by default: say once, on stderr, that this run went without them
        click.echo(f"magis-ray: notice: tests off for this run: {' '.join(view.environment.output.split())[:300]}", err=True)
    return diff_path, audit_path, metrics(view)["total"]


def report(run_id: str, end, diff_path: Path, audit_path: Path, total: dict) -> None:
    from magis_ray.events.schema import RunFinished

    outcome = end.outcome if isinstance(end, RunFinished) else f"failed: {end.reason}"
    click.echo(f"run:      {run_id}")
    click.echo(f"outcome:  {outcome}")
    click.echo(
        f"model:    {total['calls']} calls, {total['prompt_tokens']} prompt + {total['completion_tokens']} "
        f"completion tokens, ${total['cost_usd']:.4f}"
    )
    click.echo(f"diff:     {diff_path}")
    click.echo(f"audit:    {audit_path}")
    click.echo(f"page:     {audit_path.with_suffix('.html')}")


# Our answers are small JSON objects; a 135M model that rambles is cut off here rather than
# spending a minute and half the context on one answer.
LOCAL_MAX_TOKENS = 512


class Endpoint(NamedTuple):
    """Where the model is, and what the endpoint itself decides about talking to it."""

    base_url: str | None
    model: str = ""  # the served model's name ("": --model, or the default)
    context_tokens: int = 0  # its context window; the gateway fits prompts to it (0: unknown)
    response_format: str = ""  # "": the --response-format option
    concurrency: int = 0  # 0: the --concurrency option
    max_tokens: int = 0  # 0: the gateway's default


def resolve_llm(llm: str, base_url: str | None) -> str:
    """`auto` is openai when an endpoint or a key is configured, else the bundled local model."""
    if llm != "auto":
        return llm
    return "openai" if base_url or os.environ.get("OPENAI_API_KEY") else "local"


def gateway_config(endpoint: Endpoint, model: str, limits: dict, roles: tuple = ()):
    """`limits`: the model options' timeout, concurrency, response_format, rpm and tpm; `roles`: the
    run's RunSettings.roles (a model per role), which the gateway routes by."""
    from magis_ray.actors.model.gateway import GatewayConfig

    extra = {"max_tokens": endpoint.max_tokens} if endpoint.max_tokens else {}
    return GatewayConfig(
        base_url=endpoint.base_url or None, model=model or endpoint.model, timeout_s=limits["timeout"],
        concurrency=endpoint.concurrency or limits["concurrency"],
        response_format=endpoint.response_format or limits["response_format"], context_tokens=endpoint.context_tokens,
        requests_per_minute=limits["rpm"], tokens_per_minute=limits["tpm"], routes=tuple(roles), **extra,
    )


def model_settings(llm: str, base_url: str | None, limits: dict):
    """What the run records of its model endpoint (never the key), for resume to talk to it again."""
    from magis_ray.events.schema import ModelSettings

    kind = "scripted:" + os.path.abspath(llm.removeprefix("scripted:")) if llm.startswith("scripted:") else llm
    return ModelSettings(
        kind=kind, base_url=(base_url or "") if llm == "openai" else "", response_format=limits["response_format"],
        timeout_s=limits["timeout"], concurrency=limits["concurrency"], requests_per_minute=limits["rpm"],
        tokens_per_minute=limits["tpm"],
    )


def resume_model(given, settings, llm: str, base_url: str | None, model: str, limits: dict):
    """(llm, base_url, model name, limits) of a resume: the run's recorded model endpoint and
    options, except what the command line gives (`given(option)`); environment variables do not
    override the record. A run recorded before model settings were kept resumes as before."""
    recorded = settings.llm
    if not recorded.kind:
        llm = resolve_llm(llm, base_url)
        return llm, base_url, model or settings.model, limits
    if given("llm") or given("base_url"):
        llm = resolve_llm(llm, base_url)
        if llm == recorded.kind == "openai" and not given("base_url"):
            base_url = recorded.base_url or None
        same_endpoint = llm == recorded.kind and (base_url or "") == recorded.base_url
        name = model if given("model") else settings.model if same_endpoint else default_model(llm, "")
    else:
        llm, base_url = recorded.kind, recorded.base_url or None
        name = model if given("model") else settings.model
    limits = dict(limits)
    for option, field in (("timeout", "timeout_s"), ("concurrency", "concurrency"), ("response_format", "response_format"),
                          ("rpm", "requests_per_minute"), ("tpm", "tokens_per_minute")):
        value = getattr(recorded, field)
        if not given(option) and value:
            limits[option] = value
    return llm, base_url, name, limits


def default_model(llm: str, model: str) -> str:
    """The model's name as runs record it: the one given, else the endpoint's own."""
    if model:
        return model
    if llm.startswith("scripted:"):
        return "scripted"
    if llm == "local":
        from magis_ray.actors.model.local_model import MODEL_NAME

        return MODEL_NAME
    from magis_ray.actors.model.gateway import DEFAULT_MODEL

    return os.environ.get("MAGIS_MODEL") or DEFAULT_MODEL


@contextmanager
def model_endpoint(llm: str, base_url: str | None, store_path: str, local_port: int = 0):
    """The model to talk to; `scripted:FILE` and `local` serve one on loopback meanwhile."""
    if llm.startswith("scripted:"):
        from magis_ray.actors.model.scripted_server import Script, ScriptedServer

        path = llm.removeprefix("scripted:")
        try:
            script = Script.load(path)
        except (OSError, ValueError) as exc:
            raise BadInput(f"cannot load the script {path}: {exc}") from None
        with ScriptedServer(script) as server:
            yield Endpoint(server.base_url)
        return
    if llm == "local":
        require_extra("local", "the bundled model (--llm local)")
        from magis_ray.actors.model.local_model import LocalModelError, LocalModelServer

        folder = Path(store_path).parent if store_path.endswith(".sqlite3") else Path(store_path)
        folder.mkdir(parents=True, exist_ok=True)
        server = LocalModelServer(port=local_port, log_path=folder / "local-model.log")
        try:
            server.start()
        except LocalModelError as exc:
            raise BadInput(str(exc)) from None
        try:
            # llama.cpp's server rejects json_schema and answers one request at a time; a 135M
            # model that rambles must not take half the context for its answer
            yield Endpoint(server.base_url, server.model_name, server.context_tokens, "json_object", concurrency=1, max_tokens=LOCAL_MAX_TOKENS)
        finally:
            server.stop()
        return
    if llm != "openai":
        raise BadInput(f"unknown --llm {llm!r}: use local, openai or scripted:FILE")
    if not base_url and not os.environ.get("OPENAI_API_KEY"):
        raise BadInput("no model configured: give --base-url URL or set OPENAI_API_KEY (or --llm local, --llm scripted:FILE)")
    yield Endpoint(base_url)


def configured_run(resolved: dict, no_qa: bool, no_hints: bool, no_memory: bool, memory_any_model: bool):
    """(llm, base_url, limits, RunSettings) of a run from its effective settings (cli.settings): what
    the run records, so that resume and replay need no flag and no settings file again."""
    import msgspec

    from .settings import role_models

    v = {key: r.value for key, r in resolved.items()}
    base_url = v["base-url"] or None
    llm = resolve_llm(v["llm"], base_url)
    limits = dict(timeout=v["timeout"], concurrency=v["concurrency"], response_format=v["response-format"], rpm=v["rpm"],
                  tpm=v["tpm"])
    settings = run_settings(default_model(llm, v["model"]), v["top-k"], v["max-files"], v["max-review-rounds"], no_qa, no_hints,
                            no_memory, v["token-budget"], memory_any_model, v["tests"], v["env-setup"], v["sandbox"],
                            v["candidates"], v["test-cmd"])
    return llm, base_url, limits, msgspec.structs.replace(settings, llm=model_settings(llm, base_url, limits),
                                                          roles=role_models(resolved))


def run_settings(model: str, top_k, max_files, max_review_rounds, no_qa, no_hints, no_memory, token_budget,
                 memory_any_model=False, tests="off", env_setup="", sandbox="bwrap", candidates=1, test_cmd=""):
    from magis_ray.events.schema import RunSettings

    if top_k < 1 or max_files < 1 or max_review_rounds < 1 or token_budget < 0 or candidates < 1:
        raise BadInput("--top-k, --max-files, --max-review-rounds and --candidates must be at least 1, --token-budget not negative")
    return RunSettings(
        top_k=top_k, max_files=max_files, max_review_rounds=max_review_rounds, use_qa=not no_qa,
        use_hints=not no_hints, use_memory=not no_memory, token_budget=token_budget,
        model=model, memory_any_model=memory_any_model, tests=tests == "on", env_setup=env_setup, sandbox=sandbox,
        candidates=candidates, test_cmd=test_cmd, test_python=f"{sys.version_info.major}.{sys.version_info.minor}",
        ranking="symbols",  # issue 15's ranking; logs from before it name none and replay with the previous one
    )
