"""What a run's page shows beyond the audit: each decision beside the model exchanges that led to
it, the memory the Custodian reused, and a diff split into lines by kind. Pure folds of a RunView."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from magis_ray.events import schema as ev

from .usage import role_of
from .state import RunView


@dataclass
class Step:
    """One row of the timeline: a decision (or an exchange that led to none yet) and its exchanges."""

    record: ev.Recorded
    exchanges: list[ev.Recorded] = field(default_factory=list)

    @property
    def role(self) -> str:
        return role_of(self.record.actor)

    @property
    def prompt_tokens(self) -> int:
        return sum(x.event.prompt_tokens for x in self.exchanges)

    @property
    def completion_tokens(self) -> int:
        return sum(x.event.completion_tokens for x in self.exchanges)

    @property
    def cost_usd(self) -> float:
        return sum(x.event.cost_usd for x in self.exchanges)

    @property
    def latency_s(self) -> float:
        return sum(x.event.latency_s for x in self.exchanges)


def steps(view: RunView) -> list[Step]:
    """The timeline with each lane's exchanges folded into the lane's next decision: a lane asks
    the model (once, or again after an unusable answer), then records what it decided. A lane's
    decision also takes what its sub-lanes asked and left undecided: the Manager asks about each
    file on "manager:PATH" in parallel, then records every task itself, on "manager". Exchanges
    no decision followed (yet) stay rows of their own."""
    pending: dict[str, list[ev.Recorded]] = {}
    rows: list[Step] = []
    for rec in view.timeline:
        if isinstance(rec.event, ev.LLMExchanged):
            pending.setdefault(rec.actor, []).append(rec)
        else:
            asked = pending.pop(rec.actor, [])
            for lane in [lane for lane in pending if lane.startswith(rec.actor + ":")]:
                asked += pending.pop(lane)
            rows.append(Step(rec, sorted(asked, key=lambda x: x.version)))
    rows += [Step(x, [x]) for left in pending.values() for x in left]
    return sorted(rows, key=lambda s: s.record.version)


_HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def diff_lines(diff: str) -> list[tuple[str, str]]:
    """(kind, line) for each line: file (a file's header), hunk, add, del or ctx. A hunk's lines
    are counted from its header, so a removed "-- comment" is never taken for a file header."""
    out = []
    old = new = 0  # lines of the current hunk still to come
    for line in diff.splitlines():
        hunk = _HUNK.match(line)
        if hunk:
            old, new = int(hunk.group(1) or 1), int(hunk.group(2) or 1)
            kind = "hunk"
        elif line.startswith("\\"):
            kind = "ctx"  # "\\ No newline at end of file"
        elif old <= 0 and new <= 0:
            kind = "file"
        elif line.startswith("+"):
            kind, new = "add", new - 1
        elif line.startswith("-"):
            kind, old = "del", old - 1
        else:
            kind, old, new = "ctx", old - 1, new - 1
        out.append((kind, line))
    return out
