"""The supervisor of one run (the Manager's run): creates the Custodian, the Developers and their
QA Engineers as actors, runs the plan's stages, and recreates a role actor that dies, its lanes
rebuilt from the log so that nothing it recorded is redone or paid for again."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import ray
import structlog

from magis_ray.events.schema import Recorded, RunSettings, TaskDefined

from magis_ray.actors.runtime.issue import IssueRecord
from magis_ray.actors.runtime.journal import lanes_of
from magis_ray.actors.code.repository import RepoSnapshot
from magis_ray.actors.roles.developer import Assignment, TaskResult, candidate_numbers, lane_suffix
from magis_ray.actors.runtime.services import lanes_for
from magis_ray.actors.runtime.team import Team

log = structlog.get_logger()
# How often a role actor that died is recreated before its work counts as failed.
ACTOR_RETRIES = 2


def lanes_named(recorded: dict[str, list[Recorded]], *names: str) -> dict[str, list[Recorded]]:
    """The recorded lanes an actor needs: exactly these names, or below one ("custodian:...")."""
    return {lane: events for lane, events in recorded.items() if lane in names or lane.startswith(tuple(n + ":" for n in names))}


@dataclass(frozen=True)
class RoleActors:
    """How a supervisor makes its children, handed in by remote.py (the one place Ray is applied),
    so that the supervisor never imports it back. A role's takes the service's arguments and
    returns an actor handle; `bench` takes the run's BenchSetup and returns its test bench (a
    roles.testing.Bench whose builds and test runs are tasks on this node)."""

    custodian: Callable[..., object]
    developer: Callable[..., object]
    qa: Callable[..., object]
    bench: Callable[..., object]


class Recreating:
    """A call on role actors that, if an actor dies, makes new ones from the log and calls again.

    make(recorded lanes) -> the actors; call(actors) -> the call's object ref."""

    def __init__(self, run_id: str, store, make: Callable[[dict], tuple], call: Callable[[tuple], object], actors: tuple):
        self._run_id, self._store, self._make, self._call = run_id, store, make, call
        self._actors = actors  # made ahead of time, so their processes start while other work goes on
        self._ref = call(actors)

    def result(self):
        for retry in range(ACTOR_RETRIES + 1):
            try:
                return ray.get(self._ref)
            except ray.exceptions.RayActorError as exc:  # died, or its node crashed (unavailable)
                if retry == ACTOR_RETRIES:
                    raise
                log.warning("role actor died; recreating it from the log", run=self._run_id, error=str(exc).splitlines()[0])
                self.end()
                self._actors = self._make(lanes_of(ray.get(self._store.read.remote(self._run_id))))
                self._ref = self._call(self._actors)
        raise AssertionError("unreachable")

    def end(self) -> None:
        for actor in self._actors:
            ray.kill(actor)
        self._actors = ()


class SupervisorService:
    def __init__(self, run_id: str, issue: IssueRecord, settings: RunSettings, repo_path: str,
                 store, gateway, recorded: list[Recorded] | None = None, *, roles: RoleActors, fence: int = 0):
        self.run_id = run_id
        self.issue = issue
        self.settings = settings
        self.repo_path = repo_path
        self.store = store
        self.gateway = gateway
        self.recorded = lanes_of(recorded or [])
        self.roles = roles
        self.fence = fence  # the epoch of the driver's lease on the run: every write carries it

    def projected_diff(self) -> str:
        from magis_ray.events.projections import final_diff, fold

        return final_diff(fold(ray.get(self.store.read.remote(self.run_id))))

    def run(self):
        snapshot = RepoSnapshot.open(self.repo_path, self.issue.base_commit)
        custodian = RemoteLocator(self, snapshot.commit_id)
        self.bench = self._bench() if self.settings.tests else None
        workforce = RayWorkforce(self)
        try:
            team = Team(
                issue=self.issue, settings=self.settings, snapshot=snapshot,
                asker_for=lanes_for(self.run_id, self.store, self.gateway, self.recorded, self.fence),
                custodian=custodian, workforce=workforce, projected_diff=self.projected_diff, bench=self.bench,
            )
            return team.run()
        finally:
            custodian.end()
            workforce.end()

    def _bench(self):
        """The run's test bench: no process of its own, its builds and test runs are tasks."""
        from magis_ray.actors.runtime.bench import BenchSetup  # the execution layer: only for a run with tests

        return self.roles.bench(BenchSetup.of(self.issue, self.settings, self.repo_path))


class RemoteLocator:
    """The Custodian as an actor beside the repository, started at once: its process comes up
    while the run is being set up."""

    def __init__(self, supervisor: SupervisorService, commit_id: str):
        self._s = supervisor
        self._commit_id = commit_id
        self._actors = self._make(supervisor.recorded)

    def _make(self, recorded) -> tuple:
        s = self._s
        return (s.roles.custodian(
                s.run_id, s.repo_path, self._commit_id, s.issue.repo, s.settings, s.store, s.gateway, lanes_named(recorded, "custodian"), s.fence,
        ),)

    def locate(self, issue_text: str, memory_before: int | None = None):
        call = Recreating(self._s.run_id, self._s.store, self._make,
                          lambda actors: actors[0].locate.remote(issue_text, memory_before), self._actors)
        try:
            return call.result()
        finally:
            call.end()
            self._actors = ()

    def end(self) -> None:
        for actor in self._actors:
            ray.kill(actor)


class RayWorkforce:
    """Each task gets a Developer actor and a QA actor that live as long as the task. They are
    made as soon as the tasks are known, so they are up when the plan reaches their stage."""

    def __init__(self, supervisor: SupervisorService):
        self._s = supervisor
        self._ready: dict[tuple[str, int], tuple] = {}  # (task, candidate) -> its Developer and QA actors

    def prepare(self, tasks: list[TaskDefined]) -> None:
        for task in tasks:
            for candidate in ([0] if self._s.settings.candidates <= 1 else range(1, self._s.settings.candidates + 1)):
                self._ready[task.task_id, candidate] = self._make(task.task_id, candidate, self._s.recorded)

    def _make(self, task_id: str, candidate: int, recorded) -> tuple:
        s, suffix = self._s, lane_suffix(candidate)
        developer = s.roles.developer(s.run_id, s.store, s.gateway,
                                      {k: v for k, v in recorded.items() if k == f"developer:{task_id}{suffix}"}, s.fence)
        qa = s.roles.qa(s.run_id, s.store, s.gateway, lanes_named(recorded, f"qa:{task_id}{suffix}"), s.fence)
        return developer, qa

    def run_stage(self, assignments: list[Assignment]) -> list[TaskResult]:
        calls = []
        for work in assignments:
            for candidate in candidate_numbers(work):
                tid = work.task.task_id
                actors = self._ready.pop((tid, candidate), None) or self._make(tid, candidate, self._s.recorded)
                calls.append(Recreating(
                    self._s.run_id, self._s.store, lambda recorded, tid=tid, c=candidate: self._make(tid, c, recorded),
                    lambda actors, work=work, c=candidate: actors[0].run.remote(work, actors[1], self._s.bench, c), actors,
                ))
        try:
            return [call.result() for call in calls]
        finally:
            for call in calls:
                call.end()

    def end(self) -> None:
        for actors in self._ready.values():
            for actor in actors:
                ray.kill(actor)
        self._ready.clear()
