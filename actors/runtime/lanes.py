"""One Asker per lane of a run, created on first use, each with that lane's logged events."""
from __future__ import annotations

import threading

from magis_ray.events.schema import Recorded

from magis_ray.actors.model.asking import Asker, LLMPort
from magis_ray.actors.runtime.journal import EventSink, Journal


class RoleLLM:
    """The model port as one lane sees it: each request says which role asks ("developer" for the
    lanes "developer:T1" and "developer:T1:meeting"), so the gateway can route it to that role's
    model."""

    def __init__(self, llm: LLMPort, role: str):
        self._llm, self.role = llm, role

    def exchange(self, **request):
        return self._llm.exchange(**request, role=self.role)


class Lanes:
    def __init__(self, run_id: str, sink: EventSink | None, llm: LLMPort, recorded: dict[str, list[Recorded]] | None = None,
                 node: str = ""):
        self.run_id = run_id
        self._node = node
        self._sink = sink
        self._llm = llm
        self._recorded = recorded or {}
        self._askers: dict[str, Asker] = {}
        self._lock = threading.Lock()

    def __call__(self, lane: str, temperature: float | None = None) -> Asker:
        """The lane's asker; `temperature` (set by the lane's first use) samples its answers."""
        with self._lock:
            asker = self._askers.get(lane)
            if asker is None:
                journal = Journal(lane, self._sink, self._recorded.get(lane, ()), self._node)
                asker = self._askers[lane] = Asker(journal, RoleLLM(self._llm, lane.split(":", 1)[0]), self.run_id,
                                                   temperature=temperature)
            return asker

    def unmatched(self) -> list[Recorded]:
        """Logged events that re-execution has not reached (replay reports the first one)."""
        reached = {lane: asker.journal.pending for lane, asker in self._askers.items()}
        left = []
        for lane, events in self._recorded.items():
            pending = reached.get(lane, len(events))
            left.extend(events[len(events) - pending :])
        return sorted(left, key=lambda r: r.version)
