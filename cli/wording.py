"""How numbers read in every text magis-ray shows (terminal lines and pages alike): counted nouns,
money and durations, each said one way."""
from __future__ import annotations

IRREGULAR = {"summary": "summaries", "time": "times", "match": "matches"}


def count(n: int, word: str) -> str:
    """"1 run", "3 runs", "2 summaries": a number and its noun, singular or plural."""
    return f"{n:,} {word if n == 1 else IRREGULAR.get(word, word + 's')}"


def money(value: float) -> str:
    return f"${value:,.4f}"


def duration(seconds: float) -> str:
    """`40 s`, `1 min 30 s`, `2 h 5 min`: how long, in words a terminal line can hold."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"
