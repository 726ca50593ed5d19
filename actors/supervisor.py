"""The supervisor of one run (the Manager's run): creates the Custodian, the Developers and their
QA Engineers as actors, runs the plan's stages, and recreates a role actor that dies, its lanes
rebuilt from the log so that nothing it recorded is redone or paid for again."""
from __future__ import annotations

from typing import Callable

import ray
import structlog

from magis_ray.events.schema import Recorded, RunSettings, TaskFinished

from .issue import IssueRecord
from .journal import lanes_of
from .repository import RepoSnapshot
from .roles.developer import Assignment
from .services import lanes_for
from .team import Team

log = structlog.get_logger()
# How often a role actor that died is recreated before its work counts as failed.
ACTOR_RETRIES = 2


def lanes_named(recorded: dict[str, list[Recorded]], *names: str) -> dict[str, list[Recorded]]:
    """The recorded lanes an actor needs: exactly these names, or below one ("custodian:...")."""
    return {lane: events for lane, events in recorded.items() if lane in names or lane.startswith(tuple(n + ":" for n in names))}


class Recreating:
    """Runs a call on a role actor; if the actor dies, makes a new one from the log and calls again."""

    def __init__(self, run_id: str, store, make: Callable[[dict[str, list[Recorded]]], tuple]):
        self._run_id = run_id
        self._store = store
        self._make = make  # recorded lanes -> (object ref of the call, actors to end afterwards)

    def start(self, recorded: dict[str, list[Recorded]]) -> None:
        self._ref, self._actors = self._make(recorded)

    def result(self):
        for retry in range(ACTOR_RETRIES + 1):
            try:
                return ray.get(self._ref)
            except ray.exceptions.ActorDiedError as exc:
                if retry == ACTOR_RETRIES:
                    raise
                log.warning("role actor died; recreating it from the log", run=self._run_id, error=str(exc).splitlines()[0])
                self.end()
                self.start(lanes_of(ray.get(self._store.read.remote(self._run_id))))
        raise AssertionError("unreachable")

    def end(self) -> None:
        for actor in self._actors:
            ray.kill(actor)
        self._actors = ()


class SupervisorService:
    def __init__(self, run_id: str, issue: IssueRecord, settings: RunSettings, repo_path: str,
                 store, gateway, recorded: list[Recorded] | None = None):
        self._run_id = run_id
        self._issue = issue
        self._settings = settings
        self._repo_path = repo_path
        self._store = store
        self._gateway = gateway
        self._recorded = lanes_of(recorded or [])

    def run(self):
        snapshot = RepoSnapshot.open(self._repo_path, self._issue.base_commit)
        team = Team(
            issue=self._issue, settings=self._settings, snapshot=snapshot,
            asker_for=lanes_for(self._run_id, self._store, self._gateway, self._recorded),
            custodian=RemoteLocator(self, snapshot.commit_id), workforce=RayWorkforce(self),
        )
        return team.run()


class RemoteLocator:
    """The Custodian as an actor beside the repository; one call per run."""

    def __init__(self, supervisor: SupervisorService, commit_id: str):
        self._s = supervisor
        self._commit_id = commit_id

    def locate(self, issue_text: str, memory_before: int | None = None):
        from .remote import actor_classes

        s = self._s

        def make(recorded):
            custodian = actor_classes()["custodian"].remote(
                s._run_id, s._repo_path, self._commit_id, s._issue.repo, s._settings, s._store, s._gateway,
                lanes_named(recorded, "custodian"),
            )
            return custodian.locate.remote(issue_text, memory_before), (custodian,)

        call = Recreating(s._run_id, s._store, make)
        call.start(s._recorded)
        try:
            return call.result()
        finally:
            call.end()


class RayWorkforce:
    """Each task gets a Developer actor and a QA actor that live as long as the task."""

    def __init__(self, supervisor: SupervisorService):
        self._s = supervisor

    def run_stage(self, assignments: list[Assignment]) -> list[TaskFinished]:
        calls = [Recreating(self._s._run_id, self._s._store, self._maker(work)) for work in assignments]
        for call in calls:
            call.start(self._s._recorded)
        try:
            return [call.result() for call in calls]
        finally:
            for call in calls:
                call.end()

    def _maker(self, work: Assignment):
        from .remote import actor_classes

        s, tid = self._s, work.task.task_id

        def make(recorded):
            classes = actor_classes()
            qa = classes["qa"].remote(
                s._run_id, work.issue_text, work.task.description, s._store, s._gateway, lanes_named(recorded, f"qa:{tid}")
            )
            developer = classes["developer"].remote(
                s._run_id, s._store, s._gateway, {k: v for k, v in recorded.items() if k == f"developer:{tid}"}
            )
            return developer.run.remote(work, qa), (developer, qa)

        return make
