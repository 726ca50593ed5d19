"""A deterministic stand-in for the model that plays every step of a MAGIS run from a list of
intended fixes: it judges relevant exactly the files it has fixes for, locates their ranges,
writes their code and approves (or rejects, as told). Used with the scripted server by tests,
benchmarks and demos; it reads our own prompt templates' wording, nothing else."""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Callable

from magis_ray.events.schema import Edit

from magis_ray.actors.model.scripted_server import Rule, ScriptedRequest

_PATH_PATTERNS = {
    "summarize_file": r"Describe the file `([^`]+)`",
    "commit_message": r"The file `([^`]+)` changed",
    "judge_relevance": r"Candidate file `([^`]+)`",
    "define_task": r"File `([^`]+)`, described",
    "design_developer": r"on file `([^`]+)`",
    "meeting_speak": r"on `([^`]+)`\)",
    "design_qa": r"on `([^`]+)`\)",
    "locate_lines": r"The file `([^`]+)`",
    "write_code": r"In the file `([^`]+)`",
    "review_patch": r"task on `([^`]+)`",
    "review_patch_tested": r"task on `([^`]+)`",
}


def path_in(request: ScriptedRequest) -> str:
    pattern = _PATH_PATTERNS.get(request.purpose)
    match = re.search(pattern, request.text) if pattern else None
    return match.group(1) if match else ""


@dataclass
class ScriptedTeam:
    """fixes: path -> the Edits (in base line numbers) the team should make to that file.

    `review(path, attempt) -> (approved, comment)` decides the QA's verdicts (default: approve).
    `stages`: the plan's stages as lists of paths (default: every task in one stage).
    `retries`: path -> the Edits of the later writes to that path (a retry, or another candidate's
    first try), in the order they are asked for (the last one repeats).
    `reproductions`: the reproduction tests written, in order (the last one repeats); none: no
    answer to that step.
    `delay_s`: how long each answer takes, as a model's do; `slow`: the purposes whose answers
    take it (none named: every answer), so a test holds a run only where it needs it held.
    """

    fixes: dict[str, list[Edit]]
    review: Callable[[str, int], tuple[bool, str]] = lambda path, attempt: (True, "Looks right.")
    stages: list[list[str]] | None = None
    delay_s: float | None = None
    slow: tuple[str, ...] = ()
    retries: dict[str, list[list[Edit]]] = field(default_factory=dict)
    reproductions: list[str] = field(default_factory=list)
    _attempts: dict[str, int] = field(default_factory=dict)
    _writes: dict[str, int] = field(default_factory=dict)
    # the server answers on several threads (candidates ask at once): counting is one step
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _count(self, counter: dict[str, int], key: str) -> int:
        with self._lock:
            counter[key] = counter.get(key, 0) + 1
            return counter[key]

    def __call__(self, request: ScriptedRequest) -> Rule | None:
        answer = self.answer(request)
        delayed = not self.slow or request.purpose in self.slow
        return None if answer is None else Rule(json=answer, delay_s=self.delay_s if delayed else 0.0)

    def answer(self, request: ScriptedRequest) -> dict | None:
        path = path_in(request)
        fixes = self.fixes.get(path, [])
        match request.purpose:
            case "summarize_file":
                return {"summary": f"The module {path}."}
            case "commit_message":
                return {"message": f"Updates {path}."}
            case "judge_relevance":
                return {"relevant": path in self.fixes, "reason": "scripted"}
            case "define_task":
                return {"needed": path in self.fixes, "task": f"Fix the issue in {path}."}
            case "design_developer" | "design_qa":
                return {"name": f"Expert on {path}", "profile": "Knows this module well."}
            case "meeting_open" | "meeting_speak" | "meeting_close":
                return {"text": "Agreed."}
            case "make_plan":
                return {"stages": self._stages(request), "rationale": "scripted"}
            case "locate_lines":
                return {"ranges": [{"start": e.range.start, "end": e.range.end} for e in fixes], "reason": "scripted"}
            case "write_code":
                write = self._count(self._writes, path)
                later = self.retries.get(path, [])
                edits = fixes if write == 1 or not later else later[min(write - 2, len(later) - 1)]
                return {"edits": [{"start": e.range.start, "end": e.range.end, "new_code": e.new_code} for e in edits]}
            case "write_reproduction":
                if not self.reproductions:
                    return None
                tries = self._count(self._writes, "<reproduction>")
                return {"content": self.reproductions[min(tries, len(self.reproductions)) - 1]}
            case "choose_candidate":
                offered = re.search(r"one of ([\d, ]+)", request.text)
                return {"candidate": int(offered.group(1).split(",")[0]), "reason": "scripted: the first offered"} if offered else None
            case "review_patch" | "review_patch_tested":
                attempt = self._count(self._attempts, path)
                approved, comment = self.review(path, attempt)
                return {"approved": approved, "comment": comment}
        return None

    def _stages(self, request: ScriptedRequest) -> list[list[str]]:
        task_of = dict((path, tid) for tid, path in re.findall(r"- (T\d+) on `([^`]+)`", request.text))
        if self.stages is None:
            return [list(task_of.values())]
        return [[task_of[p] for p in stage if p in task_of] for stage in self.stages]
