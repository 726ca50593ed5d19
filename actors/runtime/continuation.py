"""Where a cut-off run goes on from: the part of its log a resumed run re-lives (matching, not
re-writing, each lane's events and reusing every recorded answer), and what it supersedes."""
from __future__ import annotations

from dataclasses import dataclass

from magis_ray.events.errors import BadInput
from magis_ray.events.history import effective
from magis_ray.events.schema import LLMExchanged, Recorded, RunFailed, RunFinished, RunResumed, RunStarted

from magis_ray.actors.model.failures import unanswered


class CannotResume(BadInput):
    pass


@dataclass(frozen=True)
class ResumePoint:
    started: RunStarted
    started_position: int
    kept_version: int  # the log up to here stands; what follows it is superseded
    recorded: list[Recorded]  # the history the resumed run re-lives
    superseded: int

    def marker(self) -> RunResumed:
        return RunResumed(kept_version=self.kept_version, superseded=self.superseded)


def resume_point(events: list[Recorded]) -> ResumePoint:
    history = effective(events)
    if not history or not isinstance(history[0].event, RunStarted):
        raise CannotResume("the run's log does not start with RunStarted")
    last = history[-1]
    if isinstance(last.event, RunFinished):
        raise CannotResume(f"run {last.run_id} has already finished ({last.event.outcome})")
    kept = last.version
    if isinstance(last.event, RunFailed):
        if not last.event.resumable:
            raise CannotResume(f"run {last.run_id} failed for good: {last.event.reason}")
        kept = last.version - 1
        if last.event.error_type == "ModelUnavailable":
            # Retry from the first request the model did not answer; what followed it is redone.
            asked_again = [r.version for r in history if isinstance(r.event, LLMExchanged) and unanswered(r.event)]
            kept = min(asked_again, default=last.version) - 1
    recorded = [r for r in history if r.version <= kept]
    return ResumePoint(
        started=history[0].event, started_position=history[0].position, kept_version=kept, recorded=recorded,
        superseded=len(history) - len(recorded),
    )
