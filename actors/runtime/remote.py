"""The one place where Ray is applied to the plain service classes: resources, options, placement.

Placement: the store, the gateway, each run's supervisor and its Custodian live on the driver's
node (the store's file and the repositories are there); Developers and QA Engineers need only
their task's data, so they spread over the cluster."""
from __future__ import annotations

from functools import cache

import msgspec
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from magis_ray.actors.runtime.services import CustodianService, DeveloperService, GatewayService, QAService, StoreService
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
    }


def here() -> NodeAffinitySchedulingStrategy:
    """This process's node, and no other."""
    return NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)


# The driver keeps its handles to the shared actors for as long as it lives: Ray ends an actor
# once no handle to it is left in its owner.
_shared: dict[str, object] = {}


def store_actor(path: str):
    """The store's single owner, shared by every run that uses that store path."""
    name = f"store:{path}"
    if name not in _shared:
        _shared[name] = actor_classes()["store"].options(
            name=name, namespace=NAMESPACE, get_if_exists=True, scheduling_strategy=here()
        ).remote(path)
    return _shared[name]


def gateway_actor(config, name: str = "gateway"):
    """The gateway for `config`: one per distinct model endpoint and settings, shared by every run."""
    key = f"{name}:{hash(msgspec.json.encode(config))}"
    if key not in _shared:
        _shared[key] = actor_classes()["gateway"].options(
            name=key, namespace=NAMESPACE, get_if_exists=True, scheduling_strategy=here()
        ).remote(config)
    return _shared[key]


def supervisor_actor(*args):
    roles = RoleActors(custodian=custodian_actor, developer=developer_actor, qa=qa_actor)
    return actor_classes()["supervisor"].options(scheduling_strategy=here()).remote(*args, roles=roles)


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
        pass
