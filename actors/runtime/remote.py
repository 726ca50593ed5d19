"""The one place where Ray is applied to the plain service classes: resources, options, placement.

Placement: the store, the gateway, each run's supervisor and its Custodian live on the driver's
node (the store's file and the repositories are there); Developers and QA Engineers need only
their task's data, so they spread over the cluster."""
from __future__ import annotations

import hashlib
from functools import cache

import msgspec
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from magis_ray.actors.runtime.services import BenchService, CustodianService, DeveloperService, GatewayService, QAService, StoreService
from magis_ray.actors.runtime.supervisor import RoleActors, SupervisorService

NAMESPACE = "magis"
# Role actors wait on the model, not the CPU: they take no CPU slot, so a 2-core machine runs
# many of them; the gateway's concurrency limit is what bounds the work.
ROLE_OPTIONS = dict(num_cpus=0, max_restarts=0)


@cache
def actor_classes():
    return {
        "store": ray.remote(num_cpus=0, max_concurrency=1)(StoreService),
        "gateway": ray.remote(num_cpus=0, max_concurrency=256)(GatewayService),
        "supervisor": ray.remote(num_cpus=0, max_concurrency=4)(SupervisorService),
        "custodian": ray.remote(**ROLE_OPTIONS)(CustodianService),
        "developer": ray.remote(**ROLE_OPTIONS)(DeveloperService),
        "qa": ray.remote(**ROLE_OPTIONS)(QAService),
        # Test runs use the CPU: the bench takes a slot, so runs with tests queue for cores.
        "bench": ray.remote(num_cpus=1, max_restarts=0, max_concurrency=2)(BenchService),
    }


def here() -> NodeAffinitySchedulingStrategy:
    """This process's node, and no other."""
    return NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)


# The shared actors are named stably (from the store's path and the gateway's settings), so every
# driver on a cluster finds the same ones, and detached, so they outlive the driver that made them
# (`magis-ray stop` ends them). The handles are kept per process, to look each up once.
_shared: dict[str, object] = {}
STORE_PREFIX, GATEWAY_PREFIX = "store:", "gateway:"


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


def supervisor_actor(*args, **kwargs):
    roles = RoleActors(custodian=custodian_actor, developer=developer_actor, qa=qa_actor, bench=bench_actor)
    return actor_classes()["supervisor"].options(scheduling_strategy=here()).remote(*args, roles=roles, **kwargs)


def custodian_actor(*args):
    """Beside the supervisor, where the repository is."""
    return actor_classes()["custodian"].options(scheduling_strategy=here()).remote(*args)


def developer_actor(*args):
    return actor_classes()["developer"].options(scheduling_strategy="SPREAD").remote(*args)


def qa_actor(*args):
    return actor_classes()["qa"].options(scheduling_strategy="SPREAD").remote(*args)


# --- grading: environment builds and test runs as Ray tasks ----------------------------------
# A build runs pip and the project's setup (a core, up to a few GiB); a test run one test process.
# Each node keeps the environments it built in its own cache, so a test run builds on its own node
# when the build happened elsewhere.
BUILD_TASK_OPTIONS = dict(num_cpus=1, memory=4 * 1024 ** 3, max_retries=0)
TEST_TASK_OPTIONS = dict(num_cpus=1, memory=2 * 1024 ** 3, max_retries=0)


def _on_node(work, *args):
    """`work(*args)` in a task; `work` is a module-level function (it travels by reference)."""
    return work(*args)


@cache
def grading_tasks():
    return ray.remote(**BUILD_TASK_OPTIONS)(_on_node), ray.remote(**TEST_TASK_OPTIONS)(_on_node)


class RayExecutor:
    """Grading jobs as Ray tasks: `build(job, options)`, then `run(job, options, built)` which
    Ray starts once the build's result is there. The functions come from the caller (the
    swebench package), so the runtime knows nothing of grading."""

    def __init__(self, options, build, run) -> None:
        self._options = ray.put(options)
        self._build, self._run = build, run

    def start(self, job):
        build_task, run_task = grading_tasks()
        built = build_task.remote(self._build, job, self._options)
        return run_task.remote(self._run, job, self._options, built)

    def next_done(self, handles):
        ready, _ = ray.wait(handles, num_returns=1)
        return ready[0], ray.get(ready[0])

    def close(self) -> None:
        """Nothing to release: Ray owns the tasks (the thread executor's close stops its pool)."""


def bench_actor(*args):
    """Beside the supervisor, where the repository and this node's environments are."""
    return actor_classes()["bench"].options(scheduling_strategy=here()).remote(*args)
