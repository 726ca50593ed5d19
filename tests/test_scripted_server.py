"""The scripted model server, driven by the real openai client over loopback HTTP."""
from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import threading

import openai
import pytest

from conftest import interruptible

from magis_ray.actors.model.scripted_server import NO_ANSWER_TYPE, Rule, Script, ScriptedRequest, ScriptedServer


def client_for(server: ScriptedServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="test-key", max_retries=0, timeout=5)


def ask(client: openai.OpenAI, text: str = "hello", purpose: str = "", task: str = "", **kwargs):
    return client.chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": text}],
        extra_headers={"X-Magis-Purpose": purpose, "X-Magis-Task": task, "X-Magis-Run": "run-1"},
        **kwargs,
    )


def content(response) -> str | None:
    return response.choices[0].message.content


def test_rules_match_by_purpose_task_and_contains():
    script = Script(
        [
            Rule(purpose="locate_lines", task="T2", reply="lines of T2"),
            Rule(purpose="locate_lines", contains="parser.py", reply="lines in the parser"),
            Rule(purpose="locate_lines", reply="any lines"),
            Rule(purpose="summarize_file", reply="a summary"),
        ]
    )
    with ScriptedServer(script) as server:
        client = client_for(server)
        assert content(ask(client, purpose="summarize_file")) == "a summary"
        assert content(ask(client, purpose="locate_lines", task="T2", text="parser.py")) == "lines of T2"
        assert content(ask(client, purpose="locate_lines", task="T1", text="see parser.py")) == "lines in the parser"
        assert content(ask(client, purpose="locate_lines", task="T1", text="other.py")) == "any lines"


def test_times_limits_a_rule_then_later_rules_answer():
    script = Script([Rule(purpose="review_patch", reply="rejected", times=2), Rule(purpose="review_patch", reply="approved")])
    with ScriptedServer(script) as server:
        client = client_for(server)
        answers = [content(ask(client, purpose="review_patch")) for _ in range(4)]
    assert answers == ["rejected", "rejected", "approved", "approved"]


def test_json_reply_is_sent_as_json_text():
    with ScriptedServer([Rule(json={"approved": True, "comment": "fine"})]) as server:
        answer = content(ask(client_for(server)))
    assert json.loads(answer) == {"approved": True, "comment": "fine"}


def test_a_rule_takes_reply_or_json_not_both():
    with pytest.raises(ValueError):
        Rule(reply="x", json={"a": 1})


def test_no_matching_rule_answers_501_naming_the_purpose():
    """A gap in the script is no server fault (500 would be retried, and read as an unreachable
    model): 501 with an error type of its own."""
    with ScriptedServer([Rule(purpose="summarize_file", reply="s", times=1)]) as server:
        client = client_for(server)
        ask(client, purpose="summarize_file")
        for purpose in ("plan_tasks", "summarize_file"):  # unknown, then used up
            with pytest.raises(openai.APIStatusError) as caught:
                ask(client, purpose=purpose)
            assert caught.value.status_code == 501 and caught.value.type == NO_ANSWER_TYPE
            assert f"purpose={purpose!r}" in caught.value.message


def test_usage_tracks_prompt_and_reply_size():
    reply = "r" * 41
    with ScriptedServer([Rule(reply=reply)]) as server:
        client = client_for(server)
        small = ask(client, text="x" * 10).usage
        large = client.chat.completions.create(
            model="scripted",
            messages=[{"role": "system", "content": "s" * 400}, {"role": "user", "content": "u" * 1000}],
        ).usage
    assert (small.prompt_tokens, small.completion_tokens) == (3, 11)
    assert large.prompt_tokens == math.ceil((400 + 1 + 1000) / 4)  # contents joined by a newline
    assert large.total_tokens == large.prompt_tokens + large.completion_tokens


def test_max_tokens_truncates_the_reply_like_a_model():
    with ScriptedServer([Rule(reply="w" * 400)]) as server:
        response = ask(client_for(server), max_tokens=10)
    assert content(response) == "w" * 40
    assert response.choices[0].finish_reason == "length"
    assert response.usage.completion_tokens == 10


def test_requests_are_recorded_with_their_step_headers_and_body():
    with ScriptedServer([Rule(reply="ok")]) as server:
        client = client_for(server)
        ask(client, text="first", purpose="summarize_file", task="")
        ask(client, text="second", purpose="locate_lines", task="T1", temperature=0)
        first, second = server.requests
        assert (first.purpose, first.task, first.run) == ("summarize_file", "", "run-1")
        assert (second.purpose, second.task) == ("locate_lines", "T1")
        assert second.messages[0].content == "second" and second.text == "second"
        assert second.body["temperature"] == 0 and second.body["model"] == "scripted"
        assert second.headers["authorization"] == "Bearer test-key"
        assert first.time_received <= second.time_received
        assert server.count() == 2 and server.count("locate_lines") == 1 and server.count("nothing") == 0


def test_a_responder_answers_with_logic_and_may_pass():
    def count_lines(request: ScriptedRequest) -> Rule | str | None:
        if request.purpose != "count_lines":
            return None  # let the rules below answer
        return f"{request.messages[-1].content.count(chr(10)) + 1} lines"

    with ScriptedServer(Script([count_lines, Rule(reply="fallback")])) as server:
        client = client_for(server)
        assert content(ask(client, text="a\nb\nc", purpose="count_lines")) == "3 lines"
        assert content(ask(client, purpose="other")) == "fallback"
    with ScriptedServer(lambda request: Rule(status=503, reply="overloaded")) as server:
        with pytest.raises(openai.InternalServerError, match="overloaded"):
            ask(client_for(server))
    with ScriptedServer(lambda request: 1 / 0) as server:
        with pytest.raises(openai.InternalServerError, match="scripted responder failed: ZeroDivisionError"):
            ask(client_for(server))


def test_error_status_carries_retry_after():
    with ScriptedServer([Rule(status=429, reply="slow down", retry_after_s=1.5)]) as server:
        with pytest.raises(openai.RateLimitError) as caught:
            ask(client_for(server))
    headers = caught.value.response.headers
    assert (headers["retry-after"], headers["retry-after-ms"]) == ("2", "1500")
    assert caught.value.body["message"] == "slow down"


def test_drop_closes_without_answer():
    with ScriptedServer([Rule(drop=True)]) as server:
        with pytest.raises(openai.APIConnectionError):
            ask(client_for(server))
        assert server.count() == 1


def test_hang_outlasts_the_client_timeout_and_stop_ends_it():
    with ScriptedServer([Rule(hang=True)]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=0.3)
        with pytest.raises(openai.APITimeoutError):
            ask(client)
        assert server.in_flight == 1  # still hanging after the client left


def test_latency_and_max_in_flight():
    with ScriptedServer(Script([Rule(reply="ok")], latency_s=0.2)) as server:
        client = client_for(server)
        threads = [threading.Thread(target=ask, args=(client,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert server.max_in_flight == 4 and server.in_flight == 0


def test_models_endpoint():
    with ScriptedServer([]) as server:
        models = client_for(server).models.list()
    assert [m.id for m in models.data] == ["scripted"]


def test_script_loads_from_json_file(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps(
            {
                "latency_s": 0.01,
                "rules": [
                    {"purpose": "judge_file", "json": {"relevant": True}},
                    {"purpose": "summarize_file", "reply": "a summary", "times": 1},
                ],
            }
        )
    )
    script = Script.load(path)
    assert script.latency_s == 0.01 and script.rules[1] == Rule(purpose="summarize_file", reply="a summary", times=1)
    with ScriptedServer(script) as server:
        assert json.loads(content(ask(client_for(server), purpose="judge_file"))) == {"relevant": True}

    bare = tmp_path / "bare.json"
    bare.write_text('[{"reply": "hi"}]')
    assert Script.load(bare).rules == [Rule(reply="hi")]

    typo = tmp_path / "typo.json"
    typo.write_text('[{"purpse": "x"}]')
    with pytest.raises(ValueError, match="purpse"):
        Script.load(typo)


def test_cli_serves_a_script_until_interrupted(tmp_path):
    path = tmp_path / "script.json"
    path.write_text('{"rules": [{"reply": "from the cli"}]}')
    process = subprocess.Popen(
        [sys.executable, "-m", "magis_ray.actors.model.scripted_server", str(path), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    try:
        line = process.stdout.readline()
        base_url = line.split(" at ")[1].split()[0]
        client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0, timeout=5)
        assert content(client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])) == "from the cli"
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=10)
    assert process.returncode == 0
    assert "served 1 requests" in output
