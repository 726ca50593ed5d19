"""The roles as the services that Ray runs: plain classes, made remote only in remote.py.
Each talks to the shared store and gateway through handles, and rebuilds its lanes from the log."""
from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field
from typing import Sequence

import ray
import structlog

from magis_ray.events.schema import LLMExchanged, Message, NewEvent, PatchProposed, QAAssigned, Recorded, RunSettings, TestsRan
from magis_ray.events.summaries import SummaryMemory

from magis_ray.actors.runtime.forwarding import delegating, forwarding
from magis_ray.actors.runtime.journal import RunWriter
from magis_ray.actors.runtime.lanes import Lanes

# Each role actor's process imports only what its role needs (inside the constructors and
# methods): a Developer has no use for BM25 or pygit2.


class StoreService(delegating(SummaryMemory, "_store")):
    """The one owner of the store on a cluster; every actor appends through it, in arrival order,
    and reads and writes the summary memory through it (the port's methods, forwarded)."""

    def __init__(self, path: str):
        from magis_ray.store import open_store

        self._store = open_store(path, create=True)
        self._writers: dict[tuple[str, int], RunWriter] = {}
        self._gateways: set[str] = set()  # the gateways this store's drivers use (`magis-ray stop` ends only those)

    def uses_gateway(self, name: str) -> None:
        self._gateways.add(name)

    def gateways(self) -> list[str]:
        return sorted(self._gateways)

    def append_next(self, run_id: str, events: Sequence[NewEvent], fence: int = 0) -> list[int]:
        """Append after whatever the run holds now; the events' global positions. `fence`: the
        epoch of the run's lease its driver holds (the store refuses a driver that lost it)."""
        return self._writer(run_id, fence).write(events, fence)

    def end(self, run_id: str, events: Sequence[NewEvent], fence: int = 0) -> bool:
        """End the run's log with `events` if it has begun (True); else close it unbegun, so that
        the run is never recorded (journal.RunWriter.end)."""
        return self._writer(run_id, fence).end(events, fence)

    def _writer(self, run_id: str, fence: int) -> RunWriter:
        # A writer per driver's lease: this actor outlives drivers, and a run resumed by another
        # driver (maybe through another store actor) is at a version the old writer never saw.
        writer = self._writers.get((run_id, fence))
        if writer is None:
            writer = self._writers[(run_id, fence)] = RunWriter(self._store, run_id)
        return writer

    def read(self, run_id: str, after_version: int = 0) -> list[Recorded]:
        return self._store.read(run_id, after_version)

    def version(self, run_id: str) -> int:
        return self._store.version(run_id)


class GatewayService:
    """The LLM gateway as an async actor: many requests in flight, one concurrency limit and budget."""

    def __init__(self, config):
        from magis_ray.actors.model.gateway import Gateway

        self._gateway = Gateway(config)
        self._batch_of: dict[str, str] = {}  # run id -> its batch's budget key

    async def exchange(self, **request) -> LLMExchanged:
        run_id = request["run_id"]
        keys = (run_id, self._batch_of[run_id]) if run_id in self._batch_of else (run_id,)
        return await self._gateway.exchange(**request, budget_keys=keys)

    def set_budget(self, key: str, tokens: int) -> None:
        self._gateway.set_budget(key, tokens)

    def join_batch(self, run_id: str, batch_key: str) -> None:
        """The run's requests count against the batch's budget as well as its own."""
        self._batch_of[run_id] = batch_key

    def usage_of(self, key: str) -> int:
        return self._gateway.usage_of(key)


# --- ports: what the plain roles see, backed by actor handles ---------------------------------
# Each waits with result_of, so a role (the Team above all) sees the exception the other actor
# raised (Fenced, Divergence, ModelUnavailable, ...), never the RayTaskError that carried it.


def root_cause(exc: BaseException) -> BaseException:
    """The exception an actor or task raised, unwrapped from the RayTaskErrors that carried it
    (one per actor it crossed)."""
    while getattr(exc, "cause", None) is not None:
        exc = exc.cause  # type: ignore[attr-defined]
    return exc


def result_of(ref):
    """ray.get of one call: its value, or the exception it raised, unwrapped (chained to the
    RayTaskError, whose text holds the remote traceback). An actor that died stays a RayActorError."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        raise root_cause(exc) from exc


class StoreSink:
    def __init__(self, store, run_id: str, fence: int = 0):
        self._store, self._run_id, self._fence = store, run_id, fence

    def write(self, events: Sequence[NewEvent]) -> list[int]:
        return result_of(self._store.append_next.remote(self._run_id, list(events), self._fence))


def _through_store_actor(memory: StoreMemory, name: str, *args, **kwargs):
    return result_of(getattr(memory.store, name).remote(*args, **kwargs))


class StoreMemory(forwarding(SummaryMemory, _through_store_actor)):
    """The summary memory of the store's actor (StoreService), for a Custodian in another process."""

    def __init__(self, store):
        self.store = store


class GatewayLLM:
    def __init__(self, gateway):
        self._gateway = gateway

    def exchange(self, *, run_id: str, purpose: str, messages: list[Message], schema: dict | None, task_id: str, attempt: int,
                 **sampling) -> LLMExchanged:
        return result_of(self._gateway.exchange.remote(
            run_id=run_id, purpose=purpose, messages=messages, schema=schema, task_id=task_id, attempt=attempt, **sampling,
        ))


def lanes_for(run_id: str, store, gateway, recorded: dict[str, list[Recorded]] | None, fence: int = 0) -> Lanes:
    """The lanes of a role actor; its events say which node it ran on. Its log lines (JSON, in
    Ray's worker logs) name the run."""
    from magis_ray.actors.runtime.logs import configure_logging

    configure_logging()
    structlog.contextvars.bind_contextvars(run=run_id)
    return Lanes(run_id, StoreSink(store, run_id, fence), GatewayLLM(gateway), recorded, ray.get_runtime_context().get_node_id())


# --- the roles -------------------------------------------------------------------------------
# A role's actor serves one agent at a time, and then another (of this run or another): the
# driver's RolePool (remote.py) keeps it between agents, so a batch starts no process per agent
# once its first runs have started theirs. Each call says which agent it is for (a Binding); an
# actor rebuilds its lanes when that changes, and keeps them while it serves the same agent (its
# journal's place among the agent's recorded events).


@dataclass(frozen=True)
class Binding:
    """The agent a role actor serves: its run, the shared store and gateway, its recorded lanes
    (on resume), the driver's lease epoch, and an id no other agent has."""

    run_id: str
    store: object
    gateway: object
    recorded: dict
    fence: int = 0
    agent: str = field(default_factory=lambda: uuid.uuid4().hex)


class RoleService:
    """What every role actor has: the lanes of the agent it serves now."""

    _agent: str = ""
    _lanes: Lanes | None = None

    def lanes(self, binding: Binding) -> Lanes:
        if binding.agent != self._agent or self._lanes is None:
            self._lanes = lanes_for(binding.run_id, binding.store, binding.gateway, binding.recorded, binding.fence)
            self._agent = binding.agent
        return self._lanes

    def ready(self) -> bool:
        """Answers once the process is up (the pool asks an idle actor before lending it)."""
        return True


class CustodianService(RoleService):
    """Runs where the repository is: it reads every file at the base commit."""

    def locate(self, binding: Binding, repo_path: str, commit: str, repo: str, settings: RunSettings, issue_text: str,
               memory_before: int | None = None):
        from magis_ray.actors.code.repository import RepoSnapshot
        from magis_ray.actors.roles.custodian import Custodian

        custodian = Custodian(RepoSnapshot.open(repo_path, commit), StoreMemory(binding.store), self.lanes(binding), repo, settings)
        return custodian.locate(issue_text, memory_before)


class QAService(RoleService):
    def review(self, binding: Binding, lane: str, qa: QAAssigned, patch: PatchProposed, issue_text: str, task_description: str,
               evidence=None):
        """`lane`: the QA Engineer's, named by its Developer (so this process never imports the
        Developer's module, and pygit2 with it)."""
        from magis_ray.actors.roles.qa import QAEngineer

        return QAEngineer(self.lanes(binding)(lane), issue_text, task_description).review(qa, patch, evidence)


class RemoteReviewer:
    def __init__(self, qa_actor, binding: Binding, lane: str, issue_text: str, task_description: str):
        self._qa, self._binding, self._lane, self._issue, self._task = qa_actor, binding, lane, issue_text, task_description

    def review(self, qa: QAAssigned, patch: PatchProposed, evidence=None):
        return result_of(self._qa.review.remote(self._binding, self._lane, qa, patch, self._issue, self._task, evidence))


class DeveloperService(RoleService):
    """Needs only its task: the file content travels in the Assignment, so it can run on any node."""

    def run(self, binding: Binding, work, qa_actor, qa_binding: Binding, bench=None, candidate: int = 0):
        """`bench`: the run's (remote.BenchTasks), or None when its tests are off."""
        from magis_ray.actors.roles.developer import Developer, candidate_temperature, lane_suffix
        from magis_ray.actors.roles.testing import Tester

        suffix = lane_suffix(candidate)
        reviewer = RemoteReviewer(qa_actor, qa_binding, f"qa:{work.task.task_id}{suffix}", work.issue_text, work.task.description)
        asker = self.lanes(binding)(f"developer:{work.task.task_id}{suffix}", candidate_temperature(candidate))
        return Developer(work, asker, reviewer, Tester(asker.journal, bench), candidate).run()


# --- the test bench: each build and each test run a task on the run's node (remote.BenchTasks) ---

BENCHES_KEPT = 16  # the most runs' benches a worker process keeps


@functools.lru_cache(maxsize=BENCHES_KEPT)
def _bench_for(setup):
    """This worker process's bench for `setup`. Ray gives a run's tasks whichever worker of the
    node's pool is free, and keeps those workers: one that ran an earlier build or test of the
    same run (or of another run at the same commit) has its spec, its testbed and the harness's
    imports ready."""
    from magis_ray.actors.runtime.bench import ExecutionBench

    return ExecutionBench(setup)


def prepare_bench(setup) -> TestsRan:
    """The run's testbed, built here unless this node has it: Bench.prepare."""
    return _bench_for(setup).prepare()


def run_bench(setup, request) -> TestsRan:
    """One test run on a fresh copy of the run's testbed: Bench.run."""
    return _bench_for(setup).run(request)
