"""A batch uses the cluster well. A run holds a core only while one of its builds or test runs
runs, never while it waits on the model, so a batch of more runs than the cluster has cores has more
of them in their bench phase at once than it has cores, their test runs interleaved. A batch starts its processes
once: its later runs' agents are served by the role actors its earlier ones used. A worker process
loads none of Ray's serializer add-ons (pyarrow), which no role needs.

Real throughout: Ray with one CPU started as magis-ray starts its own, the calc repository, an
environment built from PyPI into a cache of this module's own, bubblewrap, the scripted model over
HTTP."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest
from rayheads import local_ray_started
from scenarios import MEAN_FIX, calc_issue, make_calc_repo

from magis_ray.actors.execution.sandbox import bwrap_path
from magis_ray.actors.model.gateway import GatewayConfig
from magis_ray.events.settings import EndpointSettings
from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.actors.runtime.batch import BatchItem, BatchRunner, batch_settings
from magis_ray.actors.runtime.deployment import Deployment
from magis_ray.events.schema import RunSettings
from magis_ray.events import schema
from magis_ray.store import open_store

CORES = 1
RUNS = 2 * CORES + 1  # more than twice the cores: on a busy machine some reach their bench phase late
REPRODUCES = "from calc.stats import mean\n\n\ndef test_mean_of_four():\n    assert mean([1, 2, 3, 4]) == 2.5\n"

needs_sandbox = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")


@pytest.fixture(scope="module")
def ray_with_env_cache(tmp_path_factory):
    """A Ray of this module's own with CORES CPUs, configured as magis-ray configures the Ray it
    starts, whose workers find the environments in a cache of this module's own (they inherit
    MAGIS_ENV_CACHE from this process at ray.init)."""
    import ray

    from magis_ray.actors.runtime import remote

    before = os.environ.get("MAGIS_ENV_CACHE")
    os.environ["MAGIS_ENV_CACHE"] = str(tmp_path_factory.mktemp("envs"))
    local_ray_started(num_cpus=CORES)
    try:
        yield ray
    finally:
        remote.forget_shared()
        ray.shutdown()
        if before is None:
            os.environ.pop("MAGIS_ENV_CACHE", None)
        else:
            os.environ["MAGIS_ENV_CACHE"] = before


def bench_phases(logs: dict[str, list]) -> dict[str, tuple[float, float]]:
    """Per run, from the start of its first test run to the end of its last (the environment's
    preparation aside). A TestsRan is logged when its run ends, after `duration_s` of it."""
    phases = {}
    for run_id, events in logs.items():
        runs = [(r.time - r.event.duration_s, r.time) for r in events if isinstance(r.event, schema.TestsRan) and r.event.purpose != "prepare"]
        phases[run_id] = (min(start for start, _ in runs), max(end for _, end in runs))
    return phases


def most_at_once(phases: dict[str, tuple[float, float]]) -> int:
    """The most phases under way at one moment."""
    moments = sorted((time, step) for start, end in phases.values() for time, step in ((start, 1), (end, -1)))
    under_way = most = 0
    for _, step in moments:  # an end before a start at the same moment: touching phases do not overlap
        under_way += step
        most = max(most, under_way)
    return most


@needs_sandbox
def test_a_batch_of_more_runs_than_cores_runs_their_bench_phases_at_once(ray_with_env_cache, tmp_path):
    ray = ray_with_env_cache
    assert ray.cluster_resources()["CPU"] == CORES
    repos = tmp_path / "repos"
    _, base = make_calc_repo(repos / "calc__calc")
    repo = repos / "calc__calc"
    items = [BatchItem(f"calc__calc-{i}", calc_issue(repo, base, instance_id=f"calc__calc-{i}")) for i in range(1, RUNS + 1)]
    # Each call of the Developer's, between the reproduction's test run and the patch's check, waits a
    # second, as a model does: a run spends most of its bench phase waiting on it, long enough for
    # more runs than cores to be in their bench phase at one moment.
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX]}, reproductions=[REPRODUCES], delay_s=1.0,
                        slow=("design_qa", "locate_lines", "write_code"))
    store_path = tmp_path / "store"
    with ScriptedServer(team) as server:
        deployment = Deployment(str(store_path), GatewayConfig(base_url=server.base_url, api_key="k", model="m", endpoint=EndpointSettings(concurrency=64)))
        try:
            with open_store(str(store_path), create=True) as store:
                settings = batch_settings(RunSettings(top_k=4, model="m", tests=True, env_setup="python -m pip install pytest"), "bench")
                results = BatchRunner(deployment, store, settings, str(repos), workers=RUNS).run(items)
                logs = {info.run_id: store.read(info.run_id) for info in store.list_runs()}
        finally:
            deployment.close()

    assert [(r.status, r.outcome) for r in results] == [("finished", "patched")] * RUNS
    tested = {run_id: [r.event for r in events if isinstance(r.event, schema.TestsRan)] for run_id, events in logs.items()}
    for runs in tested.values():  # the environment ready; the reproduction, the regression baseline, the patch's check
        assert [(t.purpose, t.outcome) for t in runs] == [("prepare", "passed"), ("reproduce", "failed"), ("baseline", "failed"),
                                                          ("check", "failed")]
        assert "test_magis_reproduction.py::test_mean_of_four" in runs[-1].passed

    # There was a moment when more runs than cores were in their bench phase (on a busy machine the
    # runs reach it at different times, so not necessarily all of them at one moment)
    phases = bench_phases(logs)
    first = min(start for start, _ in phases.values())
    assert most_at_once(phases) > CORES, {run: (round(s - first, 1), round(e - first, 1)) for run, (s, e) in phases.items()}
    # and the test runs of different runs interleave: between a run's first and its last, another's ran
    ordered = sorted((r.time, run_id) for run_id, events in logs.items() for r in events
                     if isinstance(r.event, schema.TestsRan) and r.event.purpose != "prepare")
    for run_id, (start, end) in phases.items():
        assert any(start < time < end and other != run_id for time, other in ordered), run_id


def test_a_batch_reuses_its_role_actors_run_after_run(ray_with_env_cache, tmp_path):
    repos = tmp_path / "repos"
    _, base = make_calc_repo(repos / "calc__calc")
    runs = 2  # the second run's agents are served by the actors the first one's used
    items = [BatchItem(f"calc__calc-{i}", calc_issue(repos / "calc__calc", base, instance_id=f"calc__calc-{i}")) for i in range(1, runs + 1)]
    with ScriptedServer(ScriptedTeam({"calc/stats.py": [MEAN_FIX]})) as server:
        deployment = Deployment(str(tmp_path / "store"), GatewayConfig(base_url=server.base_url, api_key="k", model="m"))
        try:
            with open_store(str(tmp_path / "store"), create=True) as store:
                settings = batch_settings(RunSettings(tests=False, top_k=4, model="m"), "reuse")
                results = BatchRunner(deployment, store, settings, str(repos), workers=1).run(items)
            counts = ray_with_env_cache.get(deployment.pool.counts.remote())
        finally:
            deployment.close()
    assert [(r.status, r.outcome) for r in results] == [("finished", "patched")] * runs
    # one Custodian, one Developer and one QA Engineer served both runs, and wait for the next
    assert counts == {"started": 3, "idle": 3, "lent": 0}


def test_a_worker_process_loads_no_serializer_addon_and_can_still_import_one(ray_with_env_cache):
    if importlib.util.find_spec("pyarrow") is None:
        pytest.skip("pyarrow is not installed (the grade extra installs it): nothing for Ray to load")
    ray = ray_with_env_cache

    @ray.remote(num_cpus=0)
    class Probe:
        def __init__(self, argument: dict):  # an argument: the worker has deserialized something
            self.argument = argument

        def loaded(self) -> tuple[bool, bool]:
            before = "pyarrow" in sys.modules
            import pyarrow  # noqa: F401 - a grading task imports it through swebench

            return before, "pyarrow" in sys.modules

    # an environment of its own: a new worker process, never one an earlier test's tasks used
    probe = Probe.options(runtime_env={"env_vars": {"MAGIS_PROBE": str(os.getpid())}}).remote({"a": [1, 2]})
    assert ray.get(probe.loaded.remote()) == (False, True)


def test_the_workers_run_at_the_drivers_priority(ray_with_env_cache):
    """Every role, build and test runs in a worker; at Ray's default of nice 15 they would wait
    behind anything else the machine runs."""
    ray = ray_with_env_cache

    @ray.remote(num_cpus=0)
    class Role:
        def niceness(self) -> int:
            return os.nice(0)

    @ray.remote(num_cpus=1)
    def build() -> int:
        return os.nice(0)

    assert ray.get(Role.remote().niceness.remote()) == os.nice(0)
    assert ray.get(build.remote()) == os.nice(0)
