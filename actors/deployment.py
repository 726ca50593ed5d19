"""The driver's side: start Ray, the shared store and gateway actors, and one supervisor per run."""
from __future__ import annotations

import logging
import os
import uuid

import ray

from magis_ray.events.codec import new_event
from magis_ray.events.schema import Recorded, RunFailed, RunFinished, RunSettings

from .continuation import ResumePoint
from .issue import IssueRecord
from .remote import NAMESPACE, actor_classes, gateway_actor, store_actor
from .replay import issue_of


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


INTERRUPTED = "interrupted by the user"


def run_issue(
    *,
    store_path: str,
    issue: IssueRecord,
    settings: RunSettings,
    repo_path: str,
    gateway_config,
    run_id: str,
    recorded: list[Recorded] | None = None,
) -> RunFinished | RunFailed:
    """Run (or, with `recorded`, resume) one issue on Ray; returns the run's terminal event.
    Ctrl-C stops the run's actors and ends its log with a resumable RunFailed."""
    ensure_ray()
    store = store_actor(os.path.abspath(store_path))
    gateway = gateway_actor(gateway_config)
    if settings.token_budget:
        ray.get(gateway.set_budget.remote(run_id, settings.token_budget))
    supervisor = actor_classes()["supervisor"].remote(
        run_id, issue, settings, os.path.abspath(repo_path), store, gateway, recorded,
    )
    try:
        return ray.get(supervisor.run.remote())
    except KeyboardInterrupt:
        # The supervisor owns every role actor of the run: they end with it, and the store
        # refuses any late append once the log has ended.
        ray.kill(supervisor)
        end = RunFailed(reason=INTERRUPTED, error_type="Interrupted", resumable=True)
        ray.get(store.append_next.remote(run_id, [new_event(end, "driver")]))
        return end
    finally:
        ray.kill(supervisor)


def resume_issue(*, store_path: str, run_id: str, point: ResumePoint, repo_path: str, gateway_config) -> RunFinished | RunFailed:
    """Go on with a cut-off run: mark what is superseded, then re-live the log and continue."""
    ensure_ray()
    store = store_actor(os.path.abspath(store_path))
    ray.get(store.append_next.remote(run_id, [new_event(point.marker(), "resume")]))
    return run_issue(
        store_path=store_path, issue=issue_of(point.started), settings=point.started.settings, repo_path=repo_path,
        gateway_config=gateway_config, run_id=run_id, recorded=point.recorded,
    )
