"""Each lane of a run (an actor, or one line of an actor's parallel work) emits its events in a
fixed order. A journal writes them to the run's log, or, when the log already holds the lane's
events (resume, replay), matches them against it instead: nothing is written twice, and a
recorded LLM answer is reused rather than paid for again."""
from __future__ import annotations

import threading
from collections import deque
from typing import Iterable, Protocol, Sequence

import msgspec

from magis_ray.events.errors import MagisError
from magis_ray.events.codec import new_event
from magis_ray.events.schema import (
    SCHEMA_VERSION, TERMINAL_EVENTS, AnyEvent, LLMExchanged, NewEvent, Recorded, RunResumed, RunStarted, TestsRan,
)

from magis_ray.store import EventLog

from magis_ray.actors.model.fitting import fitted_from


class Divergence(MagisError):
    """Re-execution produced an event other than the one the log holds for that lane."""

    def __init__(self, lane: str, expected: Recorded | None, got: AnyEvent | None):
        self.lane, self.expected, self.got = lane, expected, got
        want = type(expected.event).__name__ if expected else "nothing"
        have = type(got).__name__ if got is not None else "nothing"
        at = f" at version {expected.version}" if expected else ""
        super().__init__(f"lane {lane}{at}: the log holds {want}, re-execution gave {have}")


class RunClosed(MagisError):
    """The run's log already ends with RunFinished or RunFailed; only a RunResumed may follow."""


class EventSink(Protocol):
    def write(self, events: Sequence[NewEvent]) -> list[int]:
        """Append to the run's stream; the events' global positions."""


def comparable(event: AnyEvent) -> object:
    """What must be equal on re-execution: an exchange's request (its answer, tokens and
    timing come from the record); any other event whole."""
    if isinstance(event, LLMExchanged):
        return (event.purpose, event.task_id, event.attempt, event.messages)
    if isinstance(event, RunStarted):  # the schema a log was written at is no decision of the run
        return msgspec.structs.replace(event, schema_version=SCHEMA_VERSION)
    return event


def same_request(recorded: LLMExchanged, probe: LLMExchanged) -> bool:
    """The recorded exchange asked what `probe` asks: the same messages, or them as the gateway
    fitted them to the model's context (the log keeps what was sent, re-execution asks whole)."""
    if comparable(recorded) == comparable(probe):
        return True
    same_step = (recorded.purpose, recorded.task_id, recorded.attempt) == (probe.purpose, probe.task_id, probe.attempt)
    return bool(recorded.truncated_chars) and same_step and fitted_from(recorded.messages, probe.messages)


class Journal:
    def __init__(self, lane: str, sink: EventSink | None, recorded: Iterable[Recorded] = (), node: str = ""):
        """`sink` None verifies only: every event must match the record (replay)."""
        self.lane = lane
        self._node = node
        self._sink = sink
        self._recorded = deque(recorded)
        self.last_position = 0  # global position of the last event emitted or matched

    @property
    def pending(self) -> int:
        """Recorded events of this lane not yet matched by re-execution."""
        return len(self._recorded)

    @property
    def live(self) -> bool:
        """Whether what this lane does now is new: it writes, and has no recorded event left to match."""
        return self._sink is not None and not self._recorded

    def emit(self, event: AnyEvent, caused_by: str = "") -> str:
        """Record `event` (or match it with the log); returns its event id."""
        if self._recorded:
            rec = self._recorded.popleft()
            if comparable(rec.event) != comparable(event):
                raise Divergence(self.lane, rec, event)
            self.last_position = rec.position
            return rec.event_id
        if self._sink is None:
            raise Divergence(self.lane, None, event)
        fresh = new_event(event, self.lane, caused_by, self._node)
        self.last_position = self._sink.write([fresh])[-1]
        return fresh.event_id

    def recorded_exchange(self, probe: LLMExchanged) -> LLMExchanged | None:
        """The logged answer to the request `probe` describes, if this lane's log is there.
        When only verifying, a request the log does not hold is a divergence, never a model call."""
        return self._recorded_result(probe, lambda head: isinstance(head, LLMExchanged) and same_request(head, probe))

    def recorded_tests(self, probe: TestsRan) -> TestsRan | None:
        """The logged outcome of the test run `probe` describes (the same purpose, task, attempt,
        candidate and tested content), if this lane's log is there; tests never run twice."""
        key = (probe.purpose, probe.task_id, probe.attempt, probe.candidate, probe.patch_digest)
        return self._recorded_result(probe, lambda head: isinstance(head, TestsRan) and key == (
            head.purpose, head.task_id, head.attempt, head.candidate, head.patch_digest))

    def _recorded_result(self, probe, matches):
        if not self._recorded:
            if self._sink is None:
                raise Divergence(self.lane, None, probe)
            return None
        head = self._recorded[0]
        if not matches(head.event):
            raise Divergence(self.lane, head, probe)
        self._recorded.popleft()
        self.last_position = head.position
        return head.event


class RunWriter:
    """The one writer of a run's stream in a process. It appends at the version it last saw, so a
    second writer (the actors of a killed driver, still finishing a call, when the run has been
    resumed elsewhere) is refused by the store instead of interleaving with this one. A log that
    ended (RunFinished or RunFailed) takes nothing more until a RunResumed reopens it."""

    def __init__(self, store: EventLog, run_id: str):
        self._store = store
        self._run_id = run_id
        self._lock = threading.Lock()
        self._version: int | None = None  # unknown until the first write
        self._closed = False

    def write(self, events: Sequence[NewEvent], fence: int = 0) -> list[int]:
        if not events:
            return []
        with self._lock:
            return self._write(events, fence)

    def end(self, events: Sequence[NewEvent], fence: int = 0) -> bool:
        """Append the run's ending `events` if its log has begun, and say so. A log that has not
        begun is closed instead, so that it never does: a run stopped before its RunStarted is no
        run at all, and its supervisor's late first events are refused."""
        with self._lock:
            self._load()
            if self._version == 0:
                self._closed = True
                return False
            self._write(events, fence)
            return True

    def _load(self) -> None:
        if self._version is None:
            self._version = self._store.version(self._run_id)
            last = self._store.read(self._run_id, self._version - 1) if self._version else []
            self._closed = bool(last) and isinstance(last[-1].event, TERMINAL_EVENTS)

    def _write(self, events: Sequence[NewEvent], fence: int) -> list[int]:
        self._load()
        if self._closed and not isinstance(events[0].event, RunResumed):
            raise RunClosed(f"run {self._run_id} has ended; refusing {type(events[0].event).__name__}")
        recorded = self._store.append(self._run_id, self._version, events, fence)
        self._version = recorded[-1].version
        self._closed = isinstance(recorded[-1].event, TERMINAL_EVENTS)
        return [r.position for r in recorded]


def lanes_of(recorded: Iterable[Recorded]) -> dict[str, list[Recorded]]:
    """The log split by lane, each in version order."""
    lanes: dict[str, list[Recorded]] = {}
    for rec in recorded:
        lanes.setdefault(rec.actor, []).append(rec)
    return lanes
