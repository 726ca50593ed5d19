"""The driver's side: start Ray, the shared store and gateway actors, and one supervisor per run."""
from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import ray

from magis_ray.events.errors import MagisError, Unavailable
from magis_ray.events.codec import new_event
from magis_ray.events.schema import LLMExchanged, Recorded, RunFailed, RunFinished, RunSettings

from magis_ray.actors.runtime.continuation import ResumePoint
from magis_ray.actors.runtime.issue import IssueRecord
from magis_ray.actors.runtime.liveness import Liveness
from magis_ray.actors.runtime.remote import (NAMESPACE, answers, carry, gateway_actor, gateway_name, pool_actor, store_actor,
                                             supervisor_actor)
from magis_ray.actors.runtime.replay import issue_of
from magis_ray.actors.runtime.services import root_cause
from magis_ray.store import Fenced
from magis_ray.events.settings import NODE_ENV, NODE_OWN, NodeSettings, node_settings, process_environment

INTERRUPTED = "interrupted by the user"
# The ending of a run a signal stopped: resumable
STOPPED = RunFailed(reason=INTERRUPTED, error_type="Interrupted", resumable=True)


SETTINGS_PREFIX = "MAGIS_"
# Imported first in each worker of a Ray we start: lean_workers.py says why.
LEAN_WORKERS = "magis_ray.actors.runtime.lean_workers"
# What Ray sets on the driver of a `ray job submit` job: the job's runtime env travels in it.
JOB_CONFIG_VARIABLE = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def carried_settings(address: str, environ: dict[str, str]) -> dict[str, str]:
    """The driver's MAGIS_* settings (prompt templates, log level) its actors and tasks take on where
    they run (remote.carry); what belongs to a node (its environment cache, scratch, sandbox uids and
    cgroup) each node resolves from its own environment.

    A Ray of our own needs none: its processes inherit the driver's environment. A cluster's
    workers start from their node's, so a driver that joins one carries its settings along; under
    `ray job submit` the job's env_vars already reach every worker. Only MAGIS_* variables go:
    never the API key (docs/guides/cluster.md keeps the key in the head's environment)."""
    if address == "local" or JOB_CONFIG_VARIABLE in environ:
        return {}
    own = {NODE_ENV[name] for name in NODE_OWN}  # each node resolves these from its own environment
    return {name: value for name, value in environ.items() if name.startswith(SETTINGS_PREFIX) and name not in own}


# Ray runs its workers at nice 15 by default, below the driver. Here every role, build and test
# runs in a worker while the driver only waits, so on a busy machine a run would crawl (about five
# times as long beside two busy loops: benchmarks/busy_machine.py) and its tests would use up their
# wall-time limits waiting for a CPU. Ray's job manager runs a job's own workers at 0 for the same reason.
WORKER_NICENESS = 0


def own_ray_config(address: str) -> dict:
    """What a Ray we start gets (a cluster's was set when its nodes started, docs/guides/cluster.md): its
    workers import LEAN_WORKERS first and run at the driver's priority."""
    if address != "local":
        return {}
    return {"_system_config": {"preload_python_modules": [LEAN_WORKERS], "worker_niceness": WORKER_NICENESS}}


class RayStartFailed(Unavailable):
    """Ray did not start (or the Ray named could not be joined); the message is the one line the user sees."""


def ray_failure(exc: BaseException) -> MagisError | None:
    """A failure of Ray itself (an actor or a node gone, a task that could not run) as the one line
    the user sees: its root cause's first line (Ray wraps it in tracebacks); None for anything
    else. One of ours that crossed an actor is its own root cause, and stays itself."""
    if not isinstance(exc, ray.exceptions.RayError):
        return None
    cause = root_cause(exc)
    if isinstance(cause, MagisError):
        return cause
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    # Ray's own errors put "Traceback"/frames after a first line that names the failure
    first = next((line for line in lines if not line.startswith(("Traceback", "File ", "^"))), type(cause).__name__)
    return Unavailable(f"Ray: {type(cause).__name__}: {first}"[:300])


def warm_local_ray(node: NodeSettings) -> str | None:
    """The address of a Ray that `ray start --head` left running on this machine, if its GCS
    answers: Ray records the last one it started in its temp dir (RAY_TMPDIR, else /tmp/ray).
    None when MAGIS_RAY=own, when none was started, when the recorded one is gone, or when another
    user recorded it: on a machine people share (a login node, a CI runner) /tmp/ray is everyone's,
    and another user's Ray is not this user's to run work in."""
    from ray._private.utils import get_ray_address_file

    if node.ray == "own":
        return None
    try:
        with open(get_ray_address_file(None)) as recorded:
            if os.fstat(recorded.fileno()).st_uid != os.getuid():
                return None
            address = recorded.read().strip()
    except OSError:
        return None
    if not address or ":" not in address:
        return None
    return address if answers_at(address) else None


def answers_at(address: str) -> bool:
    """Whether a Ray's GCS listens at `address` (host:port)."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def ray_address(node: NodeSettings) -> str:
    """Where this driver's Ray is: the cluster RAY_ADDRESS names (as `ray job submit` sets it), else
    a warm local Ray (warm_local_ray), else "local", a Ray of our own."""
    return node.ray_address or warm_local_ray(node) or "local"


class RayGone(Unavailable):
    """The Ray this driver ran on went away under it; the message is the one line that says which."""


_joined: list[str] = []  # the address of a Ray this process joined rather than started


def ray_gone() -> str | None:
    """The address of this process's Ray when its GCS no longer answers; None while it does, or
    when no Ray was started or joined."""
    if not ray.is_initialized():
        return None
    address = ray.get_runtime_context().gcs_address
    return None if answers_at(address) else address


def gone_ray(exc: Exception) -> RayGone | None:
    """What a Ray error means when the Ray itself is gone: a joined one, named by its address;
    None while it still answers (the error is the run's own)."""
    address = ray_gone()
    if address is None:
        return None
    whose = "the Ray this command joined" if _joined else "this command's own Ray"
    return RayGone(f"{whose} at {address} is gone (Ray: {type(root_cause(exc)).__name__})")


def ensure_ray(address: str | None = None) -> str:
    """Join the cluster RAY_ADDRESS names, or a warm local Ray, else start a Ray of our own; the
    address used. RayStartFailed (one line: Ray's reason and where its logs are) when it cannot."""
    if ray.is_initialized():
        return ray.get_runtime_context().gcs_address
    # Ray announces its (kept) default of token authentication on every start; not news to our users.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    node = node_settings()
    address = address or ray_address(node)
    # a start that ran out of time is tried again until node.ray_start_s has passed; any other
    # failure is not
    deadline = time.monotonic() + node.ray_start_s
    while True:
        try:
            with signal_handlers_kept():
                ray.init(address=address, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
                         configure_logging=False, **own_ray_config(address))
            carry(carried_settings(address, process_environment()))
            if address != "local":
                _joined.append(address)
            return address
        except Exception as exc:  # noqa: BLE001 - Ray raises bare Exceptions, RuntimeErrors and OSErrors here
            ray.shutdown()  # ends what a half-made start left running
            if address == "local" and start_timed_out(exc) and time.monotonic() < deadline:
                continue
            raise RayStartFailed(start_failure(address, exc)) from None


@contextmanager
def signal_handlers_kept():
    """Ray's start as this process's signal handlers stand. ray.init would set SIGTERM handlers of
    its own (one exits with status 15, a Ray it starts ends its processes and exits with 1), and the
    driver's core worker a crash handler that also takes SIGTERM (a C++ stack, then exit 15 or
    134): a command stopped during or just after the start would end without its line. So Ray is
    kept from setting them; its workers keep their crash handler, which this process's setting
    does not reach.

    A stop (KeyboardInterrupt) raised where Python cannot raise, in the at-fork callbacks while Ray
    starts its processes, would be printed with a stack and ignored: it is kept, and raised once the
    start returns or fails."""
    import ray._private.ray_constants as ray_constants
    import ray._private.utils as ray_utils

    crash_handler, set_handler = ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER, ray_utils.set_sigterm_handler
    reporting, lost = sys.unraisablehook, []

    def keep_a_lost_stop(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            lost.append(unraisable.exc_value)
        else:
            reporting(unraisable)

    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    ray_utils.set_sigterm_handler = lambda handler: None
    sys.unraisablehook = keep_a_lost_stop
    try:
        yield
    except Exception:
        if lost:  # the start failed because it was stopped
            raise KeyboardInterrupt from None
        raise
    finally:
        ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER, ray_utils.set_sigterm_handler = crash_handler, set_handler
        sys.unraisablehook = reporting
    if lost:
        raise KeyboardInterrupt


def start_timed_out(exc: BaseException) -> bool:
    return "timed out" in str(exc).lower()


def start_failure(address: str, exc: BaseException) -> str:
    """The one line of a Ray that did not start: its reason's first line, and its session's logs."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = (lines[0] if lines else type(exc).__name__).rstrip(".")
    if address != "local":
        return f"cannot join the Ray at {address}: {reason}"
    logs = own_session_logs()
    # a start that ran out of time every time: the machine is busy, and a Ray started once stays warm
    warm = "; on a busy machine, start a Ray once with `ray start --head` and submit beside it" if start_timed_out(exc) else ""
    return f"Ray did not start: {reason}" + (f"; its logs: {logs}" if logs else "") + warm


def own_session_logs() -> str:
    """The logs folder of the Ray session this process started: Ray names a session's folder after
    the time and the pid of the process that started it."""
    from ray._common.utils import get_default_ray_temp_dir

    try:
        sessions = sorted(Path(get_default_ray_temp_dir()).glob(f"session_*_{os.getpid()}"))
    except OSError:
        return ""
    return str(sessions[-1] / "logs") if sessions else ""


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def tokens_spent(events: list[Recorded]) -> int:
    """Every token the run's log says was paid for, superseded exchanges included."""
    return sum(r.event.prompt_tokens + r.event.completion_tokens for r in events if isinstance(r.event, LLMExchanged))


def batch_budget_key(batch: str) -> str:
    return f"batch:{batch}"


@dataclass
class RunningRun:
    """A run in flight: its supervisor actor and the reference to its terminal event."""

    run_id: str
    supervisor: object
    tested: bool  # its supervisor's runs have a bench
    fence: int = 0  # the epoch of this driver's lease on the run
    result: object = None  # ObjectRef of RunFinished | RunFailed, once the supervisor is asked


def taken_over(run_id: str) -> Fenced:
    return Fenced(f"run {run_id} was taken over by another driver; this one stops")


class Deployment:
    """The shared actors of one store and one model endpoint, the runs started on them, and this
    driver's leases on those runs (one live driver per run).

    It keeps its supervisors, and its pool keeps the role actors, between runs: a batch starts
    each process once, and its later runs reuse them (remote.RolePool says why). A run that did
    not end normally (cut off, taken over, its supervisor lost) takes its actors with it."""

    def __init__(self, store_path: str, gateway_config, liveness: Liveness | None = None):
        # the leases are the caller's when it gives them (it closes them), else this deployment's
        self._own_liveness = liveness is None
        self.liveness = liveness or Liveness(store_path)
        ensure_ray()
        self.store = store_actor(os.path.abspath(store_path))
        self.gateway = gateway_actor(gateway_config)
        ray.get(self.store.uses_gateway.remote(gateway_name(gateway_config)))
        self._pool = None
        self._idle: dict[bool, list] = {False: [], True: []}  # supervisors whose run ended normally, by `tested`
        self.asked: dict[str, RunningRun] = {}  # the runs a supervisor was asked to run, by id

    @property
    def pool(self):
        """The pool of this driver's role actors (made with the first run)."""
        if self._pool is None:
            self._pool = pool_actor()
        return self._pool

    def _supervisor(self, tested: bool):
        """An idle supervisor that still answers, or a new one. Only a supervisor of tested runs
        has the driver's placements: a driver whose runs are not tested starts no actor for them."""
        idle = self._idle[tested]
        while idle:
            supervisor = idle.pop()
            if answers(supervisor):
                return supervisor
            ray.kill(supervisor)
        return supervisor_actor(self.pool, tested)

    def start(self, *, issue: IssueRecord, settings: RunSettings, repo_path: str, run_id: str,
              recorded: list[Recorded] | None = None, resume: ResumePoint | None = None,
              fence: int | None = None) -> RunningRun:
        """Start (or resume) a run; RunIsLive when another driver holds it. `fence`: the epoch of
        the run's lease when the caller took it already (else it is taken here)."""
        fence = self.liveness.take(run_id) if fence is None else fence
        spent = 0
        if resume is not None:
            spent = tokens_spent(ray.get(self.store.read.remote(run_id)))
            ray.get(self.store.append_next.remote(run_id, [new_event(resume.marker(), "resume")], fence))
        if settings.token_budget:
            # A resumed run has spent part of its budget already: the gateway holds it to the rest.
            ray.get(self.gateway.set_budget.remote(run_id, max(settings.token_budget - spent, 1)))
        if settings.batch:
            ray.get(self.gateway.join_batch.remote(run_id, batch_budget_key(settings.batch)))
        # known before the supervisor is asked: a stop from here on ends the run (interrupt), whether
        # or not the supervisor has begun its log
        run = self.asked[run_id] = RunningRun(run_id, self._supervisor(settings.tests), settings.tests, fence)
        run.result = run.supervisor.run.remote(run_id, issue, settings, os.path.abspath(repo_path), self.store,
                                               self.gateway, recorded, fence)
        return run

    def lost(self, run: RunningRun) -> bool:
        """Another driver took the run over (this one stalled past its lease)."""
        return self.liveness.lost(run.run_id)

    def finish(self, run: RunningRun) -> RunFinished | RunFailed:
        """The run's terminal event. Fenced (one line) when another driver took the run over."""
        ended = False
        try:
            while not ray.wait([run.result], timeout=self.liveness.ttl_s / 3)[0]:
                if self.lost(run):
                    raise taken_over(run.run_id)
            try:
                end = ray.get(run.result)
                ended = True
                return end
            except ray.exceptions.RayTaskError as exc:
                cause = root_cause(exc)
                if isinstance(cause, Fenced):
                    raise taken_over(run.run_id) from None
                raise
        finally:
            if ended:
                self._idle[run.tested].append(run.supervisor)
                self.asked.pop(run.run_id, None)
            else:
                self._end(run)
            self.liveness.release(run.run_id)

    def _end(self, run: RunningRun) -> None:
        """A run cut off: its supervisor, and the role actors it still holds."""
        ray.kill(run.supervisor)
        self.pool.end_run.remote(run.run_id)

    def interrupt(self, run: RunningRun) -> RunFailed | None:
        """Stop a run's actors and end its log resumably; the store refuses any late append once
        the log has ended. None: the run was stopped before its log began, and nothing of it is
        recorded, nor ever will be (its supervisor's first events, late, are refused too)."""
        self._end(run)
        try:
            ended = ray.get(self.store.end.remote(run.run_id, [new_event(STOPPED, "driver")], run.fence))
        finally:
            self.asked.pop(run.run_id, None)
            self.liveness.release(run.run_id)
        return STOPPED if ended else None

    def close(self) -> None:
        """End the kept supervisors and role actors (the driver's exit ends them too), and the
        leases when they are this deployment's."""
        for supervisor in [*self._idle[False], *self._idle[True]]:
            ray.kill(supervisor)
        self._idle = {False: [], True: []}
        if self._pool is not None:
            ray.kill(self._pool)
            self._pool = None
        if self._own_liveness:
            self.liveness.close()


def run_issue(*, store_path: str, issue: IssueRecord, settings: RunSettings, repo_path: str, gateway_config,
              run_id: str, resume: ResumePoint | None = None, liveness: Liveness | None = None,
              fence: int | None = None) -> RunFinished | RunFailed | None:
    """Run (or resume) one issue on Ray; returns the run's terminal event. Ctrl-C ends the log
    resumably, or returns None when the run had not begun it (nothing of it is recorded).
    `liveness` and `fence`: the driver's leases and the run's epoch, when it took the run's lease
    already (the lease is taken once)."""
    try:
        deployment = Deployment(store_path, gateway_config, liveness)
        try:
            return deployment.finish(deployment.start(
                issue=issue, settings=settings, repo_path=repo_path, run_id=run_id,
                recorded=resume.recorded if resume else None, resume=resume, fence=fence,
            ))
        except KeyboardInterrupt:
            if run_id not in deployment.asked:
                raise  # no supervisor was asked to run it: nothing of it is recorded
            return deployment.interrupt(deployment.asked[run_id])
        finally:
            deployment.close()
    except ray.exceptions.RayError as exc:
        gone = gone_ray(exc)
        if gone is None:
            raise
        raise gone from None


def resume_issue(*, store_path: str, run_id: str, point: ResumePoint, repo_path: str, gateway_config,
                 liveness: Liveness | None = None, fence: int | None = None) -> RunFinished | RunFailed | None:
    """Go on with a cut-off run: mark what is superseded, then re-live the log and continue."""
    return run_issue(
        store_path=store_path, issue=issue_of(point.started), settings=point.started.settings, repo_path=repo_path,
        gateway_config=gateway_config, run_id=run_id, resume=point, liveness=liveness, fence=fence,
    )

