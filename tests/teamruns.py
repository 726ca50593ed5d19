"""A run of the team in this process, as `submit` runs it but without Ray: the settings settled from
the same flags, environment and files, the gateway configured for the same endpoint, every role
here with a stage's tasks on threads (actors/runtime/inprocess.py), the real SQLite store, and with
tests on the real bench (the execution layer: environments, testbeds, the sandbox).

    with ScriptedServer(team) as server:
        run = run_team(calc_issue(repo, base), settings_for(repo, base_url=server.base_url, tests="on"), store)
        requests = list(server.requests)
    run.end, run.events, run.of("TestsRan"), run.tests_ran("check")

The team's behaviour (what it asks, tests, sends back, chooses and records) is the same here as on
Ray: one Team class, which the supervisor's actor runs there. What a whole `submit` adds (Ray's
start, the driver and its lease, signals, the terminal's lines) is tested by the few whole runs
kept for each capability (tests/commands.py's `magis`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from magis_ray.actors.model.gateway import Gateway
from magis_ray.actors.runtime.continuation import resume_point
from magis_ray.actors.runtime.inprocess import LocalLLM, run_in_process
from magis_ray.actors.runtime.issue import IssueRecord
from magis_ray.actors.runtime.journal import RunWriter
from magis_ray.actors.runtime.replay import issue_of
from magis_ray.cli.config import effective_settings
from magis_ray.cli.endpoint import gateway_config, model_endpoint
from magis_ray.cli.settings import flag_layer
from magis_ray.cli.submit import run_settings
from magis_ray.events.codec import new_event
from magis_ray.events.schema import Recorded, RunFailed, RunFinished, RunSettings
from magis_ray.store import open_store

RUN_ID = "0123456789ab"  # a run's id as submit makes them (12 hex digits)


def settings_for(repo_path: str | Path | None, **flags) -> RunSettings:
    """A run's settings as `submit` settles and records them: these flags by their settings' names
    (`base_url=...` for --base-url, `tests="on"`), then the environment (MAGIS_*), the project's
    magis.toml and the user's file; the endpoint `auto` stands for and the model's name settled."""
    layer = flag_layer({key.replace("_", "-"): value for key, value in flags.items()})
    return run_settings(effective_settings(layer, Path(repo_path) if repo_path else None).settings)


@dataclass(frozen=True)
class TeamRun:
    run_id: str
    end: RunFinished | RunFailed
    events: list[Recorded]  # the run's whole log, as the store holds it

    def of(self, kind: str) -> list:
        """The events of one type, by its name ("TestsRan"), in log order."""
        return [r.event for r in self.events if type(r.event).__name__ == kind]

    def tests_ran(self, purpose: str) -> list:
        return [e for e in self.of("TestsRan") if e.purpose == purpose]


def _bench(issue: IssueRecord, settings: RunSettings):
    if not settings.tests:
        return None
    from magis_ray.actors.runtime.bench import BenchSetup, ExecutionBench

    return ExecutionBench(BenchSetup.of(issue, settings, issue.repo_path))


def _go(issue: IssueRecord, settings: RunSettings, store_path: Path, run_id: str, recorded=None) -> TeamRun:
    endpoint = settings.endpoint
    with model_endpoint(endpoint.llm, endpoint.base_url or None, str(store_path)) as served:
        # the gateway's retries back off briefly here: what is tested is what a failure after them does
        llm = LocalLLM(Gateway(msgspec.structs.replace(gateway_config(served, settings), backoff_base_s=0.01)))
        try:
            with open_store(str(store_path), create=True) as store:
                end = run_in_process(store=store, issue=issue, settings=settings, repo_path=issue.repo_path, llm=llm,
                                     run_id=run_id, recorded=recorded, bench=_bench(issue, settings))
                events = store.read(run_id)
        finally:
            llm.close()
    return TeamRun(run_id, end, events)


def run_team(issue: IssueRecord, settings: RunSettings, store_path: Path, run_id: str = RUN_ID) -> TeamRun:
    """One whole run of `issue` with `settings` (settings_for's), its log in the store at
    `store_path`; returns once the run has ended."""
    return _go(issue, settings, store_path, run_id)


def resume_team(store_path: Path, run_id: str = RUN_ID, settings: RunSettings | None = None) -> TeamRun:
    """Go on with a cut-off run as `resume` does: from its resume point (what follows is marked
    superseded), re-living the recorded lanes; with the settings it recorded (what a resume given
    no flags settles on), or `settings`."""
    with open_store(str(store_path)) as store:
        point = resume_point(store.read(run_id))
        RunWriter(store, run_id).write([new_event(point.marker(), "resume")])
    return _go(issue_of(point.started), settings or point.started.settings, store_path, run_id, point.recorded)
