"""A real OpenAI-compatible HTTP server on loopback that answers from a script.

It stands in for the model (never for our code) in tests and examples: the real `openai`
client talks to it over HTTP. Each request names its step with the headers the gateway sends
(X-Magis-Purpose, X-Magis-Task, X-Magis-Run); rules match on those and on the prompt text.

    with ScriptedServer(Script([Rule(purpose="summarize_file", reply="A parser.")])) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x")

CLI: python -m magis_ray.actors.model.scripted_server SCRIPT.json --port 8765
"""
from __future__ import annotations

import argparse
import itertools
import json as jsonlib
import math
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Union

import msgspec

from magis_ray.actors.model.failures import NO_ANSWER_TYPE  # the error type of a request no rule answers
from magis_ray.events.schema import Message

HANG_S = 30.0  # a hang outlasts any client timeout a test would set


class Rule(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One scripted answer. Unset matchers (None) match anything.

    `reply` is the assistant's content; `json` (a dict or list) is sent as JSON text instead.
    With neither, the answer's content is null. A non-200 `status` answers an OpenAI-style
    error whose message is `reply` (or a default).
    """

    purpose: str | None = None
    task: str | None = None
    contains: str | None = None
    reply: str | None = None
    json: Any = None
    status: int = 200
    delay_s: float | None = None
    times: int | None = None
    hang: bool = False
    drop: bool = False
    retry_after_s: float | None = None  # sent as Retry-After (whole seconds) and retry-after-ms

    def __post_init__(self) -> None:
        if self.reply is not None and self.json is not None:
            raise ValueError("a Rule takes reply= or json=, not both")

    def matches(self, request: ScriptedRequest) -> bool:
        return (
            (self.purpose is None or self.purpose == request.purpose)
            and (self.task is None or self.task == request.task)
            and (self.contains is None or self.contains in request.text)
        )

    def content(self) -> str | None:
        if self.json is not None:
            return jsonlib.dumps(self.json)
        return self.reply


class ScriptedRequest(msgspec.Struct, frozen=True):
    purpose: str
    task: str
    run: str
    messages: list[Message]
    body: dict
    time_received: float  # time.monotonic(), to measure gaps such as retry backoff
    headers: dict[str, str] = {}  # lower-cased names

    @property
    def text(self) -> str:
        """All message contents joined: what `Rule.contains` searches."""
        return "\n".join(m.content for m in self.messages)


# A responder decides in code: a Rule, a reply string, or None to let later entries answer.
Responder = Callable[[ScriptedRequest], Union[Rule, str, None]]


class _ScriptFile(msgspec.Struct, forbid_unknown_fields=True):
    rules: list[Rule]
    latency_s: float = 0.0


@dataclass
class Script:
    """Rules (or responders) tried in order; the first that matches and has uses left answers."""

    rules: list[Rule | Responder] = field(default_factory=list)
    latency_s: float = 0.0

    @classmethod
    def load(cls, path: str | Path) -> Script:
        """Read {"latency_s": 0.0, "rules": [{...}, ...]} or a bare list of rules."""
        data = msgspec.json.decode(Path(path).read_bytes())
        if isinstance(data, list):
            data = {"rules": data}
        try:
            parsed = msgspec.convert(data, _ScriptFile)
        except msgspec.ValidationError as exc:
            raise ValueError(f"bad script {path}: {exc}") from None
        return cls(rules=list(parsed.rules), latency_s=parsed.latency_s)


class ScriptedServer:
    """Serves a script on a loopback port from a background thread until `stop()`."""

    def __init__(
        self,
        script: Script | list[Rule | Responder] | Responder,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if isinstance(script, list):
            script = Script(script)
        elif callable(script) and not isinstance(script, Script):
            script = Script([script])
        self.script = script
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._requests: list[ScriptedRequest] = []
        self._uses: dict[int, int] = {}  # rule index -> answers given, so Script stays reusable
        self._in_flight = 0
        self._max_in_flight = 0
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer((host, port), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-llm", daemon=True
        )  # a short poll makes stop() quick
        self._thread.start()

    # --- public view -------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://{self._httpd.server_address[0]}:{self.port}/v1"

    @property
    def requests(self) -> list[ScriptedRequest]:
        with self._lock:
            return list(self._requests)

    def count(self, purpose: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self._requests if purpose is None or r.purpose == purpose)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    @property
    def max_in_flight(self) -> int:
        """The most chat requests the server held at once since it started."""
        with self._lock:
            return self._max_in_flight

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()  # wakes delayed and hanging answers so their threads end
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- answering ---------------------------------------------------------------------------

    def _record(self, request: ScriptedRequest) -> None:
        with self._lock:
            self._requests.append(request)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _choose(self, request: ScriptedRequest) -> Rule | None:
        for index, entry in enumerate(self.script.rules):
            if isinstance(entry, Rule):
                with self._lock:  # claim a use atomically: concurrent requests must not share one
                    used = self._uses.get(index, 0)
                    if entry.matches(request) and (entry.times is None or used < entry.times):
                        self._uses[index] = used + 1
                        return entry
            else:
                answer = entry(request)
                if answer is not None:
                    return Rule(reply=answer) if isinstance(answer, str) else answer
        return None

    def _sleep(self, seconds: float) -> bool:
        """Wait, unless the server stops first; True when it stopped."""
        return self._stopping.wait(seconds) if seconds > 0 else self._stopping.is_set()

    def _completion(self, request: ScriptedRequest, content: str | None) -> dict:
        limit = request.body.get("max_completion_tokens") or request.body.get("max_tokens")
        finish_reason = "stop"
        if content is not None and limit and _tokens(content) > limit:
            content, finish_reason = content[: int(limit) * 4], "length"  # a real model stops at its limit
        prompt_tokens = _tokens(request.text)
        completion_tokens = _tokens(content or "")
        return {
            "id": f"chatcmpl-scripted-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.body.get("model", "scripted"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def _tokens(text: str) -> int:
    """The script's tokenizer: about four characters a token, like English text for GPT models."""
    return math.ceil(len(text) / 4)


def _error_body(status: int, message: str) -> dict:
    kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _as_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _make_handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        in_flight = False  # this handler holds a chat request the server counts

        def log_message(self, format: str, *args: Any) -> None:  # tests need no access log
            pass

        def _land(self) -> None:
            # before the answer's bytes go out: a client that got its answer may send the next
            # request at once, and must not find this one still counted
            if self.in_flight:
                self.in_flight = False
                server._done()

        def _send(self, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
            data = jsonlib.dumps(body).encode()
            self._land()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")  # one request per connection: no idle threads linger
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                model = {"id": "scripted", "object": "model", "created": 0, "owned_by": "magis-ray"}
                self._send(200, {"object": "list", "data": [model]})
            else:
                self._send(404, _error_body(404, f"no route GET {self.path}"))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, _error_body(404, f"no route POST {self.path}"))
                return
            try:
                body = jsonlib.loads(raw or b"{}")
                messages = [Message(role=str(m.get("role", "")), content=_as_text(m.get("content"))) for m in body.get("messages", [])]
            except (ValueError, AttributeError) as exc:
                self._send(400, _error_body(400, f"unreadable request body: {exc}"))
                return
            request = ScriptedRequest(
                purpose=self.headers.get("X-Magis-Purpose", ""),
                task=self.headers.get("X-Magis-Task", ""),
                run=self.headers.get("X-Magis-Run", ""),
                messages=messages,
                body=body,
                time_received=time.monotonic(),
                headers={name.lower(): value for name, value in self.headers.items()},
            )
            server._record(request)
            self.in_flight = True
            try:
                self._answer(request)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (e.g. its timeout); nothing left to tell it
            finally:
                self._land()

        def _answer(self, request: ScriptedRequest) -> None:
            try:
                rule = server._choose(request)
            except Exception as exc:  # a broken responder must fail the request loudly, not the thread
                self._send(500, _error_body(500, f"scripted responder failed: {type(exc).__name__}: {exc}"))
                return
            if rule is None:
                # A gap in the script, not a fault of the server: 501 and an error type of its own, so
                # that the gateway says so (naming the purpose) instead of retrying a "server error".
                message = (
                    f"scripted server: no rule answers purpose={request.purpose!r} task={request.task!r} "
                    f"({len(server.script.rules)} rules, or all used up)"
                )
                self._send(501, {"error": {"message": message, "type": NO_ANSWER_TYPE, "param": None, "code": None}})
                return
            delay = server.script.latency_s if rule.delay_s is None else rule.delay_s
            if rule.hang:
                delay = max(delay, HANG_S)
            if server._sleep(delay) or rule.hang or rule.drop:
                self.close_connection = True  # close without a word
                return
            if rule.status != 200:
                headers = {}
                if rule.retry_after_s is not None:
                    headers["Retry-After"] = str(math.ceil(rule.retry_after_s))
                    headers["retry-after-ms"] = str(int(rule.retry_after_s * 1000))
                self._send(rule.status, _error_body(rule.status, rule.reply or f"scripted error {rule.status}"), headers)
                return
            self._send(200, server._completion(request, rule.content()))

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a MAGIS model script over the OpenAI chat API.")
    parser.add_argument("script", help="JSON file: {'latency_s': 0.0, 'rules': [...]}")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    server = ScriptedServer(Script.load(args.script), host=args.host, port=args.port)
    print(f"scripted model serving at {server.base_url} (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        print(f"served {server.count()} requests", flush=True)


if __name__ == "__main__":
    main()
