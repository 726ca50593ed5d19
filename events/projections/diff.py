"""The repository-level diff: each task's final per-file diff, made against the base blob."""
from __future__ import annotations

from .state import RunView


def final_diff(view: RunView) -> str:
    """"" for a run that ended `no_patch`: a combined diff that did not apply is no patch."""
    if view.finished is not None and view.finished.outcome == "no_patch":
        return ""
    patches = [t.final_patch for t in view.tasks.values()]
    chosen = sorted((p for p in patches if p is not None and p.diff), key=lambda p: p.path)
    return "".join(p.diff if p.diff.endswith("\n") else p.diff + "\n" for p in chosen)


def changed_files(view: RunView) -> list[str]:
    return sorted({p.path for t in view.tasks.values() if (p := t.final_patch) is not None and p.diff})
