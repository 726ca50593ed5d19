"""How a model request can end without an answer, as the gateway records it on the exchange
(`LLMExchanged.failure`, `.status`) and the roles match it: by kind, never by the error's words."""
from __future__ import annotations

from magis_ray.events.schema import LLMExchanged

# The error type a server sends for a request it has no answer for (the scripted model's gap in
# its script): the gateway records it as a "script" failure and never retries it.
NO_ANSWER_TYPE = "no_scripted_answer"

# Statuses whose error says nothing about the request's content: the request may succeed as it is
# later (auth fixed, the server back, the rate limit reset). A 400 refuses the content itself.
UNANSWERED_STATUS = frozenset({401, 403, 404, 408, 409, 429}) | frozenset(range(500, 600))
_UNANSWERED_KINDS = frozenset({"timeout", "connection", "api", "script"})


def unanswered(exchange: LLMExchanged) -> bool:
    """The request got no answer at all (a script's gap counts: the step was never answered), so
    a resume asks it again; an answer that was empty or refused for its content is the step's."""
    return exchange.failure in _UNANSWERED_KINDS or (exchange.failure == "http" and exchange.status in UNANSWERED_STATUS)
