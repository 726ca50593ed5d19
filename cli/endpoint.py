"""The model a run talks to: which endpoint (`--llm`), serving one on loopback meanwhile (scripted
or local), and the gateway's configuration from the run's settings."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from magis_ray.events.settings import LLM_KINDS

from magis_ray.events.errors import BadInput

from .errors import require_extra

# Where the openai client sends requests when no base URL is given (OPENAI_BASE_URL is a setting)
OPENAI_DEFAULT_URL = "https://api.openai.com/v1"
# Our answers are small JSON objects; a 135M model that rambles is cut off here rather than
# spending a minute and half the context on one answer.
LOCAL_MAX_TOKENS = 512


class Endpoint(NamedTuple):
    """Where the model is, and what the endpoint itself decides about talking to it."""

    base_url: str | None
    model: str = ""  # the served model's name ("": the settings' model, or the default)
    context_tokens: int = 0  # its context window; the gateway fits prompts to it (0: unknown)
    response_format: str = ""  # "": the settings' response-format
    concurrency: int = 0  # 0: the settings' concurrency
    max_tokens: int = 0  # 0: the gateway's default
    billed: bool = True  # False: served here (scripted, local), free whatever the model is called


def resolve_llm(llm: str, base_url: str | None) -> str:
    """`auto` is openai when an endpoint or a key is configured, else the bundled local model."""
    if llm != "auto":
        return llm
    return "openai" if base_url or os.environ.get("OPENAI_API_KEY") else "local"


def default_model(llm: str, model: str) -> str:
    """The model's name as runs record it: the one given, else the endpoint's own."""
    if model:
        return model
    if llm.startswith("scripted:"):
        return "scripted"
    if llm == "local":
        from magis_ray.actors.model.local_model import MODEL_NAME

        return MODEL_NAME
    from magis_ray.actors.model.gateway_config import DEFAULT_MODEL

    return DEFAULT_MODEL


def model_used(settings, cwd: str | Path = ".") -> str:
    """The model a run used and the kind of its endpoint, from its RunSettings (the log's), in one
    line: `smollm2-135m-instruct (local, bundled)`, `scripted (examples/calc/script.json)`,
    `gpt-4o (openai, https://api.openai.com/v1)`; a role's own model after it."""
    kind = settings.endpoint.llm
    if kind.startswith("scripted:"):
        script = Path(kind.removeprefix("scripted:"))
        try:
            script = script.relative_to(Path(cwd).resolve())
        except ValueError:
            pass
        where = f"scripted ({script})" if settings.model == "scripted" else f"{settings.model} (scripted, {script})"
    elif kind == "local":
        where = f"{settings.model} (local, bundled)"
    elif kind == "openai":
        where = f"{settings.model} (openai, {settings.endpoint.base_url or OPENAI_DEFAULT_URL})"
    else:  # a log from before the endpoint was recorded
        where = settings.model
    for role in settings.endpoint.models:
        where += f"; {role.role}: {role.model}" + (f" ({role.base_url})" if role.base_url else "")
    return where


def gateway_config(endpoint: Endpoint, settings):
    """The gateway of a run: `settings` (the run's RunSettings, as it records them) gives its model
    section and its model's name; `endpoint` what the endpoint itself decided (its URL, a served
    model's limits)."""
    import msgspec

    from magis_ray.actors.model.gateway_config import GatewayConfig

    section = settings.endpoint
    decided = {name: value for name, value in (("response_format", endpoint.response_format),
                                               ("concurrency", endpoint.concurrency)) if value}
    extra = {"max_tokens": endpoint.max_tokens} if endpoint.max_tokens else {}
    return GatewayConfig(
        endpoint=msgspec.structs.replace(section, **decided), base_url=endpoint.base_url or None,
        model=settings.model or endpoint.model, context_tokens=endpoint.context_tokens, billed=endpoint.billed, **extra,
    )


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
            yield Endpoint(server.base_url, billed=False)
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
            yield Endpoint(server.base_url, server.model_name, server.context_tokens, "json_object", concurrency=1,
                           max_tokens=LOCAL_MAX_TOKENS, billed=False)
        finally:
            server.stop()
        return
    if llm != "openai":
        raise ValueError(f"llm {llm!r}: the settings accept only {', '.join(LLM_KINDS)}, and auto is resolved before")
    if not base_url and not os.environ.get("OPENAI_API_KEY"):
        raise BadInput("no model configured: give --base-url URL or set OPENAI_API_KEY (or --llm local, --llm scripted:FILE)")
    yield Endpoint(base_url)


# The endpoint check asks once and waits this long: a model that cannot list its models within
# seconds is unreachable for our purposes, and the run has not started yet.
CHECK_TIMEOUT_S = 5.0
# What magis-ray's scripted server says owns its model (actors/model/scripted_server.py): it
# answers to any model name, so a run may name any when given it as a --base-url.
SCRIPTED_OWNER = "magis-ray"


def check_endpoint(endpoint: Endpoint, model: str, roles: tuple = ()) -> None:
    """One cheap request (GET /models) before anything starts: BadInput (one line) when the
    endpoint does not answer, refuses the key, or does not serve the model (or a role's model that
    goes to it). An endpoint without a model list (404) passes: the run's first request tells."""
    import json
    import urllib.error
    import urllib.request

    url = (endpoint.base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_DEFAULT_URL).rstrip("/")
    key = os.environ.get("OPENAI_API_KEY", "")
    request = urllib.request.Request(f"{url}/models", headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=CHECK_TIMEOUT_S) as response:
            listing = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise BadInput(f"the model endpoint {url} refuses the key (HTTP {exc.code}): set OPENAI_API_KEY to one it accepts") from None
        return  # no model list here (404) or a passing fault (5xx): the gateway's retries handle the run's requests
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BadInput(f"the model endpoint {url} does not answer: {reason}") from None
    except ValueError:
        return  # an answer that is no JSON model list: nothing to check the names against
    entries = [entry for entry in listing.get("data", []) if isinstance(entry, dict)] if isinstance(listing, dict) else []
    served = {entry.get("id") for entry in entries}
    if not endpoint.billed or not served or any(entry.get("owned_by") == SCRIPTED_OWNER for entry in entries):
        return  # a server of ours (local, scripted) answers to any name; an empty list says nothing
    wanted = [model or endpoint.model] + [role.model for role in roles if not role.base_url]
    unknown = sorted({name for name in wanted if name and name not in served})
    if unknown:
        raise BadInput(f"the model endpoint {url} does not serve {', '.join(unknown)} (it lists {len(served)} model(s), "
                       f"e.g. {', '.join(sorted(served)[:3])})")
