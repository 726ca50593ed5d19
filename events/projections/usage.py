"""Tokens, calls, cost and time per role, per role and model, and per step, from the recorded LLM
exchanges, and the
time spent running tests (a run without test runs has exactly the metrics it always had)."""
from __future__ import annotations

from collections import defaultdict

from magis_ray.events.schema import LLMExchanged, TestsRan

from .state import RunView
from .tests import counted


def role_of(actor: str) -> str:
    """ "developer:T1" -> "developer"."""
    return actor.split(":", 1)[0]


def _blank() -> dict[str, float]:
    return {"calls": 0, "failed_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0, "llm_seconds": 0.0}


def metrics(view: RunView) -> dict:
    by_role: dict[str, dict[str, float]] = defaultdict(_blank)
    by_step: dict[str, dict[str, float]] = defaultdict(_blank)
    by_role_model: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(_blank))
    total = _blank()
    for rec in view.exchanges:
        x: LLMExchanged = rec.event  # type: ignore[assignment]
        for bucket in (by_role[role_of(rec.actor)], by_role_model[role_of(rec.actor)][x.model], by_step[x.purpose], total):
            bucket["calls"] += 1
            bucket["failed_calls"] += 1 if x.error else 0
            bucket["prompt_tokens"] += x.prompt_tokens
            bucket["completion_tokens"] += x.completion_tokens
            bucket["cost_usd"] += x.cost_usd
            bucket["llm_seconds"] += x.latency_s
    for rec in view.timeline:
        if isinstance(rec.event, TestsRan) and counted(rec.event):
            for bucket in (by_role[role_of(rec.actor)], by_step[f"tests:{rec.event.purpose}"], total):
                bucket["test_runs"] = bucket.get("test_runs", 0) + 1
                bucket["test_seconds"] = round(bucket.get("test_seconds", 0.0) + rec.event.duration_s, 3)
    times = [r.time for r in view.timeline]
    total["wall_seconds"] = (max(times) - min(times)) if times else 0.0
    total["events"] = len(view.timeline)
    for bucket in [total, *by_role.values(), *by_step.values(), *(b for models in by_role_model.values() for b in models.values())]:
        bucket["cost_usd"] = round(bucket["cost_usd"], 6)
        bucket["llm_seconds"] = round(bucket["llm_seconds"], 3)
    return {
        "total": total, "by_role": dict(sorted(by_role.items())), "by_step": dict(sorted(by_step.items())),
        # the model each role's requests went to (a settings file's [models] gives a role its own)
        "by_role_model": {role: dict(sorted(models.items())) for role, models in sorted(by_role_model.items())},
    }
