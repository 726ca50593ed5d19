"""The one place where Ray is applied to the plain service classes: resources, options, placement.

Placement: the store, the gateway, the supervisors and the Custodians live on the driver's node
(the store's file and the repositories are there); Developers and QA Engineers need only their
task's data, so they spread over the cluster. A run's builds and test runs are tasks spread over
the cluster by the environment they need (BenchTasks), as grading's are (RayExecutor), and the
repository reaches their nodes through the object store. Role actors are kept between the agents
they serve (RolePool).

This module travels: a run's BenchTasks is unpickled in its Developers' processes, which then
import it. So it imports only what every role imports anyway (the services), and the supervisor's
module, which imports the whole team, only where a supervisor is made."""
from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from functools import cache, partial

import msgspec
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from magis_ray.actors.runtime.services import (CustodianService, DeveloperService, GatewayService, QAService, StoreService,
                                               prepare_bench, result_of, run_bench)

NAMESPACE = "magis"
# Role actors wait on the model, not the CPU: they take no CPU slot, so a 2-core machine runs
# many of them; the gateway's concurrency limit is what bounds the work.
ROLE_OPTIONS = dict(num_cpus=0, max_restarts=0)


# --- the driver's settings, carried to the processes it starts ---------------------------------
# A cluster's workers start from their node's environment, not the driver's. The driver's MAGIS_*
# settings (its prompt templates, its log level: deployment.carried_settings) go as the first
# argument of every actor and task started here; each process takes them on before it does
# anything else, and carries them on to what it starts in turn. Ray's runtime env could carry them
# too, but a worker started with one goes through Ray's setup process first: about 1 CPU-second
# more a worker, as much again as the worker itself costs.
_carried: dict[str, str] = {}


def carry(settings: dict[str, str]) -> None:
    """The settings this process carries to the actors and tasks it starts."""
    _carried.clear()
    _carried.update(settings)


def _take_on(settings: dict[str, str]) -> None:
    os.environ.update(settings)
    carry(settings)


def carrying(cls):
    """`cls` as an actor class whose actors take on the carried settings first (the first argument)."""

    class Carrying(cls):
        def __init__(self, settings: dict[str, str], *args, **kwargs):
            _take_on(settings)
            super().__init__(*args, **kwargs)

    Carrying.__name__, Carrying.__qualname__ = cls.__name__, cls.__qualname__  # what Ray names the actors by
    return Carrying


@cache
def actor_classes():
    from magis_ray.actors.runtime.supervisor import SupervisorService

    return {
        "store": ray.remote(num_cpus=0, max_concurrency=1)(carrying(StoreService)),
        "gateway": ray.remote(num_cpus=0, max_concurrency=256)(carrying(GatewayService)),
        "supervisor": ray.remote(num_cpus=0, max_concurrency=4)(carrying(SupervisorService)),
        "custodian": ray.remote(**ROLE_OPTIONS)(carrying(CustodianService)),
        "developer": ray.remote(**ROLE_OPTIONS)(carrying(DeveloperService)),
        "qa": ray.remote(**ROLE_OPTIONS)(carrying(QAService)),
        # lends actors to many supervisors at once; each call waits on an actor at most READY_S
        "pool": ray.remote(num_cpus=0, max_concurrency=64)(carrying(RolePool)),
        # the driver's placements, shared by its runs' benches
        "placements": ray.remote(num_cpus=0, max_concurrency=16)(carrying(Placements)),
    }


def on_this_node() -> NodeAffinitySchedulingStrategy:
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
            name=name, namespace=NAMESPACE, get_if_exists=True, lifetime="detached", scheduling_strategy=on_this_node(),
        ).remote(_carried, *args)
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
    return actor_classes()[kind].options(scheduling_strategy=on_this_node() if kind == "custodian" else "SPREAD").remote(_carried)


def pool_actor():
    """A driver's pool of role actors, on its node; it ends with the driver."""
    return actor_classes()["pool"].options(scheduling_strategy=on_this_node()).remote(_carried)


def supervisor_actor(pool, tested: bool):
    """A supervisor on the driver's node, whose role actors come from `pool`; when its runs are
    `tested`, their benches are placed by the driver's placements (made with the first such run)."""
    from magis_ray.actors.runtime.supervisor import RoleActors

    port = PooledRoles(pool)
    bench = partial(bench_tasks, placements=placements_actor() if tested else None)
    roles = RoleActors(take=port.take, give_back=port.give_back, bench=bench)
    return actor_classes()["supervisor"].options(scheduling_strategy=on_this_node()).remote(_carried, roles)


# --- environment builds and test runs as Ray tasks, for grading and for the team's bench -------
# A build runs pip and the project's setup (a core, up to a few GiB); a test run one test process.
# Both kinds run in the node's pool of task workers, which Ray keeps and reuses: no process is
# started per build or per test run.
#
# Placement, one rule for grading and for the bench: a build goes, with SOFT node affinity, to a
# node that holds its environment (placement.EnvironmentPlacement, from the builds' results), so
# a cluster builds about one environment per key while a busy or lost node holds nothing up (Ray
# spills the build elsewhere); the tests then run where their testbed was built, with HARD
# affinity to the node the build reported. A node lost under a task: Ray runs the task again
# (max_retries counts system failures only, never an application's exception); a test pinned to
# a lost node is built and run again elsewhere.
#
# Repositories: only the driver's node has them. The driver packs the commits an instance needs
# (actors/code/commit_packs.py) into the object store once; a node that lacks them fetches the
# pack and keeps a copy by commit under its own cache root.
GiB = 1024 ** 3
NODE_LOSS_RETRIES = 3  # Ray's retries of a task whose worker or node died
BUILD_TASK_OPTIONS = dict(num_cpus=1, memory=4 * GiB, max_retries=NODE_LOSS_RETRIES)
TEST_TASK_OPTIONS = dict(num_cpus=1, memory=2 * GiB, max_retries=NODE_LOSS_RETRIES)
WAIT_SLICE_S = 1.0  # how long the driver waits on Ray at once, so that a signal stops it promptly
PLACEMENT_TRIES = 3  # how often an instance is built again elsewhere after its test's node was lost
# What ray.get raises for a task that died with its worker or node, or that is pinned to a lost node.
NODE_LOST = (ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError, ray.exceptions.TaskUnschedulableError,
             ray.exceptions.ObjectLostError, ray.exceptions.LocalRayletDiedError)


def this_node() -> tuple[str, str]:
    """(Ray node id, host name) of this process's node: the node id names it (two nodes may share a host)."""
    import socket

    return ray.get_runtime_context().get_node_id(), socket.gethostname()


def alive_nodes() -> dict[str, float]:
    """The live nodes that can run a task, with their cores."""
    return {n["NodeID"]: n["Resources"]["CPU"] for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU", 0) >= 1}


def preferring(node: str | None):
    """Soft affinity: `node` when it is alive and has a core free, else wherever Ray finds one."""
    if node is None:
        return "DEFAULT"
    return NodeAffinitySchedulingStrategy(node_id=node, soft=True, _spill_on_unavailable=True)


def pinned(node: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_id=node, soft=False)


def _on_node(settings, work, cores: float, *args):
    """`work(cores, *args)` on this node, the driver's settings taken on: (node id, host name, its result)."""
    _take_on(settings)
    node, host = this_node()
    return node, host, work(cores, *args)


@cache
def node_check_task():
    # no CPU asked: it runs at once beside whatever the node is doing
    return ray.remote(num_cpus=0, max_retries=0)(_on_node)


def on_every_node(work, *args) -> list[tuple[str, str, object]]:
    """`work(cores, *args)` once on every live node that runs tasks (`cores`: its CPUs), each call
    a task pinned to its node: (node id, host name, result) a node, in Ray's order of the nodes."""
    task = node_check_task()
    return ray.get([task.options(scheduling_strategy=pinned(node)).remote(_carried, work, cores, *args)
                    for node, cores in alive_nodes().items()])


@dataclass(frozen=True)
class ShippedRepository:
    """Commits of a repository, and the commits of their submodules, in the object store. The
    packs' references are held in a list, so Ray does not fetch them for a task whose node already
    has the copy."""

    repo: str  # owner/name
    commits: tuple[str, ...]
    packs: list  # a pack reference for each of `parts`, in order
    submodules: tuple = ()  # (owner/name, commits) of each submodule's mirror shipped along

    @property
    def parts(self) -> tuple:
        return ((self.repo, self.commits), *self.submodules)

    def repos_dir(self) -> str:
        """On a node: the repositories folder that holds this node's copy (OWNER__NAME in it, and
        its submodules' mirrors beside it)."""
        from magis_ray.actors.code.commit_packs import unpacked_copy
        from magis_ray.actors.execution.environments import default_cache_root

        root = default_cache_root() / "repositories"  # the node's own cache root (its node settings)
        return str(unpacked_copy(root, self.parts, lambda: ray.get(self.packs)))


def ship_repository(repo_path: str, repo: str, commits, mirrors: str | None = None) -> ShippedRepository | None:
    """The driver's `repo_path` at `commits`, packed into the object store, with the commits of
    their submodules from the mirrors in `mirrors` that hold them; None where the driver lacks the
    repository or a commit (the node then looks where it is told, and says what is missing)."""
    from magis_ray.actors.code.commit_packs import has_commits, pack_commits, submodule_mirrors

    commits = tuple(dict.fromkeys(c for c in commits if c))
    if not commits or not has_commits(repo_path, commits):
        return None
    submodules = submodule_mirrors(repo_path, commits, mirrors)
    packs = [ray.put(pack_commits(repo_path, commits)),
             *(ray.put(pack_commits(mirror, part[1])) for part, mirror in submodules)]
    return ShippedRepository(repo, commits, packs, tuple(part for part, _ in submodules))


def _graded_on_node(settings, work, job, options, shipped, *args):
    """`work(job, options, *args)` on this node, the driver's settings taken on and its repositories
    this node's copies: (node id, result)."""
    _take_on(settings)
    if shipped is not None:
        options = dataclasses.replace(options, repos_dir=shipped.repos_dir())
    return this_node()[0], work(job, options, *args)


def _bench_on_node(settings, work, setup, shipped, *args):
    """`work(setup, *args)` on this node, the driver's settings taken on and the run's repository
    this node's copy: (node id, TestsRan naming the node)."""
    from magis_ray.actors.code.commit_packs import folder_name

    _take_on(settings)
    if shipped is not None:
        setup = dataclasses.replace(setup, repo_path=os.path.join(shipped.repos_dir(), folder_name(shipped.repo)))
    node, host = this_node()
    return node, msgspec.structs.replace(work(setup, *args), node=node, host=host)


@cache
def node_tasks():
    return ray.remote(**BUILD_TASK_OPTIONS)(_graded_on_node), ray.remote(**TEST_TASK_OPTIONS)(_graded_on_node)


@cache
def bench_node_tasks():
    return ray.remote(**BUILD_TASK_OPTIONS)(_bench_on_node), ray.remote(**TEST_TASK_OPTIONS)(_bench_on_node)


def schedulable_memory(declared: int) -> int:
    """`declared`, or less where the cluster's smallest node has less: a task declaring more than
    a node has could never run there."""
    memories = [n["Resources"].get("memory", 0.0) for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU", 0) >= 1]
    smallest = min((m for m in memories if m), default=declared)
    return int(min(declared, smallest))


class Placements:
    """A driver's EnvironmentPlacement as an actor, shared by its runs' benches (each run's
    supervisor is a process of its own)."""

    def __init__(self):
        from magis_ray.actors.runtime.placement import EnvironmentPlacement

        self._placement = EnvironmentPlacement()

    def choose(self, key: str, alive: dict[str, float]) -> str | None:
        return self._placement.choose(key, alive)

    def finished(self, chosen: str | None) -> None:
        self._placement.finished(chosen)

    def held(self, key: str, node: str) -> None:
        self._placement.held(key, node)

    def lost(self, node: str) -> None:
        self._placement.lost(node)


def placements_actor():
    """This driver's placements, on its node (made once a process; it ends with the driver)."""
    if "placements" not in _shared:
        _shared["placements"] = actor_classes()["placements"].options(scheduling_strategy=on_this_node()).remote(_carried)
    return _shared["placements"]


def bench_environment(setup) -> str:
    """What names a run's environment before it is built: runs that share it share a node."""
    record = setup.record
    return "|".join([record.get("repo", ""), str(record.get("version") or ""), setup.settings.env_setup, setup.settings.python])


class BenchTasks:
    """A run's test bench (roles.testing.Bench) as Ray tasks: the testbed built on a node that
    holds the run's environment (soft affinity), every test run on the node of that build (hard
    affinity). A build or a test run takes a core and declares its memory only while it runs: a
    run that waits on the model holds neither, so a batch runs the bench phases of more runs than
    the cluster has cores, its test runs queueing for the cores only while they run.

    Made by the supervisor and handed to the run's Developers, on any node. The setup and the
    repository travel as object references, resolved in the task: a Developer's process never
    imports the execution layer, and no node but the driver's needs the repository."""

    def __init__(self, setup, placements=None):
        from magis_ray.actors.code.commit_packs import mirrors_beside

        self._setup = ray.put(setup)
        record = setup.record
        self._shipped = ship_repository(setup.repo_path, record.get("repo", ""),
                                        (record.get("base_commit", ""), record.get("environment_setup_commit") or ""),
                                        mirrors=mirrors_beside(setup.repo_path))
        self._key = bench_environment(setup)
        self._placements = placements
        self._node: str | None = None  # where the testbed was built; None until then (or once it is lost)
        self._build_memory = schedulable_memory(BUILD_TASK_OPTIONS["memory"])
        self._test_memory = schedulable_memory(TEST_TASK_OPTIONS["memory"])

    def prepare(self):
        """The testbed built (or found in the node's cache) in a build task; its TestsRan names the node."""
        build, _ = bench_node_tasks()
        prefer = ray.get(self._placements.choose.remote(self._key, alive_nodes())) if self._placements else None
        try:
            node, ran = result_of(build.options(memory=self._build_memory, scheduling_strategy=preferring(prefer))
                                  .remote(_carried, prepare_bench, self._setup, self._shipped))
        except NODE_LOST:
            if self._placements:
                self._placements.finished.remote(prefer)
            raise
        self._node = node
        if ran.suite is not None and (ran.suite.added or ran.suite.options):
            # what the preparation decided: every later build and run of this run's testbed has it
            self._setup = ray.put(dataclasses.replace(ray.get(self._setup), added=tuple(ran.suite.added),
                                                      options=tuple(ran.suite.options)))
        if self._placements and ran.outcome == "passed":
            self._placements.held.remote(self._key, node)
        return ran

    def run(self, request):
        """One test run, in a test task on the testbed's node; built again elsewhere if that node is lost."""
        _, test = bench_node_tasks()
        for attempt in range(1, PLACEMENT_TRIES + 1):
            if self._node is None:  # a copy handed out before the build (a resumed run), or the node lost
                self.prepare()
            node = self._node
            try:
                return result_of(test.options(memory=self._test_memory, scheduling_strategy=pinned(node))
                                 .remote(_carried, run_bench, self._setup, self._shipped, request))[1]
            except NODE_LOST:
                if attempt == PLACEMENT_TRIES:
                    raise
                if self._placements:
                    self._placements.lost.remote(node)
                self._node = None


def bench_tasks(setup, placements=None) -> BenchTasks:
    """The run's bench, placed by the driver's `placements`."""
    return BenchTasks(setup, placements)


@dataclass(eq=False)
class _Instance:
    """A grading job in flight: its build, then its test run on the build's node."""

    job: object
    key: str
    shipped: ShippedRepository | None
    ref: object = None
    testing: bool = False
    chosen: str | None = None  # the node its build was told to prefer
    node: str | None = None  # the node its build ran on
    tries: int = 0


class RayExecutor:
    """Grading jobs as Ray tasks: `build(job, options)` (the environment and testbed ready), then
    `run(job, options, built)` on the node of the build. The functions come from the caller (the
    swebench package), so the runtime knows nothing of grading: `environment_of(job)` names the
    environment a job needs, `repository_of(job)` the repository and commits ((owner/name,
    commits)); the options name the driver's repositories as `repos_dir`, which a node's task
    replaces by its own copy's folder."""

    def __init__(self, options, build, run, environment_of, repository_of) -> None:
        from magis_ray.actors.runtime.placement import EnvironmentPlacement

        self._repos_dir = options.repos_dir
        self._options = ray.put(options)
        self._build, self._run = build, run
        self._environment_of, self._repository_of = environment_of, repository_of
        self.placement = EnvironmentPlacement()
        self._shipped: dict[tuple, tuple[ShippedRepository | None, int]] = {}  # (repo, commits) -> (pack, jobs using it)
        self._build_memory = schedulable_memory(BUILD_TASK_OPTIONS["memory"])
        self._test_memory = schedulable_memory(TEST_TASK_OPTIONS["memory"])

    def start(self, job):
        repo, commits = self._repository_of(job)
        shipped, users = self._shipped.get((repo, commits), (None, 0))
        if not users:
            from magis_ray.actors.code.commit_packs import folder_name

            shipped = ship_repository(os.path.join(self._repos_dir, folder_name(repo)), repo, commits, mirrors=self._repos_dir)
        self._shipped[(repo, commits)] = (shipped, users + 1)
        instance = _Instance(job, str(self._environment_of(job)), shipped)
        self._start_build(instance)
        return instance

    def _start_build(self, instance: _Instance) -> None:
        build, _ = node_tasks()
        instance.tries += 1
        instance.testing, instance.node = False, None
        instance.chosen = self.placement.choose(instance.key, alive_nodes())
        instance.ref = build.options(memory=self._build_memory, scheduling_strategy=preferring(instance.chosen)).remote(
            _carried, self._build, instance.job, self._options, instance.shipped)

    def next_done(self, handles):
        by_ref = {instance.ref: instance for instance in handles}
        while True:
            # in short waits: a signal's handler (Ctrl-C, SIGTERM) runs only between them
            ready = []
            while not ready:
                ready, _ = ray.wait(list(by_ref), num_returns=1, timeout=WAIT_SLICE_S)
            [ready] = ready
            instance = by_ref.pop(ready)
            try:
                node, value = ray.get(ready)
            except NODE_LOST:
                if instance.tries >= PLACEMENT_TRIES:
                    raise
                if instance.node is not None:
                    self.placement.lost(instance.node)
                self.placement.finished(instance.chosen)
                self._start_build(instance)
                by_ref[instance.ref] = instance
                continue
            if instance.testing:
                self._done(instance)
                return instance, value
            instance.node, instance.testing = node, True
            self.placement.held(instance.key, node)
            _, test = node_tasks()
            instance.ref = test.options(memory=self._test_memory, scheduling_strategy=pinned(node)).remote(
                _carried, self._run, instance.job, self._options, instance.shipped, value)
            by_ref[instance.ref] = instance

    def _done(self, instance: _Instance) -> None:
        self.placement.finished(instance.chosen)
        repo, commits = self._repository_of(instance.job)
        shipped, users = self._shipped.pop((repo, commits))
        if users > 1:
            self._shipped[(repo, commits)] = (shipped, users - 1)

    def close(self) -> None:
        """Nothing to release: Ray owns the tasks (the thread executor's close stops its pool)."""
