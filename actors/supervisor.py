"""The supervisor of one run (the Manager's run): creates the Custodian, the Developers and their
QA Engineers as actors, runs the plan's stages, and recreates a role actor that dies."""
from __future__ import annotations

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
# How often a role actor that died is recreated (its lanes rebuilt from the log) before the task fails.
ACTOR_RETRIES = 2


def _lanes_with_prefix(recorded: dict[str, list[Recorded]], *prefixes: str) -> dict[str, list[Recorded]]:
    return {lane: events for lane, events in recorded.items() if lane.startswith(prefixes)}


class SupervisorService:
    def __init__(self, run_id: str, issue: IssueRecord, settings: RunSettings, repo_path: str,
                 store, gateway, recorded: list[Recorded] | None = None, memory_before: int | None = None):
        self._run_id = run_id
        self._issue = issue
        self._settings = settings
        self._repo_path = repo_path
        self._store = store
        self._gateway = gateway
        self._recorded = lanes_of(recorded or [])
        self._memory_before = memory_before

    def run(self):
        from .remote import actor_classes

        snapshot = RepoSnapshot.open(self._repo_path, self._issue.base_commit)
        lanes = lanes_for(self._run_id, self._store, self._gateway, self._recorded)
        custodian = actor_classes()["custodian"].remote(
            self._run_id, self._repo_path, snapshot.commit_id, self._issue.repo, self._settings, self._memory_before,
            self._store, self._gateway, _lanes_with_prefix(self._recorded, "custodian"),
        )
        try:
            team = Team(
                issue=self._issue, settings=self._settings, snapshot=snapshot, asker_for=lanes,
                custodian=RemoteLocator(custodian), workforce=RayWorkforce(self._run_id, self._store, self._gateway, self._recorded),
            )
            return team.run()
        finally:
            ray.kill(custodian)


class RemoteLocator:
    def __init__(self, custodian):
        self._custodian = custodian

    def locate(self, issue_text: str):
        return ray.get(self._custodian.locate.remote(issue_text))


class RayWorkforce:
    """Each task gets a Developer actor and a QA actor that live as long as the task."""

    def __init__(self, run_id: str, store, gateway, recorded: dict[str, list[Recorded]]):
        self._run_id = run_id
        self._store = store
        self._gateway = gateway
        self._recorded = recorded

    def run_stage(self, assignments: list[Assignment]) -> list[TaskFinished]:
        pending = {work.task.task_id: self._start(work, self._recorded) for work in assignments}
        results: dict[str, TaskFinished] = {}
        for work in assignments:
            tid = work.task.task_id
            for retry in range(ACTOR_RETRIES + 1):
                ref, actors = pending[tid]
                try:
                    results[tid] = ray.get(ref)
                    break
                except ray.exceptions.ActorDiedError as exc:
                    if retry == ACTOR_RETRIES:
                        raise
                    log.warning("role actor died; recreating it from the log", task=tid, error=str(exc).splitlines()[0])
                    # What the dead actor already recorded is matched, not redone or paid again.
                    fresh = lanes_of(ray.get(self._store.read.remote(self._run_id)))
                    pending[tid] = self._start(work, fresh)
                finally:
                    for actor in actors:
                        ray.kill(actor)
        return [results[w.task.task_id] for w in assignments]

    def _start(self, work: Assignment, recorded: dict[str, list[Recorded]]):
        from .remote import actor_classes

        tid = work.task.task_id
        classes = actor_classes()
        qa = classes["qa"].remote(
            self._run_id, work.issue_text, work.task.description, self._store, self._gateway,
            {k: v for k, v in recorded.items() if k == f"qa:{tid}"},
        )
        developer = classes["developer"].remote(
            self._run_id, self._store, self._gateway, {k: v for k, v in recorded.items() if k == f"developer:{tid}"},
        )
        return developer.run.remote(work, qa), (developer, qa)
