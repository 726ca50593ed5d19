"""The one place where Ray is applied to the plain service classes: resources, options, placement.

Placement: the store, the gateway, the supervisors and the Custodians live on the driver's node
(the store's file and the repositories are there); Developers and QA Engineers need only their
task's data, so they spread over the cluster. A run's builds and test runs are tasks on its
supervisor's node (BenchTasks), as grading's are (RayExecutor). Role actors are kept between the
agents they serve (RolePool).

This module travels: a run's BenchTasks is unpickled in its Developers' processes, which then
import it. So it imports only what every role imports anyway (the services), and the supervisor's
module, which imports the whole team, only where a supervisor is made."""
from __future__ import annotations

import hashlib
from functools import cache

import msgspec
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from magis_ray.actors.runtime.services import (CustodianService, DeveloperService, GatewayService, QAService, StoreService,
                                               prepare_bench, result_of, run_bench)

NAMESPACE = "magis"
# Role actors wait on the model, not the CPU: they take no CPU slot, so a 2-core machine runs
# many of them; the gateway's concurrency limit is what bounds the work.
ROLE_OPTIONS = dict(num_cpus=0, max_restarts=0)


@cache
def actor_classes():
    from magis_ray.actors.runtime.supervisor import SupervisorService

    return {
        "store": ray.remote(num_cpus=0, max_concurrency=1)(StoreService),
        "gateway": ray.remote(num_cpus=0, max_concurrency=256)(GatewayService),
        "supervisor": ray.remote(num_cpus=0, max_concurrency=4)(SupervisorService),
        "custodian": ray.remote(**ROLE_OPTIONS)(CustodianService),
        "developer": ray.remote(**ROLE_OPTIONS)(DeveloperService),
        "qa": ray.remote(**ROLE_OPTIONS)(QAService),
        # lends actors to many supervisors at once; each call waits on an actor at most READY_S
        "pool": ray.remote(num_cpus=0, max_concurrency=64)(RolePool),
    }


def here() -> NodeAffinitySchedulingStrategy:
    """This process's node, and no other."""
    return NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)


# The shared actors are named stably (from the store's path and the gateway's settings), so every
# driver on a cluster finds the same ones, and detached, so they outlive the driver that made them
# (`magis-ray stop` ends them). The handles are kept per process, to look each up once.
_shared: dict[str, object] = {}
STORE_PREFIX, GATEWAY_PREFIX = "store:", "gateway:"


def forget_shared() -> None:
    """Drop this process's handles of the shared actors: they belong to one Ray session, so a
    process that shuts its Ray down and starts or joins another must look them up again."""
    _shared.clear()


def store_name(path: str) -> str:
    return STORE_PREFIX + path


def gateway_name(config) -> str:
    """The same name for the same settings in every process (Python's hash() differs per process).
    An API key counts only as its digest: it never appears in the name."""
    settings = msgspec.to_builtins(config)
    if settings.get("api_key"):
        settings["api_key"] = hashlib.sha256(settings["api_key"].encode()).hexdigest()
    return GATEWAY_PREFIX + hashlib.sha256(msgspec.json.encode(settings, order="sorted")).hexdigest()[:20]


def _shared_actor(kind: str, name: str, *args):
    if name not in _shared:
        _shared[name] = actor_classes()[kind].options(
            name=name, namespace=NAMESPACE, get_if_exists=True, lifetime="detached", scheduling_strategy=here(),
        ).remote(*args)
    return _shared[name]


def store_actor(path: str):
    """The store's single owner, shared by every run that uses that store path."""
    return _shared_actor("store", store_name(path), path)


def gateway_actor(config):
    """The gateway for `config`: one per distinct model endpoint and settings, shared by every run
    and every driver on the cluster, so its concurrency and rate limits hold for all of them."""
    return _shared_actor("gateway", gateway_name(config), config)


def stop_shared(store_path: str) -> tuple[list[str], list[str]]:
    """End the store's actor and the gateways its drivers used that no other store's drivers use:
    (the names of those ended, the names of this store's gateways left to other stores). Another
    store's actors, and a gateway it shares, are never touched."""
    from ray.util import list_named_actors

    ours = store_name(store_path)
    named = {e["name"] for e in list_named_actors(all_namespaces=True) if e["namespace"] == NAMESPACE}
    if ours not in named:
        return [], []
    mine = set(_gateways_of(ours) or ())
    in_use_elsewhere: set[str] = set()
    for other in sorted(n for n in named if n.startswith(STORE_PREFIX) and n != ours):
        used = _gateways_of(other)
        in_use_elsewhere |= mine if used is None else set(used)  # a store that cannot say keeps them all
    ended = []
    for name in [ours, *sorted((mine - in_use_elsewhere) & named)]:
        try:
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
        except ValueError:  # ended meanwhile
            continue
        _shared.pop(name, None)
        ended.append(name)
    return ended, sorted(mine & in_use_elsewhere & named)


def _gateways_of(store: str) -> list[str] | None:
    """The gateways a store actor's drivers use; None when it cannot say (ended meanwhile, or
    an actor of a magis-ray from before it kept them)."""
    try:
        return ray.get(ray.get_actor(store, namespace=NAMESPACE).gateways.remote(), timeout=60)
    except (ValueError, AttributeError, ray.exceptions.RayError):
        return None


# --- role actors, kept between the agents they serve ----------------------------------------
# Starting a Ray worker costs about 0.4 CPU-seconds (Python, Ray, the role's modules): as much as
# a run's supervisor and role calls together spend. So a driver keeps its role actors in a pool
# once their agent is done and lends them to the next agents: a batch starts each of its
# processes once, not six per run. An actor lent for one agent serves only it (services.Binding);
# one whose call did not finish (it died, or failed) is never lent again.
IDLE_KEPT = 64  # the most idle actors of one role a pool keeps (more are ended)
READY_S = 5.0  # how long an idle actor may take to answer before it counts as lost (its node gone)


def answers(actor) -> bool:
    """Whether a kept actor still answers within READY_S (its node may be gone)."""
    ready, _ = ray.wait([actor.ready.remote()], timeout=READY_S)
    try:
        return bool(ready and ray.get(ready[0]))
    except ray.exceptions.RayActorError:
        return False


class RolePool:
    """A driver's role actors between agents: lends one (an idle one that still answers, or a new
    one) for an agent of a run, takes it back when the agent is done, and ends what a run still
    holds when that run is cut off. It creates them, so they end with it, and it with the driver."""

    def __init__(self, idle_kept: int = IDLE_KEPT):
        import threading
        from collections import defaultdict

        self._lock = threading.Lock()
        self._idle: dict[str, list] = defaultdict(list)
        self._lent: dict[str, list[tuple[str, object]]] = defaultdict(list)  # run id -> (kind, actor) it holds
        self._idle_kept = idle_kept
        self.started = 0  # actors made, for the benchmark's count

    def take(self, kind: str, run_id: str, fresh: bool = False):
        actor = None if fresh else self._answering(kind)
        if actor is None:
            actor = role_actor(kind)
            self.started += 1
        with self._lock:
            self._lent[run_id].append((kind, actor))
        return actor

    def _answering(self, kind: str):
        """An idle actor of `kind` that answers, or None; those that do not are ended."""
        while True:
            with self._lock:
                if not self._idle[kind]:
                    return None
                actor = self._idle[kind].pop()
            if answers(actor):
                return actor
            ray.kill(actor)

    def give_back(self, run_id: str, kind: str, actor) -> None:
        with self._lock:
            lent = self._lent.get(run_id, [])
            if (kind, actor) in lent:
                lent.remove((kind, actor))
            if not lent:
                self._lent.pop(run_id, None)
            if len(self._idle[kind]) < self._idle_kept:
                self._idle[kind].append(actor)
                return
        ray.kill(actor)

    def end_run(self, run_id: str) -> int:
        """End the actors a run still holds (it was cut off); how many."""
        with self._lock:
            lent = self._lent.pop(run_id, [])
        for _, actor in lent:
            ray.kill(actor)
        return len(lent)

    def counts(self) -> dict:
        with self._lock:
            return {"started": self.started, "idle": sum(map(len, self._idle.values())), "lent": sum(map(len, self._lent.values()))}


class PooledRoles:
    """A supervisor's way to the driver's pool (supervisor.RoleActors' take and give_back)."""

    def __init__(self, pool):
        self._pool = pool

    def take(self, kind: str, run_id: str, fresh: bool = False):
        return ray.get(self._pool.take.remote(kind, run_id, fresh))

    def give_back(self, run_id: str, kind: str, actor) -> None:
        self._pool.give_back.remote(run_id, kind, actor)


def role_actor(kind: str):
    """A Custodian beside the pool (the driver's node, where the repositories are); Developers and
    QA Engineers need only their task's data, so they spread over the cluster."""
    return actor_classes()[kind].options(scheduling_strategy=here() if kind == "custodian" else "SPREAD").remote()


def pool_actor():
    """A driver's pool of role actors, on its node; it ends with the driver."""
    return actor_classes()["pool"].options(scheduling_strategy=here()).remote()


def supervisor_actor(pool):
    """A supervisor on the driver's node, whose role actors come from `pool`."""
    from magis_ray.actors.runtime.supervisor import RoleActors

    port = PooledRoles(pool)
    roles = RoleActors(take=port.take, give_back=port.give_back, bench=bench_tasks)
    return actor_classes()["supervisor"].options(scheduling_strategy=here()).remote(roles)


# --- environment builds and test runs as Ray tasks, for grading and for the team's bench -------
# A build runs pip and the project's setup (a core, up to a few GiB); a test run one test process.
# Each node keeps the environments it built in its own cache, so a test run builds on its own node
# when the build happened elsewhere. Both kinds run in the node's pool of task workers, which Ray
# keeps and reuses: no process is started per build or per test run.
GiB = 1024 ** 3
BUILD_TASK_OPTIONS = dict(num_cpus=1, memory=4 * GiB, max_retries=0)
TEST_TASK_OPTIONS = dict(num_cpus=1, memory=2 * GiB, max_retries=0)


def _on_node(work, *args):
    """`work(*args)` in a task; `work` is a module-level function (it travels by reference)."""
    return work(*args)


@cache
def node_tasks():
    return ray.remote(**BUILD_TASK_OPTIONS)(_on_node), ray.remote(**TEST_TASK_OPTIONS)(_on_node)


def node_memory(node_id: str) -> float:
    """The memory Ray may schedule on the node (its `memory` resource), in bytes."""
    return next((node["Resources"].get("memory", 0.0) for node in ray.nodes() if node["NodeID"] == node_id), 0.0)


class BenchTasks:
    """A run's test bench (roles.testing.Bench) as Ray tasks on the node of its supervisor, where
    its repository and that node's environments are. A build or a test run takes a core and
    declares its memory only while it runs: a run that waits on the model holds neither, so a
    batch runs the bench phases of more runs than the cluster has cores, its test runs queueing
    for the cores only while they run.

    Made by the supervisor and handed to the run's Developers, on any node. The setup travels as
    an object reference, resolved in the task: a Developer's process never imports the execution
    layer."""

    def __init__(self, setup, node_id: str):
        self._setup = ray.put(setup)
        self._node = node_id
        # A node smaller than the declaration could never run the task: declare what it has.
        memory = node_memory(node_id)
        self._build_memory = int(min(BUILD_TASK_OPTIONS["memory"], memory or BUILD_TASK_OPTIONS["memory"]))
        self._test_memory = int(min(TEST_TASK_OPTIONS["memory"], memory or TEST_TASK_OPTIONS["memory"]))

    def _placed(self, task, memory: int):
        return task.options(memory=memory, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=self._node, soft=False))

    def prepare(self):
        """The testbed built (or found in the node's cache) in a build task."""
        build, _ = node_tasks()
        return result_of(self._placed(build, self._build_memory).remote(prepare_bench, self._setup))

    def run(self, request):
        """One test run, in a test task."""
        _, test = node_tasks()
        return result_of(self._placed(test, self._test_memory).remote(run_bench, self._setup, request))


def bench_tasks(setup) -> BenchTasks:
    """The run's bench on this process's node (the supervisor's)."""
    return BenchTasks(setup, ray.get_runtime_context().get_node_id())


class RayExecutor:
    """Grading jobs as Ray tasks: `build(job, options)`, then `run(job, options, built)` which
    Ray starts once the build's result is there. The functions come from the caller (the
    swebench package), so the runtime knows nothing of grading."""

    def __init__(self, options, build, run) -> None:
        self._options = ray.put(options)
        self._build, self._run = build, run

    def start(self, job):
        build_task, run_task = node_tasks()
        built = build_task.remote(self._build, job, self._options)
        return run_task.remote(self._run, job, self._options, built)

    def next_done(self, handles):
        ready, _ = ray.wait(handles, num_returns=1)
        return ready[0], ray.get(ready[0])

    def close(self) -> None:
        """Nothing to release: Ray owns the tasks (the thread executor's close stops its pool)."""
