"""The only caller of the model: one logical request in, one `LLMExchanged` event out.

Transport retries (429, 5xx, connection errors, timeouts) happen here, with tenacity's backoff,
so every outcome is observable; the openai client's own retries are off. Model and transport
failures never raise: they end as an event whose `failure` names the kind ("timeout", "http"
with its `status`, "connection", "empty", ...; "script" when the scripted model has no rule for
the request; actors/model/failures.py) and whose `error` says it in one line. Only a token budget
that cannot allow a request raises (`BudgetExceeded`).

With `context_tokens` known (a small local model), prompts are fitted to the context before
they are sent: the middle of the longest user message gives way, and the event records the
messages actually sent and how many characters were cut.

With `routes` (a model per role), each request goes to its role's model, at that route's base
URL when it has one; the budgets, the concurrency limit and the rate limits hold across them all.

A plain class, usable in-process; the lead wraps it in a Ray async actor.
"""
from __future__ import annotations

import asyncio
import email.utils
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, NamedTuple

import msgspec
import openai
import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_result, stop_after_attempt, wait_exponential, wait_random_exponential

from magis_ray.events.schema import LLMExchanged, Message
from magis_ray.events.settings import api_key

log = structlog.get_logger()

PRICES_PATH = Path(__file__).with_name("prices.json")
RETRYABLE_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
ERROR_CHARS = 200  # an event's error stays one short line
# An overflow as llama.cpp, llama-cpp-python, vLLM and OpenAI word it (HTTP 400)
_OVERFLOW = re.compile(r"context (length|window|size)|exceeds? (the )?(available )?context|too many tokens", re.I)
_CONTEXT_LIMIT = re.compile(r"(?:maximum context length is|context window of|context size \(|n_ctx\W*)\s*(\d+)", re.I)
_PROMPT_TOKENS = re.compile(r"(\d+) (?:tokens )?in the messages|requested tokens \((\d+)\)|\((\d+) tokens\) exceeds", re.I)


from magis_ray.actors.model.asking import BudgetExceeded  # noqa: E402 - defined beside the roles that catch it
from magis_ray.actors.model.failures import NO_ANSWER_TYPE  # noqa: E402
from magis_ray.actors.model.ratelimit import MonotonicClock, RateLimiter  # noqa: E402
from magis_ray.actors.model.fitting import FIT_CHARS_PER_TOKEN, Fitted, estimate_tokens, fit_to_context  # noqa: E402
from magis_ray.actors.model.gateway_config import DEFAULT_MODEL, LOCAL_API_KEY, GatewayConfig  # noqa: E402


# Lanes whose requests another role's model answers: the QA Engineer breaks the candidates' ties.
_ANSWERED_BY = {"selection": "qa"}


def routed_role(role: str) -> str:
    """The role whose model answers the requests of a lane's role ("developer" for "developer:T1")."""
    return _ANSWERED_BY.get(role, role)


@dataclass
class _Budget:
    limit: int | None = None  # None: unlimited, usage still counted
    used: int = 0
    reserved: int = 0


class Gateway:
    def __init__(self, config: GatewayConfig | None = None) -> None:
        self.config = config or GatewayConfig()
        # MAGIS_MODEL and OPENAI_BASE_URL are settings (cli/settings.py), read there; the client
        # itself falls back to OPENAI_BASE_URL when no base URL is given
        self.model = self.config.model or DEFAULT_MODEL
        self._base_url = self.config.base_url or None
        self._prices = load_prices(self.config.prices_path or PRICES_PATH)
        self._budgets: dict[str, _Budget] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: dict[str | None, openai.AsyncOpenAI] = {}  # per base URL, on the current loop
        self._routes = {r.role: (r.model, r.base_url or self._base_url) for r in self.config.endpoint.models}
        self._slots: asyncio.Semaphore | None = None
        self._rate: RateLimiter | None = None
        self._settled: asyncio.Condition | None = None  # notified when a reservation turns into usage

    # --- budgets -----------------------------------------------------------------------------

    def set_budget(self, key: str, max_tokens_total: int | None) -> None:
        """Limit the tokens (prompt + completion) spent under `key`; 0 or None lifts the limit."""
        self._budgets.setdefault(key, _Budget()).limit = max_tokens_total or None

    def usage_of(self, key: str) -> int:
        budget = self._budgets.get(key)
        return budget.used if budget else 0

    def _reserve_now(self, keys: tuple[str, ...], prompt_estimate: int, max_tokens: int) -> int | None:
        """Reserve for one request if every limited key allows it; the max_tokens it may ask, or None to wait.

        A key near its limit shrinks max_tokens to what remains, but only when nothing else is in
        flight under it (the in-flight requests may leave more room once their real usage is known).
        """
        budgets = [self._budgets.setdefault(k, _Budget()) for k in keys]
        limited = [b for b in budgets if b.limit is not None]
        allowed = max_tokens
        for b in limited:
            room = b.limit - b.used - b.reserved - prompt_estimate
            if room >= max_tokens:
                continue
            floor = min(max_tokens, self.config.min_answer_tokens)
            if b.limit - b.used - prompt_estimate < floor:
                raise BudgetExceeded(
                    f"token budget exhausted: {b.used} of {b.limit} used, the request needs about "
                    f"{prompt_estimate + floor}"
                )
            if b.reserved > 0:
                return None
            allowed = min(allowed, room)  # nothing in flight here, so room already passed the floor
        for b in budgets:
            b.reserved += prompt_estimate + allowed
        return allowed

    async def _reserve(self, keys: tuple[str, ...], prompt_estimate: int, max_tokens: int) -> int:
        assert self._settled is not None
        async with self._settled:
            while (allowed := self._reserve_now(keys, prompt_estimate, max_tokens)) is None:
                await self._settled.wait()
            return allowed

    async def _settle(self, keys: tuple[str, ...], reserved: int, used: int) -> None:
        assert self._settled is not None
        async with self._settled:
            for k in keys:
                b = self._budgets[k]
                b.reserved -= reserved
                b.used += used
            self._settled.notify_all()

    # --- the exchange ------------------------------------------------------------------------

    async def exchange(
        self,
        *,
        run_id: str,
        purpose: str,
        messages: list[Message],
        schema: dict | None = None,
        task_id: str = "",
        attempt: int = 1,
        max_tokens: int | None = None,
        budget_keys: tuple[str, ...] | None = None,
        temperature: float | None = None,
        role: str = "",
    ) -> LLMExchanged:
        """Send one logical request (transport retries inside) and describe how it ended. `role`:
        the asking lane's role, which picks the route."""
        self._bind_to_loop()
        model, base_url = self._routes.get(routed_role(role), (self.model, self._base_url))
        client = self._client_for(base_url)
        assert self._slots is not None
        keys = tuple(dict.fromkeys(budget_keys if budget_keys is not None else (run_id,)))  # a key counts once
        fit = fit_to_context(messages, max_tokens or self.config.max_tokens, self.config.context_tokens)
        prompt_estimate = estimate_tokens(fit.messages)
        async with self._slots:
            allowed = await self._reserve(keys, prompt_estimate, fit.max_tokens)
            await self._rate.acquire(prompt_estimate + allowed)
            outcome = _Outcome()
            try:
                outcome = await self._send_with_retries(client, model, run_id, purpose, task_id, fit.messages, schema, allowed,
                                                        temperature)
                refit = self._refit_after_overflow(messages, fit, outcome)
                if refit is not None:  # the estimate was too kind: cut further, once
                    fit, first = refit, outcome
                    outcome = await self._send_with_retries(
                        client, model, run_id, purpose, task_id, fit.messages, schema, min(allowed, fit.max_tokens), temperature
                    )
                    outcome.tries += first.tries
                    if outcome.error:
                        outcome.latency_s += first.latency_s
            finally:
                await self._settle(keys, prompt_estimate + allowed, outcome.prompt_tokens + outcome.completion_tokens)
        event = LLMExchanged(
            purpose=purpose,
            model=model,
            messages=fit.messages,
            answer=outcome.answer,
            error=outcome.error,
            failure=outcome.failure,
            status=outcome.status,
            prompt_tokens=outcome.prompt_tokens,
            completion_tokens=outcome.completion_tokens,
            latency_s=round(outcome.latency_s, 4),
            cost_usd=self.cost_of(outcome.prompt_tokens, outcome.completion_tokens, model) if self._billed(base_url) else 0.0,
            attempt=attempt,
            task_id=task_id,
            truncated_chars=fit.cut_chars,
        )
        log.debug(
            "llm.exchange",
            run_id=run_id,
            purpose=purpose,
            task_id=task_id,
            prompt_tokens=event.prompt_tokens,
            completion_tokens=event.completion_tokens,
            latency_s=event.latency_s,
            tries=outcome.tries,
            truncated_chars=fit.cut_chars or None,
            error=event.error or None,
        )
        return event

    async def _send_with_retries(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        run_id: str,
        purpose: str,
        task_id: str,
        messages: list[Message],
        schema: dict | None,
        max_tokens: int,
        temperature: float | None = None,
    ) -> _Outcome:
        request = {
            "model": model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": self.config.temperature if temperature is None else temperature,
            self.config.max_tokens_field: max_tokens,
            "extra_headers": {"X-Magis-Purpose": purpose, "X-Magis-Task": task_id, "X-Magis-Run": run_id},
        }
        response_format = self._response_format(purpose, schema)
        if response_format is not None:
            request["response_format"] = response_format
        started = time.monotonic()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.config.max_retries + 1),
            wait=self._wait(),
            retry=retry_if_result(lambda sent: isinstance(sent, _Failure) and sent.retry_after is not None),
            before_sleep=lambda state: log.debug("llm.retry", run_id=run_id, purpose=purpose, task_id=task_id,
                                                 error=state.outcome.result().error, delay_s=round(state.next_action.sleep, 3)),
            retry_error_callback=lambda state: state.outcome.result(),  # the last try's failure, reported below
        )
        sent = await retrying(self._send_once, client, request)
        tries = retrying.statistics["attempt_number"]
        if isinstance(sent, _Outcome):
            sent.tries = tries
            return sent
        suffix = f" (after {tries} tries)" if tries > 1 else ""
        return _Outcome(error=sent.error + suffix, failure=sent.kind, status=sent.status,
                        latency_s=time.monotonic() - started, tries=tries, detail=sent.detail)

    async def _send_once(self, client: openai.AsyncOpenAI, request: dict) -> _Outcome | _Failure:
        """One try: the answer (or its emptiness) as an outcome, or the failure that ended it."""
        sent = time.monotonic()
        try:
            completion = await client.chat.completions.create(**request)
        except openai.OpenAIError as exc:
            return _describe_failure(exc, self.config.endpoint.timeout)._replace(detail=_full_message(exc))
        latency = time.monotonic() - sent
        usage = completion.usage
        prompt_tokens = usage.prompt_tokens if usage else 0
        completion_tokens = usage.completion_tokens if usage else 0
        answer = completion.choices[0].message.content if completion.choices else None
        if not (answer and answer.strip()):
            return _Outcome(
                error="empty: the model returned no content",
                failure="empty",
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                latency_s=latency,
            )
        return _Outcome(answer, "", prompt_tokens, completion_tokens, latency)

    def _refit_after_overflow(self, original: list[Message], fit: Fitted, outcome: _Outcome) -> Fitted | None:
        """A tighter fit when the server said the prompt overflows its context, else None.

        The server's own count of the prompt's tokens (when it says it) gives the real
        characters per token; otherwise the estimate is taken as a third too kind.
        """
        if not (outcome.failure == "http" and outcome.status == 400 and _OVERFLOW.search(outcome.detail)):
            return None
        limit = _CONTEXT_LIMIT.search(outcome.detail)
        context = self.config.context_tokens or (int(limit.group(1)) if limit else 0)
        if context <= 0:
            return None
        cpt = FIT_CHARS_PER_TOKEN * 2 / 3
        counted = _PROMPT_TOKENS.search(outcome.detail)
        if counted:
            tokens = int(next(g for g in counted.groups() if g))
            sent = sum(len(m.content) for m in fit.messages)
            cpt = min(cpt, 0.9 * sent / max(1, tokens - 4 * len(fit.messages)))
        refit = fit_to_context(original, fit.max_tokens, context, chars_per_token=max(0.5, cpt))
        unchanged = refit.messages == fit.messages and refit.max_tokens >= fit.max_tokens
        return None if unchanged else refit  # the same request would overflow the same way

    def _response_format(self, purpose: str, schema: dict | None) -> dict | None:
        if schema is None or self.config.endpoint.response_format == "none":
            return None
        if self.config.endpoint.response_format == "json_object":
            return {"type": "json_object", "schema": schema}  # llama.cpp's server reads "schema" here
        name = re.sub(r"[^A-Za-z0-9_-]", "_", purpose)[:64] or "answer"
        return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": False}}

    def _wait(self):
        """The wait before a retry: a server's Retry-After (retry_after > 0), capped; else exponential
        from backoff_base_s, capped, with jitter (half of it fixed, half random: retries of concurrent
        requests spread out, and none waits less than half)."""
        cap, half = self.config.backoff_cap_s, self.config.backoff_base_s / 2
        backoff = wait_exponential(multiplier=half, max=cap / 2) + wait_random_exponential(multiplier=half, max=cap / 2)

        def wait(state: RetryCallState) -> float:
            asked = state.outcome.result().retry_after
            return min(asked, cap) if asked > 0 else backoff(state)
        return wait

    def _billed(self, base_url: str | None) -> bool:
        return self.config.billed or base_url != self._base_url

    def cost_of(self, prompt_tokens: int, completion_tokens: int, model: str | None = None) -> float:
        price = price_for(self._prices, model or self.model)
        if price is None:
            return 0.0
        return round((prompt_tokens * price[0] + completion_tokens * price[1]) / 1_000_000, 8)

    # --- the client --------------------------------------------------------------------------

    def _bind_to_loop(self) -> None:
        """Make the client and the asyncio primitives on the running loop.

        They bind to the loop that first uses them; a new loop (e.g. asyncio.run per call,
        in-process) gets fresh ones. Budgets, plain data, carry over.
        """
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return
        self._loop = loop
        self._clients = {}  # a client belongs to the loop that made it
        self._slots = asyncio.Semaphore(self.config.endpoint.concurrency)
        self._settled = asyncio.Condition()
        self._rate = RateLimiter(MonotonicClock(), self.config.endpoint.rpm, self.config.endpoint.tpm,
                                 self.config.rate_window_s)
        for b in self._budgets.values():
            b.reserved = 0  # requests of a finished loop are gone

    def _client_for(self, base_url: str | None) -> openai.AsyncOpenAI:
        """The client of one endpoint (one per route's base URL), made on first use. One key for
        all of them: OPENAI_API_KEY (local servers ignore it)."""
        client = self._clients.get(base_url)
        if client is None:
            client = self._clients[base_url] = openai.AsyncOpenAI(
                base_url=base_url,
                api_key=self.config.api_key or api_key() or LOCAL_API_KEY,
                max_retries=0,
                timeout=self.config.endpoint.timeout,
            )
        return client

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients, self._loop = {}, None


class _Outcome(msgspec.Struct):
    answer: str = ""
    error: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    tries: int = 0
    detail: str = ""  # the server's whole error message (the event keeps one short line)
    failure: str = ""  # LLMExchanged.failure
    status: int = 0


class _Failure(NamedTuple):
    kind: str  # LLMExchanged.failure
    error: str  # one line: "kind: reason"
    retry_after: float | None  # the wait a retry needs (0: our backoff), or None: don't retry
    status: int = 0
    detail: str = ""  # the server's whole error message


def _describe_failure(exc: openai.OpenAIError, timeout_s: float) -> _Failure:
    if isinstance(exc, openai.APITimeoutError):
        return _Failure("timeout", f"timeout: no answer within {timeout_s:g} s", 0.0)
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        reason = f"{type(cause).__name__}: {cause}" if cause else exc.message
        return _Failure("connection", _one_line(f"connection: {reason}"), 0.0)
    if isinstance(exc, openai.APIStatusError) and getattr(exc, "type", None) == NO_ANSWER_TYPE:
        # the scripted model has no rule for this request: the script's gap, never worth a retry
        return _Failure("script", _one_line(f"script: {_full_message(exc).removeprefix('scripted server: ')}"), None)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        body = exc.body
        message = body.get("message") if isinstance(body, dict) else None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            message = body["error"].get("message")
        reason = _one_line(f"http {status}: {message or exc.message}")
        retry_after = _retry_after(exc.response.headers) if status in RETRYABLE_STATUS else None
        return _Failure("http", reason, retry_after, status)
    return _Failure("api", _one_line(f"api: {type(exc).__name__}: {exc}"), None)


def _full_message(exc: openai.OpenAIError) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        if isinstance(inner.get("message"), str):
            return inner["message"]
    return str(exc)


def _retry_after(headers: Mapping[str, str]) -> float:
    """Seconds a server asked us to wait (retry-after-ms, or Retry-After as seconds or a date); 0 if none."""
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return 0.0
        try:
            return max(0.0, float(value))
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return 0.0


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 3] + "..."


def load_prices(path: str | Path) -> dict[str, tuple[float, float]]:
    """USD per 1M (input, output) tokens by model name."""
    data = json.loads(Path(path).read_text())
    return {name: (float(p["input"]), float(p["output"])) for name, p in data.get("models", {}).items()}


def price_for(prices: dict[str, tuple[float, float]], model: str) -> tuple[float, float] | None:
    """The listed price of `model`, of its dated variant (gpt-4o-2024-08-06), minus a provider prefix (openai/gpt-4o)."""
    name = model.rsplit("/", 1)[-1]
    if name in prices:
        return prices[name]
    dated = [m for m in prices if re.fullmatch(re.escape(m) + r"-\d[\d-]*", name)]
    return prices[max(dated, key=len)] if dated else None
