"""The gateway against the real scripted server, through the real openai client."""
from __future__ import annotations

import asyncio
import socket

import msgspec
import pytest
import structlog

from magis_ray.actors.model.fitting import CUT_MARKER
from magis_ray.actors.model.gateway import (
    BudgetExceeded,
    Gateway,
    GatewayConfig,
    _retry_after,
    load_prices,
    price_for,
    PRICES_PATH,
)
from magis_ray.actors.model.scripted_server import Rule, Script, ScriptedServer
from magis_ray.events.schema import LLMExchanged, Message, RoleModel
from magis_ray.events.settings import EndpointSettings

ENDPOINT_FIELDS = tuple(f.name for f in msgspec.structs.fields(EndpointSettings))

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


def gateway_for(server_or_url, **overrides) -> Gateway:
    base_url = server_or_url if isinstance(server_or_url, str) else server_or_url.base_url
    settings = {"model": "gpt-4o", "timeout": 5.0, "max_retries": 3, "backoff_base_s": 0.01} | overrides
    section = EndpointSettings(**{key: settings.pop(key) for key in ENDPOINT_FIELDS if key in settings})
    return Gateway(GatewayConfig(base_url=base_url, endpoint=section, **settings))


def exchange(gateway: Gateway, text: str = "Is this patch right?", **kwargs) -> LLMExchanged:
    kwargs = {"run_id": "run-1", "purpose": "review_patch"} | kwargs
    return asyncio.run(gateway.exchange(messages=[Message("user", text)], **kwargs))


def test_answer_becomes_an_event():
    with ScriptedServer([Rule(purpose="review_patch", task="T1", reply='{"approved": true}')]) as server:
        messages = [Message("system", "You review patches."), Message("user", "diff --git a/x b/x")]
        event = asyncio.run(
            gateway_for(server).exchange(run_id="run-7", purpose="review_patch", task_id="T1", attempt=2, messages=messages)
        )
        request = server.requests[0]
    assert event.error == "" and event.answer == '{"approved": true}'
    assert (event.purpose, event.model, event.task_id, event.attempt) == ("review_patch", "gpt-4o", "T1", 2)
    assert event.messages == messages
    assert event.prompt_tokens == -(-(len("You review patches.") + 1 + len("diff --git a/x b/x")) // 4)
    assert event.completion_tokens == 5
    assert event.latency_s > 0
    assert event.cost_usd == pytest.approx((event.prompt_tokens * 2.5 + event.completion_tokens * 10.0) / 1e6)
    assert (request.purpose, request.task, request.run) == ("review_patch", "T1", "run-7")
    assert request.body["model"] == "gpt-4o" and request.body["temperature"] == 0
    assert request.body["max_tokens"] == 4096
    assert "response_format" not in request.body  # no schema given


def test_retries_on_500_then_succeeds():
    with ScriptedServer([Rule(status=500, times=2), Rule(reply="ok")]) as server:
        event = exchange(gateway_for(server))
        assert server.count() == 3
    assert (event.answer, event.error) == ("ok", "")


def test_gives_up_after_max_retries_with_a_one_line_reason():
    with ScriptedServer([Rule(status=502, reply="bad\ngateway")]) as server:
        event = exchange(gateway_for(server, max_retries=2))
        assert server.count() == 3
    assert event.error == "http 502: bad gateway (after 3 tries)"
    assert event.answer == "" and event.prompt_tokens == 0


def test_client_errors_are_not_retried():
    with ScriptedServer([Rule(status=400, reply="context too long")]) as server:
        event = exchange(gateway_for(server))
        assert server.count() == 1
    assert event.error == "http 400: context too long"


def test_a_missing_script_entry_is_the_scripts_gap_named_at_once_never_retried():
    with ScriptedServer([Rule(purpose="summarize_file", reply="s")]) as server:
        event = exchange(gateway_for(server, max_retries=4), purpose="plan_tasks")
        assert server.count("plan_tasks") == 1
    assert event.error.startswith("script: no rule answers purpose='plan_tasks'")
    assert event.failure == "script"


def test_429_honors_retry_after():
    script = [Rule(status=429, reply="rate limited", retry_after_s=0.3, times=1), Rule(reply="ok")]
    with ScriptedServer(script) as server:
        event = exchange(gateway_for(server, backoff_base_s=0.001))
        first, second = server.requests
    assert event.answer == "ok"
    assert second.time_received - first.time_received >= 0.29
    assert event.latency_s < 0.29  # the successful request's own time, not the wait


def test_429_exhausted_reports_rate_limit():
    with ScriptedServer([Rule(status=429, reply="rate limited")]) as server:
        event = exchange(gateway_for(server, max_retries=1))
    assert event.error == "http 429: rate limited (after 2 tries)"
    assert (event.failure, event.status) == ("http", 429)


def test_the_backoff_doubles_up_to_its_cap_with_half_of_it_jittered_and_a_retry_after_wins():
    from types import SimpleNamespace

    from magis_ray.actors.model.gateway import _Failure

    wait = Gateway(GatewayConfig(backoff_base_s=0.5, backoff_cap_s=3.0))._wait()

    def after(tries: int, retry_after: float = 0.0) -> list[float]:
        state = SimpleNamespace(attempt_number=tries, outcome=SimpleNamespace(result=lambda: _Failure("http", "x", retry_after)))
        return [wait(state) for _ in range(200)]

    for tries, delay in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (9, 3.0)]:
        waits = after(tries)
        assert all(delay / 2 <= w <= delay for w in waits), (tries, min(waits), max(waits))
        assert max(waits) - min(waits) > delay / 10  # jittered, not fixed
    assert set(after(1, retry_after=2.5)) == {2.5} and set(after(1, retry_after=60)) == {3.0}  # honored, capped


def test_retry_after_header_forms():
    assert _retry_after({"retry-after-ms": "250", "retry-after": "3"}) == 0.25
    assert _retry_after({"retry-after": "2"}) == 2.0
    assert 55 < _retry_after({"retry-after": _http_date_in(60)}) <= 60
    assert _retry_after({"retry-after": "soon"}) == 0.0
    assert _retry_after({}) == 0.0


def _http_date_in(seconds: float) -> str:
    import email.utils
    import time

    return email.utils.formatdate(time.time() + seconds, usegmt=True)


def test_timeout_ends_as_a_timeout_error():
    with ScriptedServer([Rule(hang=True)]) as server:
        event = exchange(gateway_for(server, timeout=0.5, max_retries=1))
        assert server.count() == 2
    assert event.error == "timeout: no answer within 0.5 s (after 2 tries)"
    assert event.latency_s >= 1.0  # total time of both tries


def test_connection_refused_ends_as_a_connection_error():
    with socket.socket() as probe:  # a port that was free a moment ago, with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    event = exchange(gateway_for(f"http://127.0.0.1:{port}/v1", max_retries=1))
    assert event.error.startswith("connection: ") and event.error.endswith("(after 2 tries)")
    assert event.failure == "connection"


def test_dropped_connection_is_retried():
    with ScriptedServer([Rule(drop=True, times=1), Rule(reply="ok")]) as server:
        event = exchange(gateway_for(server))
        assert server.count() == 2
    assert event.answer == "ok"


@pytest.mark.parametrize("reply", ["", "  \n", None])
def test_empty_answer_is_a_failure(reply):
    with ScriptedServer([Rule(reply=reply)]) as server:
        event = exchange(gateway_for(server))
        assert server.count() == 1  # the same prompt would likely give the same nothing
    assert event.error == "empty: the model returned no content"
    assert event.answer == ""


def test_concurrency_limit_holds_at_the_server():
    async def many(gateway: Gateway) -> list[LLMExchanged]:
        return await asyncio.gather(
            *(gateway.exchange(run_id="r", purpose="summarize_file", messages=[Message("user", f"file {i}")]) for i in range(10))
        )

    with ScriptedServer(Script([Rule(reply="summary")], latency_s=0.1)) as server:
        events = asyncio.run(many(gateway_for(server, concurrency=3)))
        assert server.count() == 10
        assert server.max_in_flight == 3
    assert all(e.answer == "summary" for e in events)


async def _spend(gateway: Gateway, count: int, **kwargs) -> tuple[list[LLMExchanged], int]:
    """Run `count` exchanges at once; the events that went through and the number refused."""
    calls = [
        gateway.exchange(purpose="locate_lines", messages=[Message("user", "x" * 300)], max_tokens=200, **kwargs)
        for _ in range(count)
    ]
    results = await asyncio.gather(*calls, return_exceptions=True)
    refused = [r for r in results if isinstance(r, BudgetExceeded)]
    assert len(refused) + sum(isinstance(r, LLMExchanged) for r in results) == count
    return [r for r in results if isinstance(r, LLMExchanged)], len(refused)


def test_budget_holds_under_concurrency():
    gateway_budget = 2000
    with ScriptedServer(Script([Rule(reply="y" * 1000)], latency_s=0.05)) as server:
        gateway = gateway_for(server, concurrency=8)
        gateway.set_budget("run-1", gateway_budget)
        events, refused = asyncio.run(_spend(gateway, 12, run_id="run-1"))
        sent = server.count()
    spent = sum(e.prompt_tokens + e.completion_tokens for e in events)
    reservation = 300 // 3 + 4 + 200  # prompt estimate + max_tokens
    assert refused > 0
    assert len(events) > gateway_budget // reservation  # later requests waited for real usage instead of failing
    assert sent == len(events)  # a refused request never reaches the model
    assert spent == gateway.usage_of("run-1") <= gateway_budget
    with pytest.raises(BudgetExceeded, match="token budget exhausted"):
        exchange(gateway, run_id="run-1")


def test_budget_caps_max_tokens_to_what_remains():
    with ScriptedServer([Rule(reply="fine")]) as server:
        gateway = gateway_for(server)
        gateway.set_budget("run-1", 1000)
        exchange(gateway, text="a" * 30)
        used = gateway.usage_of("run-1")
        exchange(gateway, text="a" * 30)
        first, second = server.requests
    prompt_estimate = 30 // 3 + 4
    assert first.body["max_tokens"] == 1000 - prompt_estimate
    assert second.body["max_tokens"] == 1000 - used - prompt_estimate


def test_every_budget_key_must_allow_the_request():
    with ScriptedServer(Script([Rule(reply="y" * 1000)], latency_s=0.02)) as server:
        gateway = gateway_for(server)
        gateway.set_budget("batch", 1500)

        async def two_runs():
            a = _spend(gateway, 6, run_id="run-a", budget_keys=("run-a", "batch"))
            b = _spend(gateway, 6, run_id="run-b", budget_keys=("run-b", "batch"))
            return await asyncio.gather(a, b)

        (events_a, refused_a), (events_b, refused_b) = asyncio.run(two_runs())
        assert refused_a + refused_b > 0
        assert gateway.usage_of("batch") == gateway.usage_of("run-a") + gateway.usage_of("run-b") <= 1500
        assert gateway.usage_of("run-a") == sum(e.prompt_tokens + e.completion_tokens for e in events_a)
        gateway.set_budget("batch", 0)  # lifted: requests flow again
        assert exchange(gateway, run_id="run-a", budget_keys=("run-a", "batch")).error == ""


def test_usage_is_counted_without_a_budget():
    with ScriptedServer([Rule(reply="abcd")]) as server:
        gateway = gateway_for(server)
        event = exchange(gateway, text="x" * 40)
    assert gateway.usage_of("run-1") == event.prompt_tokens + event.completion_tokens == 11
    assert gateway.usage_of("never-seen") == 0


@pytest.mark.parametrize(
    "style, expected",
    [
        ("json_schema", {"type": "json_schema", "json_schema": {"name": "review_patch_v2", "schema": SCHEMA, "strict": False}}),
        ("json_object", {"type": "json_object", "schema": SCHEMA}),
        ("none", None),
    ],
)
def test_response_format_styles(style, expected):
    with ScriptedServer([Rule(json={"approved": True})]) as server:
        exchange(gateway_for(server, response_format=style), purpose="review_patch.v2", schema=SCHEMA)
        body = server.requests[0].body
    assert body.get("response_format") == expected


def test_max_completion_tokens_field():
    with ScriptedServer([Rule(reply="ok")]) as server:
        exchange(gateway_for(server, max_tokens_field="max_completion_tokens"), max_tokens=77)
        body = server.requests[0].body
    assert body["max_completion_tokens"] == 77 and "max_tokens" not in body


def test_api_key_never_leaves_through_events_or_logs():
    secret = "sk-test-do-not-leak-1234567890"
    config = GatewayConfig(api_key=secret, model="gpt-4o", max_retries=1, backoff_base_s=0.01)
    with ScriptedServer([Rule(status=401, reply="bad key", times=1), Rule(reply="ok")]) as server:
        gateway = Gateway(msgspec.structs.replace(config, base_url=server.base_url))
        with structlog.testing.capture_logs() as logs:
            failed = exchange(gateway)
            answered = exchange(gateway)
        assert server.requests[0].headers["authorization"] == f"Bearer {secret}"  # it is used...
    for event in (failed, answered):  # ...but never kept
        assert secret not in msgspec.json.encode(event).decode()
    assert failed.error == "http 401: bad key" and answered.answer == "ok"
    assert secret not in repr(logs) and any(entry["event"] == "llm.exchange" for entry in logs)
    assert secret not in repr(config) and secret not in str(gateway.config)


def test_an_endpoint_served_here_costs_nothing_whatever_the_model_is_called():
    # the scripted model and the bundled one are served on loopback (billed=False): a [models]
    # table naming gpt-4o changes the name sent, not the price; a role sent to its own endpoint is
    # priced by its model's name
    with ScriptedServer([Rule(reply="ok")]) as here, ScriptedServer([Rule(reply="ok")]) as elsewhere:
        routes = (RoleModel("developer", "gpt-4o"), RoleModel("qa", "gpt-4o", elsewhere.base_url))
        gateway = gateway_for(here, billed=False, models=routes)
        free = [exchange(gateway), exchange(gateway, role="developer")]
        priced = exchange(gateway, role="qa")
    assert [(e.model, e.cost_usd) for e in free] == [("gpt-4o", 0.0), ("gpt-4o", 0.0)]
    assert free[0].prompt_tokens > 0 and priced.cost_usd == pytest.approx(
        (priced.prompt_tokens * 2.5 + priced.completion_tokens * 10.0) / 1e6)


def test_defaults_from_environment(monkeypatch):
    # MAGIS_MODEL is a setting (cli/settings.py reads it); the gateway takes its config's model only
    monkeypatch.setenv("MAGIS_MODEL", "not-the-gateway-s")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedServer([Rule(reply="ok")]) as server:
        event = exchange(Gateway(GatewayConfig(base_url=server.base_url, model="local-llama")))
        request = server.requests[0]
    assert event.model == "local-llama" and request.body["model"] == "local-llama"
    assert request.headers["authorization"] == "Bearer not-needed"
    assert event.cost_usd == 0.0  # unknown model


def test_works_across_event_loops():
    with ScriptedServer([Rule(reply="ok")]) as server:
        gateway = gateway_for(server)
        assert exchange(gateway).answer == exchange(gateway).answer == "ok"  # two asyncio.run calls
        assert gateway.usage_of("run-1") > 0


def test_prices():
    prices = load_prices(PRICES_PATH)
    assert price_for(prices, "gpt-4o") == (2.5, 10.0)
    assert price_for(prices, "gpt-4o-2024-08-06") == (2.5, 10.0)
    assert price_for(prices, "gpt-4o-mini-2024-07-18") == prices["gpt-4o-mini"]
    assert price_for(prices, "openai/gpt-4o-mini") == prices["gpt-4o-mini"]
    assert price_for(prices, "o1-mini") is None  # not a dated o1
    assert price_for(prices, "qwen2.5-coder") is None


def test_a_budget_reserves_for_the_fitted_prompt():
    with ScriptedServer([Rule(reply="ok")]) as server:
        gateway = gateway_for(server, context_tokens=1000)
        gateway.set_budget("run-1", 1500)
        event = exchange(gateway, text="x\n" * 3000, max_tokens=200)  # whole, about 2,000 tokens: over the budget
        body = server.requests[0].body
    assert event.error == "" and event.truncated_chars > 0
    assert body["max_tokens"] == 200 and gateway.usage_of("run-1") <= 1500


def test_an_overflow_without_a_known_context_is_not_retried():
    with ScriptedServer([Rule(status=400, reply="the request exceeds the available context size, try increasing it")]) as server:
        event = exchange(gateway_for(server), text="x" * 5000)
        assert server.count() == 1  # no context configured, none stated: nothing to fit to
    assert event.error.startswith("http 400: the request exceeds the available context size")
    assert (event.failure, event.status) == ("http", 400)
    assert event.truncated_chars == 0


def test_the_whole_error_message_guides_the_refit_while_the_event_keeps_one_short_line():
    reply = "This model's maximum context length is 1000 tokens. " + "Please note: " * 30 + "(3000 in the messages, 200 in the completion)"
    with ScriptedServer([Rule(status=400, reply=reply, times=1), Rule(reply="ok")]) as server:
        event = exchange(gateway_for(server, context_tokens=1000), text="y\n" * 3000, max_tokens=200)
        first, second = server.requests
    # the server's count (3000 tokens for about 2,000 characters) cuts far more than a blind guess would
    assert event.answer == "ok" and len(second.text) < len(first.text) * 0.4
    marker = CUT_MARKER.format(n=event.truncated_chars)
    assert marker in second.text and event.truncated_chars == 6000 - len(second.text) + len(marker)
