"""Why a run ended without a patch, in one line, from its log as the audit has it: the step that
ended it and the reason. The terminal summary of `submit` and `apply`'s refusal print it."""
from __future__ import annotations

from magis_ray.events import schema as ev

from .state import RunView


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _last_step_failure(view: RunView, **where: str) -> ev.StepFailed | None:
    failures = [r.event for r in view.timeline if isinstance(r.event, ev.StepFailed)
                and all(getattr(r.event, k) == v for k, v in where.items())]
    return failures[-1] if failures else None


def ending(view: RunView) -> str:
    """"" for a run that is patched or still running; else "STEP: REASON" in one line."""
    if view.failed is not None:
        kind = f" ({view.failed.error_type})" if view.failed.error_type else ""
        return _one_line(f"run failed{kind}: {view.failed.reason}")
    if view.finished is None or view.finished.outcome != "no_patch":
        return ""
    if view.located is not None and not view.located.paths:
        step = _last_step_failure(view)
        why = f" (last step failure: {step.purpose}: {step.reason})" if step else ""
        return _one_line(f"Repository Custodian: located no file to change for the issue{why}")
    if not view.tasks and view.located is not None:
        return _one_line(f"Manager: none of the located files needs a change ({', '.join(view.located.paths)})")
    failed = [t for t in view.tasks.values() if t.finished is not None and t.finished.status == "failed"]
    if failed and len(failed) == len(view.tasks):
        return _one_line("Developer: every task failed: " + "; ".join(
            f"{t.task_id} ({t.path}): {t.finished.reason or 'failed'}" for t in failed))
    return _one_line(view.finished.summary or "no patch")
