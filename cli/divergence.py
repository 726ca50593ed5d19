"""How replay shows a divergence: both sides of the first differing event, and where two
prompts part."""
from __future__ import annotations

import json


def describe_side(event) -> str:
    """An event as one JSON line, long texts cut so both sides fit on a screen."""
    if event is None:
        return "(nothing)"
    from magis_ray.events.codec import to_builtins

    def cut(value):
        if isinstance(value, str):
            return value if len(value) <= 300 else value[:300] + f"... ({len(value) - 300} more characters)"
        if isinstance(value, list):
            return [cut(v) for v in value]
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        return value

    return json.dumps(cut(to_builtins(event)))


def first_difference(logged, replayed) -> str:
    """Where two exchanges' prompts part: the message and the text around the first change."""
    from magis_ray.events.schema import LLMExchanged

    if not (isinstance(logged, LLMExchanged) and isinstance(replayed, LLMExchanged)):
        return ""
    for index, (a, b) in enumerate(zip(logged.messages, replayed.messages)):
        if a.content != b.content:
            at = next((i for i, (x, y) in enumerate(zip(a.content, b.content)) if x != y), min(len(a.content), len(b.content)))
            return f"message {index + 1} ({a.role}) at character {at}: log {a.content[max(0, at - 30):at + 40]!r}, replay {b.content[max(0, at - 30):at + 40]!r}"
    if len(logged.messages) != len(replayed.messages):
        return f"{len(logged.messages)} messages in the log, {len(replayed.messages)} in the replay"
    return ""
