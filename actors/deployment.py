"""The driver's side: start Ray, the shared store and gateway actors, and one supervisor per run."""
from __future__ import annotations

import logging
import os
import uuid

import ray

from magis_ray.events.schema import Recorded, RunFailed, RunFinished, RunSettings

from .issue import IssueRecord
from .remote import NAMESPACE, actor_classes, gateway_actor, store_actor


def ensure_ray(address: str | None = None) -> None:
    if not ray.is_initialized():
        # Ray announces its (kept) default of token authentication on every start; not news to our users.
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS") or None, namespace=NAMESPACE,
            include_dashboard=False, log_to_driver=False, configure_logging=False,
        )


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def run_issue(
    *,
    store_path: str,
    issue: IssueRecord,
    settings: RunSettings,
    repo_path: str,
    gateway_config,
    run_id: str,
    recorded: list[Recorded] | None = None,
    memory_before: int | None = None,
) -> RunFinished | RunFailed:
    """Run (or, with `recorded`, resume) one issue on Ray; returns the run's terminal event."""
    ensure_ray()
    store = store_actor(os.path.abspath(store_path))
    gateway = gateway_actor(gateway_config)
    if settings.token_budget:
        ray.get(gateway.set_budget.remote(run_id, settings.token_budget))
    supervisor = actor_classes()["supervisor"].remote(
        run_id, issue, settings, os.path.abspath(repo_path), store, gateway, recorded, memory_before,
    )
    try:
        return ray.get(supervisor.run.remote())
    finally:
        ray.kill(supervisor)
