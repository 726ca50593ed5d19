"""A role's way to ask the model one step: render the template, reuse a logged answer or ask
the gateway, record the exchange, validate the answer, and tell the model what was wrong."""
from __future__ import annotations

from typing import Callable, Protocol, TypeVar

from magis_ray.events.errors import MagisError, Unavailable
from magis_ray.events.schema import AnyEvent, LLMExchanged, Message, TestsRan

from magis_ray.actors.model.answers import Answer, json_schema, parse_answer
from magis_ray.actors.model.failures import unanswered
from magis_ray.actors.model.prompting import render

A = TypeVar("A", bound=Answer)


class NoUsableAnswer(MagisError):
    """The model gave no usable answer for a step; the role records why and carries on without it."""


class ModelUnavailable(Unavailable):
    """The model gave no answer because of the transport (unreachable, timed out, 429 or 5xx after
    every retry, ...), not because of what it said; the run stops, resumably, naming the cause."""


class NoScriptedAnswer(ModelUnavailable):
    """The scripted model (tests, demos) has no rule for this step: the script's gap, not an
    unreachable model. The run stops resumably, naming the step, so that a rule can be added."""

    def __init__(self, purpose: str, detail: str):
        super().__init__(f"the script has no answer for {purpose}: add a rule for purpose {purpose!r} ({detail})")
        self.purpose = purpose


class BudgetExceeded(MagisError):
    """A request would push a token budget past its limit; raised before anything is sent."""


class JournalPort(Protocol):
    """A lane's journal as a role sees it (the runtime's Journal): emit an event, or find the
    exchange this request already had in the log (on resume and replay)."""

    def emit(self, event: AnyEvent, caused_by: str = "") -> str: ...

    def recorded_exchange(self, probe: LLMExchanged) -> LLMExchanged | None: ...

    def recorded_tests(self, probe: TestsRan) -> TestsRan | None: ...


class LLMPort(Protocol):
    """The gateway as a role sees it: one request in, one recorded exchange out."""

    def exchange(
        self, *, run_id: str, purpose: str, messages: list[Message], schema: dict | None, task_id: str, attempt: int,
        temperature: float | None = None,
    ) -> LLMExchanged: ...


class Asker:
    def __init__(self, journal: JournalPort, llm: LLMPort, run_id: str, max_corrections: int = 2,
                 temperature: float | None = None):
        self.journal = journal
        self._temperature = temperature  # None: the gateway's own (0); candidates sample above 0
        self._llm = llm
        self._run_id = run_id
        self._max_corrections = max_corrections

    def ask(
        self,
        template: str,
        answer_type: type[A],
        *,
        task_id: str = "",
        check: Callable[[A], None] | None = None,
        **values: object,
    ) -> A:
        """The validated answer; `check` adds rules the schema cannot say (raise ValueError)."""
        messages = render(template, task_id=task_id, **values)
        problem = ""
        for attempt in range(1, self._max_corrections + 2):
            exchange = self._exchange(template, messages, answer_type, task_id, attempt)
            if exchange.error and exchange.failure != "empty":
                if exchange.failure == "script":
                    raise NoScriptedAnswer(template, exchange.error.removeprefix("script: "))
                if unanswered(exchange):
                    raise ModelUnavailable(f"{template}: {exchange.error}")
                raise NoUsableAnswer(f"{template}: {exchange.error}")
            try:  # an empty answer is an invalid one: it goes back for correction like any other
                answer = parse_answer(exchange.answer, answer_type)
                if check is not None:
                    check(answer)
                return answer
            except ValueError as exc:
                problem = str(exc)
            messages = [*messages, Message("assistant", exchange.answer), *render("correct_answer", error=problem)]
        raise NoUsableAnswer(f"{template}: no usable answer after {self._max_corrections + 1} tries ({problem})")

    def _exchange(self, purpose: str, messages: list[Message], answer_type: type[Answer], task_id: str, attempt: int) -> LLMExchanged:
        probe = LLMExchanged(purpose=purpose, model="", messages=messages, task_id=task_id, attempt=attempt)
        recorded = self.journal.recorded_exchange(probe)
        if recorded is not None:
            return recorded
        sampling = {} if self._temperature is None else {"temperature": self._temperature}
        exchange = self._llm.exchange(
            run_id=self._run_id, purpose=purpose, messages=messages, schema=json_schema(answer_type),
            task_id=task_id, attempt=attempt, **sampling,
        )
        self.journal.emit(exchange)
        return exchange
