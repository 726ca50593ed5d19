"""What a run's gateway is configured with, apart from the gateway itself: the driver builds it
before any actor starts, and importing the gateway would import the openai client (over a second
of a command's start) into a process that never calls the model."""
from __future__ import annotations

from typing import Literal

import msgspec

from magis_ray.events.settings import EndpointSettings

LOCAL_API_KEY = "not-needed"  # local servers (llama.cpp, vLLM, the scripted server) ignore the key
DEFAULT_MODEL = "gpt-4o-mini"


class GatewayConfig(msgspec.Struct, frozen=True, kw_only=True):
    """The run's model section of the settings (events/settings.py), and what only the gateway
    needs at run time: the model's resolved name and URL, and how it retries and counts."""

    endpoint: EndpointSettings = EndpointSettings()  # timeout, concurrency, response format, rate limits, a model per role
    base_url: str | None = None  # the endpoint's resolved URL; None: the openai client's default (it reads OPENAI_BASE_URL)
    api_key: str | None = None  # None: env OPENAI_API_KEY, else LOCAL_API_KEY; never logged or stored
    model: str = ""  # "": DEFAULT_MODEL
    max_retries: int = 4
    backoff_base_s: float = 0.5  # first retry waits about this long, doubling each time
    backoff_cap_s: float = 30.0  # also caps a server's Retry-After
    temperature: float = 0.0
    max_tokens: int = 4096
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"  # newer OpenAI models want the latter
    min_answer_tokens: int = 256  # a budget may shrink max_tokens, but not below this (or the request's own)
    context_tokens: int = 0  # the model's context length (prompt + answer); 0: unknown, prompts are sent whole
    rate_window_s: float = 60.0  # the "minute" of the rate limits (shorter in tests)
    prices_path: str | None = None  # None: actors/model/prices.json
    # False when `base_url` is served on this machine (the scripted model, the bundled one): its
    # answers cost nothing whatever the model is called; a role routed to its own base_url is
    # still priced by its model's name
    billed: bool = True

    def __repr__(self) -> str:  # the key must not leak through a logged config
        key = "None" if self.api_key is None else "'***'"
        routes = "".join(f", {r.role}={r.model!r}" + (f"@{r.base_url}" if r.base_url else "") for r in self.endpoint.models)
        return f"GatewayConfig(base_url={self.base_url!r}, model={self.model!r}{routes}, api_key={key})"

    __str__ = __repr__
