"""Two runs side by side, aligned by step (the k-th event of a lane beside the other run's k-th
event of that lane), with the first divergence found as `magis-ray replay` finds it: the second
run's events, in their order, are matched against the first run's lanes by the replay journal
itself (the same comparison of requests, test runs and decisions, apart from times and ids)."""
from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from magis_ray.actors.runtime.journal import Divergence, Journal, lanes_of
from magis_ray.events.history import effective
from magis_ray.events.schema import LLMExchanged, Recorded, RunStarted, TestsRan

from ..divergence import describe_side, first_difference


@dataclass(frozen=True)
class Row:
    lane: str
    step: int  # 1-based within the lane
    left: Recorded | None
    right: Recorded | None
    same: bool


@dataclass
class Comparison:
    rows: list[Row]
    first: int | None  # index of the first divergence in rows (None: the runs match)
    settings: list[tuple[str, object, object]] = field(default_factory=list)  # what their RunStarted differ in
    left_events: int = 0  # A's events in effect (its RunStarted among them): what "no divergence" covers

    @property
    def divergence(self) -> Row | None:
        return None if self.first is None else self.rows[self.first]

    @property
    def matching(self) -> int:
        """Events the second run reproduced before the divergence (replay's count)."""
        return sum(1 for row in self.rows[: self.first if self.first is not None else len(self.rows)] if row.same)

    def log_side(self) -> str:
        row = self.divergence
        return describe_side(row.left.event if row and row.left else None)

    def other_side(self) -> str:
        row = self.divergence
        return describe_side(row.right.event if row and row.right else None)

    def where(self) -> str:
        """Where two exchanges' prompts part, as replay says it ("" when not two exchanges)."""
        row = self.divergence
        if row is None or row.left is None or row.right is None:
            return ""
        return first_difference(row.left.event, row.right.event)


def replay_matches(logged: Recorded, event) -> bool:
    """Whether replay would take `event` for the logged one: asked through the replay journal."""
    journal = Journal(logged.actor, None, [logged])
    try:
        if isinstance(event, LLMExchanged):
            journal.recorded_exchange(event)
        elif isinstance(event, TestsRan):
            journal.recorded_tests(event)
        else:
            journal.emit(event)
    except Divergence:
        return False
    return True


def compare(left: list[Recorded], right: list[Recorded]) -> Comparison:
    """`left` plays the log, `right` the re-execution. Their RunStarted events (settings, model,
    issue) are compared field by field instead: they differ whenever the runs were set up apart."""
    a = [r for r in effective(left) if not isinstance(r.event, RunStarted)]
    b = [r for r in effective(right) if not isinstance(r.event, RunStarted)]
    lanes = {lane: list(events) for lane, events in lanes_of(a).items()}
    taken: dict[str, int] = {}
    rows: list[Row] = []
    first = None
    for rec in b:
        step = taken.get(rec.actor, 0)
        taken[rec.actor] = step + 1
        logged = lanes.get(rec.actor, [])
        head = logged[step] if step < len(logged) else None
        row = Row(rec.actor, step + 1, head, rec, head is not None and replay_matches(head, rec.event))
        if not row.same and first is None:
            first = len(rows)
        rows.append(row)
    left_over = sorted(
        ((step, r) for lane, events in lanes.items() for step, r in enumerate(events, 1) if step > taken.get(lane, 0)),
        key=lambda pair: pair[1].version,
    )
    for step, rec in left_over:
        if first is None:
            first = len(rows)  # replay: a logged event re-execution never reached
        rows.append(Row(rec.actor, step, rec, None, False))
    return Comparison(rows, first, settings_differences(_started(left), _started(right)), len(effective(left)))


def _started(events: list[Recorded]) -> RunStarted | None:
    return next((r.event for r in events if isinstance(r.event, RunStarted)), None)


def settings_differences(a: RunStarted | None, b: RunStarted | None) -> list[tuple[str, object, object]]:
    if a is None or b is None:
        return [] if a is b else [("run started", a is not None, b is not None)]
    flat_a, flat_b = _flatten(msgspec.to_builtins(a)), _flatten(msgspec.to_builtins(b))
    return [(k, flat_a.get(k), flat_b.get(k)) for k in sorted(set(flat_a) | set(flat_b)) if flat_a.get(k) != flat_b.get(k)]


def _flatten(value: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, v in value.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = v
    return out
