"""Replay: re-execute a finished run's team in this process with every answer taken from the
log (no model is called, nothing is written) and report the first event that differs."""
from __future__ import annotations

from dataclasses import dataclass

from magis_ray.events.errors import BadInput
from magis_ray.events.history import effective
from magis_ray.events.projections import final_diff, fold
from magis_ray.events.schema import TERMINAL_EVENTS, Recorded, RunStarted
from magis_ray.events.summaries import SummaryMemory

from magis_ray.actors.runtime.forwarding import delegating
from magis_ray.actors.runtime.inprocess import ThreadWorkforce
from magis_ray.actors.runtime.issue import IssueRecord
from magis_ray.actors.runtime.journal import Divergence, lanes_of
from magis_ray.actors.runtime.lanes import Lanes
from magis_ray.actors.code.repository import RepoSnapshot
from magis_ray.actors.roles.custodian import Custodian
from magis_ray.actors.runtime.team import Team


class CannotReplay(BadInput):
    pass


class NoModel:
    """Replay never asks the model: a request the log cannot answer is a divergence first."""

    def exchange(self, **request):
        raise AssertionError("replay asked the model")


class MemoryAsOf(delegating(SummaryMemory, "_memory")):
    """The summary memory as the run saw it (the Custodian reads it before the run's start
    position); replay writes nothing."""

    def __init__(self, memory: SummaryMemory):
        self._memory = memory

    def put_summary(self, *entry, **named) -> None:
        pass


@dataclass(frozen=True)
class ReplayReport:
    events: int  # how many logged events re-execution reproduced
    divergence: Divergence | None


def issue_of(started: RunStarted) -> IssueRecord:
    return IssueRecord(
        instance_id=started.instance_id, repo=started.repo, base_commit=started.base_commit,
        problem_statement=started.problem_statement, hints_text=started.hints_text, repo_path=started.repo_path or None,
        version=started.version, environment_setup_commit=started.environment_setup_commit, issue_url=started.issue_url,
    )


def replay_run(events: list[Recorded], memory: SummaryMemory, repo_path: str | None = None) -> ReplayReport:
    history = effective(events)
    if not history or not isinstance(history[0].event, RunStarted):
        raise CannotReplay("the run's log does not start with RunStarted")
    if not isinstance(history[-1].event, TERMINAL_EVENTS) or history[-1].actor != "supervisor":
        raise CannotReplay(f"run {history[0].run_id} has not finished; resume it first")
    started: RunStarted = history[0].event
    path = repo_path or started.repo_path
    if not path:
        raise CannotReplay("the log does not say where the repository is; give --repo")
    snapshot = RepoSnapshot.open(path, started.base_commit)
    lanes = Lanes(history[0].run_id, None, NoModel(), lanes_of(history))
    team = Team(
        issue=issue_of(started), settings=started.settings, snapshot=snapshot, asker_for=lanes,
        custodian=Custodian(snapshot, MemoryAsOf(memory), lanes, started.repo, started.settings),
        workforce=ThreadWorkforce(lanes),
        # the diff as the log held it before its end: what the run checked before it ended
        projected_diff=lambda: final_diff(fold(r for r in history if not isinstance(r.event, TERMINAL_EVENTS))),
    )
    try:
        team.run()
    except Divergence as divergence:
        return ReplayReport(events=len(history) - len(lanes.unmatched()), divergence=divergence)
    left = lanes.unmatched()
    if left:
        return ReplayReport(events=len(history) - len(left), divergence=Divergence(left[0].actor, left[0], None))
    return ReplayReport(events=len(history), divergence=None)
