"""Prompts fitted to a small model's context, against the real scripted server (no model needed).

The scripted server stands in for llama.cpp: a responder answers HTTP 400 with llama-cpp-python's
overflow message when a prompt is too long for a context it counts with its own, harsher tokenizer.
"""
from __future__ import annotations

import asyncio
import math
import re

import pytest

from magis_ray.actors.model.fitting import CUT_MARKER, FIT_CHARS_PER_TOKEN, estimate_tokens, fit_to_context, fitted_from
from magis_ray.actors.model.gateway import Gateway, GatewayConfig
from magis_ray.events.settings import EndpointSettings
from magis_ray.actors.model.scripted_server import Rule, ScriptedRequest, ScriptedServer
from magis_ray.events.schema import LLMExchanged, Message

INSTRUCTION = 'Answer as JSON: {"ranges": [{"start": 10, "end": 12}], "reason": "one sentence"}'
SYSTEM = Message("system", "You are Ada, a developer. Answer with a JSON object only.")


def long_prompt(lines: int = 400) -> list[Message]:
    numbered = "\n".join(f"{i:4d}    value_{i} = compute(value_{i - 1}) + {i}" for i in range(1, lines + 1))
    return [SYSTEM, Message("user", f"Issue:\nmean() fails on empty lists\n\nThe file:\n```\n{numbered}\n```\n{INSTRUCTION}")]


def gateway_for(server: ScriptedServer, **overrides) -> Gateway:
    settings = {"model": "smollm2", "max_retries": 0} | overrides
    return Gateway(GatewayConfig(base_url=server.base_url, endpoint=EndpointSettings(timeout=5.0, response_format="json_object"),
                                 **settings))


def exchange(gateway: Gateway, messages: list[Message], **kwargs) -> LLMExchanged:
    return asyncio.run(gateway.exchange(run_id="run-1", purpose="locate_lines", messages=messages, **kwargs))


def overflow_at(context: int, chars_per_token: float = 2.0, detailed: bool = True):
    """A responder refusing prompts over `context` tokens (counted at `chars_per_token`) as llama-cpp-python does."""

    def respond(request: ScriptedRequest) -> Rule | None:
        prompt = math.ceil(sum(len(m.content) for m in request.messages) / chars_per_token)
        completion = request.body.get("max_tokens", 0)
        if prompt + completion <= context:
            return None
        if not detailed:  # llama.cpp's own server says less
            return Rule(status=400, reply="the request exceeds the available context size, try increasing it")
        return Rule(
            status=400,
            reply=(
                f"This model's maximum context length is {context} tokens. However, you requested "
                f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the completion). "
                "Please reduce the length of the messages or completion."
            ),
        )

    return respond


def cut_count(text: str) -> int:
    found = re.search(r"\[\.\.\. (\d+) characters cut to fit the model's context \.\.\.\]", text)
    return int(found.group(1)) if found else 0


def test_without_a_context_nothing_is_cut():
    messages = long_prompt()
    with ScriptedServer([Rule(reply='{"ranges": []}')]) as server:
        event = exchange(gateway_for(server), messages, max_tokens=200)
        sent = server.requests[0]
    assert event.messages == messages == sent.messages
    assert event.truncated_chars == 0 and sent.body["max_tokens"] == 200


def test_a_long_prompt_is_cut_in_the_middle_to_fit():
    messages = long_prompt()
    with ScriptedServer([Rule(reply='{"ranges": []}')]) as server:
        event = exchange(gateway_for(server, context_tokens=1000), messages, max_tokens=200)
        sent = server.requests[0]
    assert event.error == "" and sent.messages == event.messages  # the event holds what was sent
    system, user = event.messages
    assert system == SYSTEM  # never cut
    original = messages[1].content
    assert user.content.endswith(f"\n{INSTRUCTION}")  # the answer format survives
    assert user.content.startswith("Issue:\nmean() fails on empty lists")
    assert event.truncated_chars == cut_count(user.content) == len(original) - len(user.content) + len(
        CUT_MARKER.format(n=event.truncated_chars)
    )
    assert estimate_tokens(event.messages, FIT_CHARS_PER_TOKEN) + sent.body["max_tokens"] <= 1000
    assert sent.body["max_tokens"] == 200
    assert fitted_from(event.messages, messages)


def test_max_tokens_is_capped_to_what_the_context_leaves():
    messages = [SYSTEM, Message("user", "x" * 300)]
    with ScriptedServer([Rule(reply="{}")]) as server:
        event = exchange(gateway_for(server, context_tokens=1000), messages)  # config max_tokens: 4096
        body = server.requests[0].body
    assert body["max_tokens"] == 1000 - estimate_tokens(messages, FIT_CHARS_PER_TOKEN)
    assert event.truncated_chars == 0 and event.messages == messages


def test_an_answer_keeps_half_the_context_when_both_are_long():
    fit = fit_to_context(long_prompt(), max_tokens=4096, context_tokens=2048)
    assert fit.max_tokens >= 1024 and fit.cut_chars > 0
    assert estimate_tokens(fit.messages, FIT_CHARS_PER_TOKEN) + fit.max_tokens <= 2048


def test_an_overflow_the_estimate_missed_is_cut_further_once():
    messages = long_prompt()
    # the server's tokenizer counts 1.5 characters a token: twice what the estimate allows
    with ScriptedServer([overflow_at(1000, chars_per_token=1.5), Rule(reply='{"ranges": []}')]) as server:
        event = exchange(gateway_for(server, context_tokens=1000), messages, max_tokens=200)
        first, second = server.requests
    assert event.error == "" and event.answer == '{"ranges": []}'
    assert sum(len(m.content) for m in second.messages) < sum(len(m.content) for m in first.messages)
    assert event.messages == second.messages and event.truncated_chars == cut_count(second.messages[1].content)
    assert second.messages[1].content.endswith(INSTRUCTION) and second.messages[0] == SYSTEM
    assert math.ceil(sum(len(m.content) for m in second.messages) / 1.5) + second.body["max_tokens"] <= 1000
    assert fitted_from(event.messages, messages)


def test_an_overflow_without_numbers_cuts_by_a_third_more():
    messages = long_prompt()
    with ScriptedServer([overflow_at(1000, chars_per_token=2.0, detailed=False), Rule(reply="{}")]) as server:
        event = exchange(gateway_for(server, context_tokens=1000), messages, max_tokens=200)
        assert server.count() == 2
    assert event.error == "" and event.truncated_chars > 0


def test_a_persistent_overflow_ends_as_a_client_error_after_one_retry():
    messages = long_prompt()
    with ScriptedServer([overflow_at(10, chars_per_token=1.0)]) as server:
        event = exchange(gateway_for(server, context_tokens=1000), messages, max_tokens=200)
        assert server.count() == 2  # one further cut, not a loop
        assert event.messages == server.requests[1].messages
    assert event.error.startswith("http 400: This model's maximum context length is 10 tokens")
    assert event.truncated_chars > 0 and event.answer == ""


def test_a_server_stated_context_is_used_when_none_was_configured():
    messages = long_prompt()
    with ScriptedServer([overflow_at(1500, chars_per_token=3.0), Rule(reply="{}")]) as server:
        event = exchange(gateway_for(server), messages, max_tokens=200)
        first, second = server.requests
    assert first.messages == messages  # sent whole: the context was unknown
    assert event.error == "" and event.truncated_chars > 0 and second.body["max_tokens"] <= 200


def test_other_client_errors_are_not_retried():
    with ScriptedServer([Rule(status=400, reply="unknown field 'foo'")]) as server:
        event = exchange(gateway_for(server, context_tokens=1000), long_prompt(), max_tokens=200)
        assert server.count() == 1
    assert event.error == "http 400: unknown field 'foo'" and event.truncated_chars > 0


def test_a_correction_round_cuts_the_long_message_and_keeps_the_others():
    messages = [
        *long_prompt(),
        Message("assistant", '{"ranges": "oops"}'),
        Message("user", "Your answer could not be used: ranges must be a list\nAnswer again with a single JSON object."),
    ]
    fit = fit_to_context(messages, max_tokens=200, context_tokens=1000)
    assert fit.messages[0] == messages[0] and fit.messages[2:] == messages[2:]
    assert cut_count(fit.messages[1].content) == fit.cut_chars > 0
    assert fitted_from(fit.messages, messages)


def test_several_long_user_messages_are_cut_longest_first():
    big, bigger = Message("user", "a\n" * 1500 + "end a"), Message("user", "b\n" * 2500 + "end b")
    fit = fit_to_context([SYSTEM, big, bigger], max_tokens=100, context_tokens=1000)
    assert estimate_tokens(fit.messages, FIT_CHARS_PER_TOKEN) + fit.max_tokens <= 1000
    assert cut_count(fit.messages[2].content) > 0 and fit.messages[2].content.endswith("end b")
    assert fit.cut_chars == cut_count(fit.messages[1].content) + cut_count(fit.messages[2].content)


def test_the_last_line_survives_a_deep_cut_even_with_a_trailing_newline():
    instruction = "Answer as JSON: " + '{"summary": "two or three sentences on what the file does and why"} ' * 2
    messages = [SYSTEM, Message("user", "x\n" * 3000 + instruction + "\n")]
    fit = fit_to_context(messages, max_tokens=20, context_tokens=150)
    assert fit.messages[1].content.endswith("...]\n" + instruction + "\n") and fit.cut_chars > 5000


def test_one_huge_line_is_cut_too():
    messages = [SYSTEM, Message("user", "z" * 20_000)]
    fit = fit_to_context(messages, max_tokens=100, context_tokens=1000)
    assert fit.cut_chars > 0 and estimate_tokens(fit.messages, FIT_CHARS_PER_TOKEN) + fit.max_tokens <= 1000


def test_a_prompt_that_cannot_be_cut_is_sent_as_it_is():
    messages = [Message("system", "s" * 6000), Message("user", "Answer as JSON.")]
    fit = fit_to_context(messages, max_tokens=100, context_tokens=1000)
    assert fit.messages == messages and fit.cut_chars == 0 and fit.max_tokens == 1  # the server decides


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c.replace("value_7 ", "value_8 ", 1),  # a different text outside the cut
        lambda c: c.replace("characters cut", "characters removed"),  # not our marker
        lambda c: re.sub(r"\[\.\.\. (\d+)", lambda m: f"[... {int(m.group(1)) + 1}", c),  # a wrong count
    ],
)
def test_fitted_from_recognizes_only_our_cuts(change):
    messages = long_prompt()
    fit = fit_to_context(messages, max_tokens=200, context_tokens=1000)
    assert fitted_from(fit.messages, messages)
    altered = [fit.messages[0], Message("user", change(fit.messages[1].content))]
    assert not fitted_from(altered, messages)
    assert not fitted_from(fit.messages[:1], messages)
