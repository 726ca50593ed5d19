"""The one place where Ray is applied to the plain service classes: resources and options."""
from __future__ import annotations

from functools import cache

import msgspec
import ray

from .services import CustodianService, DeveloperService, GatewayService, QAService, StoreService
from .supervisor import SupervisorService

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


# The driver keeps its handles to the shared actors for as long as it lives: Ray ends an actor
# once no handle to it is left in its owner.
_shared: dict[str, object] = {}


def store_actor(path: str):
    """The store's single owner, shared by every run that uses that store path."""
    name = f"store:{path}"
    if name not in _shared:
        _shared[name] = actor_classes()["store"].options(name=name, namespace=NAMESPACE, get_if_exists=True).remote(path)
    return _shared[name]


def gateway_actor(config, name: str = "gateway"):
    """The gateway for `config`; one per distinct model endpoint and settings."""
    key = f"{name}:{hash(msgspec.json.encode(config))}"
    if key not in _shared:
        _shared[key] = actor_classes()["gateway"].options(name=key, namespace=NAMESPACE, get_if_exists=True).remote(config)
    return _shared[key]
