"""Fitting a prompt to a model's context: cut the middle of the longest user messages, never the
system message or the answer instruction, and recognize a cut prompt as the one it came from
(a resumed run asks with the whole prompt; the log holds what was sent). Pure and light: the
journals use it without importing the gateway's HTTP client."""
from __future__ import annotations

import math
import re
from typing import NamedTuple

from magis_ray.events.schema import Message

CHARS_PER_TOKEN = 3.0  # overestimates tokens for prose and code alike: estimates err on the safe side
# Small models' tokenizers are less frugal: SmolLM2 reads our line-numbered code prompts at about
# 2.9-3.0 characters a token, so fitting assumes fewer
FIT_CHARS_PER_TOKEN = 2.5
INSTRUCTION_CHARS = 1000  # a user message's last line up to this long is its answer instruction: kept whole
CUT_MARKER = "\n[... {n} characters cut to fit the model's context ...]\n"
_CUT = re.compile(r"\n\[\.\.\. (\d+) characters cut to fit the model's context \.\.\.\]\n")


class Fitted(NamedTuple):
    messages: list[Message]
    max_tokens: int
    cut_chars: int  # characters taken out of the prompt (0: sent whole)


def estimate_tokens(messages: list[Message], chars_per_token: float = CHARS_PER_TOKEN) -> int:
    """A generous count of the prompt's tokens, a few for each message's framing."""
    return math.ceil(sum(len(m.content) for m in messages) / chars_per_token) + 4 * len(messages)


def fit_to_context(
    messages: list[Message], max_tokens: int, context_tokens: int, chars_per_token: float = FIT_CHARS_PER_TOKEN
) -> Fitted:
    """The messages and max_tokens that fit `context_tokens` (0: unknown, nothing changes).

    The answer keeps at least min(max_tokens, half the context); the prompt gets the rest, cut
    from the middle of the longest user message(s). The system message and each user message's
    last line (the answer format the model must follow) are never cut. max_tokens is capped to
    what the prompt leaves.
    """
    if context_tokens <= 0:
        return Fitted(list(messages), max_tokens, 0)
    answer_room = min(max_tokens, context_tokens // 2)
    excess = estimate_tokens(messages, chars_per_token) - (context_tokens - answer_room)
    fitted, cut = list(messages), 0
    if excess > 0:
        fitted, cut = _cut_user_messages(fitted, math.ceil(excess * chars_per_token))
    room = context_tokens - estimate_tokens(fitted, chars_per_token)
    return Fitted(fitted, max(1, min(max_tokens, room)), cut)


def _cut_user_messages(messages: list[Message], chars: int) -> tuple[list[Message], int]:
    """Take at least `chars` characters (net of the markers) out of the longest user messages."""
    cut_total = 0
    cuttable = {i: len(m.content) - _protected_tail(m.content) for i, m in enumerate(messages) if m.role == "user"}
    while chars > 0:
        index = max(cuttable, key=cuttable.__getitem__, default=None)
        if index is None or cuttable[index] <= len(CUT_MARKER.format(n=cuttable[index])):
            break  # nothing left that a cut would shorten
        cut = min(cuttable[index], chars + len(CUT_MARKER.format(n=chars)) + 1)
        text = messages[index].content
        keep = len(text) - cut
        tail = max(keep // 2, _protected_tail(text))
        head, start = _line_bounds(text, keep - tail, len(text) - tail)
        cut = start - head
        marker = CUT_MARKER.format(n=cut)
        messages[index] = Message(messages[index].role, text[:head] + marker + text[start:])
        del cuttable[index]  # one marker per message: a second pass would cut the marker itself
        chars -= cut - len(marker)
        cut_total += cut
    return messages, cut_total


def _line_bounds(text: str, head: int, start: int, reach: int = 200) -> tuple[int, int]:
    """The cut text[head:start] widened to whole lines, when a line break is near: the model
    then reads no half lines."""
    before = head if text.startswith("\n", head) else text.rfind("\n", max(0, head - reach), head)
    after = start - 1 if text.startswith("\n", start - 1) else text.find("\n", start, start + reach)
    return (before if before > 0 else head), (after + 1 if after >= 0 else start)


def _protected_tail(text: str) -> int:
    """The length of the text's last line, where the templates say how to answer (a last line
    longer than any instruction is content, and only its end is kept)."""
    body = text.rstrip()
    return min(len(text) - (body.rfind("\n") + 1), INSTRUCTION_CHARS)


def fitted_from(sent: list[Message], original: list[Message]) -> bool:
    """Whether `sent` is `original` as `fit_to_context` may cut it (each message whole, or its
    middle replaced by the cut marker); a resumed run matches a recorded exchange with this."""
    if len(sent) != len(original):
        return False
    for s, o in zip(sent, original):
        if s == o:
            continue
        if s.role != o.role:
            return False
        marker = _CUT.search(s.content)
        if marker is None:
            return False
        head, tail = s.content[: marker.start()], s.content[marker.end():]
        n = int(marker.group(1))
        if len(head) + n + len(tail) != len(o.content) or not (o.content.startswith(head) and o.content.endswith(tail)):
            return False
    return True


