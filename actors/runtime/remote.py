"""The one place where Ray is applied to the plain service classes: resources, options, placement.

Placement: the store, the gateway, each run's supervisor and its Custodian live on the driver's
node (the store's file and the repositories are there); Developers and QA Engineers need only
their task's data, so they spread over the cluster."""
from __future__ import annotations

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
    roles = RoleActors(custodian=custodian_actor, developer=developer_actor, qa=qa_actor, bench=bench_actor)
    return actor_classes()["supervisor"].options(scheduling_strategy=here()).remote(*args, roles=roles)


def custodian_actor(*args):
    """Beside the supervisor, where the repository is."""
    return actor_classes()["custodian"].options(scheduling_strategy=here()).remote(*args)


def developer_actor(*args):
    return actor_classes()["developer"].options(scheduling_strategy="SPREAD").remote(*args)


def qa_actor(*args):
    return actor_classes()["qa"].options(scheduling_strategy="SPREAD").remote(*args)


def bench_actor(*args):
    """Beside the supervisor, where the repository and this node's environments are."""
    return actor_classes()["bench"].options(scheduling_strategy=here()).remote(*args)
