"""The supervisor of a run (the Manager's run): lends the Custodian, the Developers and their QA
Engineers actors from the driver's pool, runs the plan's stages, and recreates a role actor that
dies, its lanes rebuilt from the log so that nothing it recorded is redone or paid for again.

A supervisor's actor, like a role's, serves one run and then another (the driver keeps it)."""
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
from magis_ray.actors.runtime.services import Binding, lanes_for, result_of
from magis_ray.actors.runtime.team import Team

log = structlog.get_logger()
# How often a role actor that died is recreated before its work counts as failed.
ACTOR_RETRIES = 2


def lanes_named(recorded: dict[str, list[Recorded]], *names: str) -> dict[str, list[Recorded]]:
    """The recorded lanes an actor needs: exactly these names, or below one ("custodian:...")."""
    return {lane: events for lane, events in recorded.items() if lane in names or lane.startswith(tuple(n + ":" for n in names))}


@dataclass(frozen=True)
class RoleActors:
    """How a supervisor gets its children, handed in by remote.py (the one place Ray is applied),
    so that the supervisor never imports it back.

    `take(kind, run_id, fresh)` lends an actor of a role ("custodian", "developer", "qa") for one
    agent of the run: one the driver's pool kept from an earlier agent, or a new one (always new
    when `fresh`: the successor of one that died). `give_back(run_id, kind, actor)` returns an
    actor whose agent is done, to serve another. `bench(setup)` is the run's test bench (a
    roles.testing.Bench whose builds and test runs are tasks on this node)."""

    take: Callable[[str, str, bool], object]
    give_back: Callable[[str, str, object], None]
    bench: Callable[..., object]


@dataclass(frozen=True)
class Lent:
    """A role actor lent for one agent, and that agent's binding."""

    kind: str
    actor: object
    binding: Binding


class Recreating:
    """A call on role actors that, if an actor dies, makes new ones from the log and calls again.

    make(recorded lanes, fresh) -> the lent actors; call(lent) -> the call's object ref."""

    def __init__(self, supervisor: SupervisorService, make: Callable[[dict, bool], tuple[Lent, ...]],
                 call: Callable[[tuple[Lent, ...]], object], lent: tuple[Lent, ...]):
        self._s, self._make, self._call = supervisor, make, call
        self._lent = lent  # taken ahead of time, so that new processes start while other work goes on
        self._ref = call(lent)
        self._finished = False

    def result(self):
        for retry in range(ACTOR_RETRIES + 1):
            try:
                value = result_of(self._ref)
                self._finished = True
                return value
            except ray.exceptions.RayActorError as exc:  # died, or its node crashed (unavailable)
                if retry == ACTOR_RETRIES:
                    raise
                log.warning("role actor died; recreating it from the log", run=self._s.run_id, error=str(exc).splitlines()[0])
                end(self._s, self._lent, reuse=False)
                self._lent = self._make(lanes_of(result_of(self._s.store.read.remote(self._s.run_id))), True)
                self._ref = self._call(self._lent)
        raise AssertionError("unreachable")

    def end(self) -> None:
        """Actors whose call finished serve other agents; any other (still busy, or failed) ends."""
        end(self._s, self._lent, reuse=self._finished)
        self._lent = ()


def end(supervisor: SupervisorService, lent: tuple[Lent, ...], reuse: bool) -> None:
    for one in lent:
        if reuse:
            supervisor.roles.give_back(supervisor.run_id, one.kind, one.actor)
        else:
            ray.kill(one.actor)


class SupervisorService:
    def __init__(self, roles: RoleActors):
        self.roles = roles

    def ready(self) -> bool:
        """Answers once the process is up (the driver asks an idle supervisor before reusing it)."""
        return True

    def binding(self, recorded: dict[str, list[Recorded]]) -> Binding:
        """A new agent's binding in this run, with its recorded lanes."""
        return Binding(self.run_id, self.store, self.gateway, recorded, self.fence)

    def projected_diff(self) -> str:
        from magis_ray.events.projections import final_diff, fold

        return final_diff(fold(result_of(self.store.read.remote(self.run_id))))

    def run(self, run_id: str, issue: IssueRecord, settings: RunSettings, repo_path: str, store, gateway,
            recorded: list[Recorded] | None = None, fence: int = 0):
        """Run (or resume) one issue; returns the run's terminal event. `fence`: the epoch of the
        driver's lease on the run: every write carries it."""
        self.run_id, self.issue, self.settings, self.repo_path = run_id, issue, settings, repo_path
        self.store, self.gateway, self.fence = store, gateway, fence
        self.recorded = lanes_of(recorded or [])
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
            self.bench = None

    def _bench(self):
        """The run's test bench: no process of its own, its builds and test runs are tasks."""
        from magis_ray.actors.runtime.bench import BenchSetup  # the execution layer: only for a run with tests

        return self.roles.bench(BenchSetup.of(self.issue, self.settings, self.repo_path))


class RemoteLocator:
    """The Custodian as an actor beside the repository, taken at once: a new process comes up
    while the run is being set up."""

    def __init__(self, supervisor: SupervisorService, commit_id: str):
        self._s = supervisor
        self._commit_id = commit_id
        self._lent = self._make(supervisor.recorded)

    def _make(self, recorded, fresh: bool = False) -> tuple[Lent, ...]:
        s = self._s
        return (Lent("custodian", s.roles.take("custodian", s.run_id, fresh), s.binding(lanes_named(recorded, "custodian"))),)

    def locate(self, issue_text: str, memory_before: int | None = None):
        s = self._s

        def call(lent: tuple[Lent, ...]):
            return lent[0].actor.locate.remote(lent[0].binding, s.repo_path, self._commit_id, s.issue.repo, s.settings, issue_text,
                                               memory_before)

        located = Recreating(s, self._make, call, self._lent)
        self._lent = ()
        try:
            return located.result()
        finally:
            located.end()

    def end(self) -> None:
        end(self._s, self._lent, reuse=True)  # taken, never called: idle
        self._lent = ()


class RayWorkforce:
    """Each task gets a Developer actor and a QA actor for as long as the task. They are taken as
    soon as the tasks are known, so they are up when the plan reaches their stage."""

    def __init__(self, supervisor: SupervisorService):
        self._s = supervisor
        self._ready: dict[tuple[str, int], tuple[Lent, ...]] = {}  # (task, candidate) -> its Developer and QA

    def prepare(self, tasks: list[TaskDefined]) -> None:
        for task in tasks:
            for candidate in ([0] if self._s.settings.candidates <= 1 else range(1, self._s.settings.candidates + 1)):
                self._ready[task.task_id, candidate] = self._make(task.task_id, candidate, self._s.recorded)

    def _make(self, task_id: str, candidate: int, recorded, fresh: bool = False) -> tuple[Lent, ...]:
        s, suffix = self._s, lane_suffix(candidate)
        developer = Lent("developer", s.roles.take("developer", s.run_id, fresh),
                         s.binding({k: v for k, v in recorded.items() if k == f"developer:{task_id}{suffix}"}))
        qa = Lent("qa", s.roles.take("qa", s.run_id, fresh), s.binding(lanes_named(recorded, f"qa:{task_id}{suffix}")))
        return developer, qa

    def run_stage(self, assignments: list[Assignment]) -> list[TaskResult]:
        calls = []
        for work in assignments:
            for candidate in candidate_numbers(work):
                tid = work.task.task_id
                lent = self._ready.pop((tid, candidate), None) or self._make(tid, candidate, self._s.recorded)
                calls.append(Recreating(
                    self._s, lambda recorded, fresh, tid=tid, c=candidate: self._make(tid, c, recorded, fresh),
                    lambda lent, work=work, c=candidate: lent[0].actor.run.remote(
                        lent[0].binding, work, lent[1].actor, lent[1].binding, self._s.bench, c),
                    lent,
                ))
        try:
            return [call.result() for call in calls]
        finally:
            for call in calls:
                call.end()

    def end(self) -> None:
        for lent in self._ready.values():
            end(self._s, lent, reuse=True)  # taken, never called: idle
        self._ready.clear()
