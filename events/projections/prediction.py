"""The SWE-bench prediction line of a run."""
from __future__ import annotations

from .diff import final_diff
from .state import RunView


def prediction(view: RunView, model_name: str | None = None) -> dict[str, str]:
    started = view.started
    return {
        "instance_id": started.instance_id if started else view.run_id,
        "model_name_or_path": model_name or (f"magis-ray/{started.settings.model}" if started else "magis-ray"),
        "model_patch": final_diff(view),
    }
