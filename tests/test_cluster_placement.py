"""The heavy half on a Ray cluster on this machine (`ray.cluster_utils.Cluster`): a head and two
workers, each node with a cache root of its own (MAGIS_ENV_CACHE in its environment, as `ray start`
passes it). A batch with tests on runs its tests on more than one node while the repository is only
on the driver's (the nodes get its commits through the object store and keep copies in their own
caches), its submodules' commits with them; and a batch with tests on whose node is lost mid-batch
builds and runs the tests of that node's runs again elsewhere, recording each once. All of them
build environments from PyPI on several nodes, and are under `slow`; `magis-ray doctor` on a
cluster and a grading that loses a node are test_cluster.py's, on its cluster, with the helpers
here.

Real throughout: Ray's raylets, the calc repository, environments built from PyPI, git, the
scripted model over HTTP; a run's test runs may wait at a gate on the host (a file the test
makes), which holds them until the node is removed."""
from __future__ import annotations

import contextlib
import json
import socket
import tempfile
import threading
import uuid
from pathlib import Path

import pytest
from clusters import nodes_with_own_caches
from execfixtures import GOLD, make_calc_repos_with_submodule, submodule_record, write_dataset
from processes import cmdline_of, tree_of
from scenarios import MEAN_FIX, calc_issue
from waiting import wait_until

from magis_ray.actors.execution.sandbox import bwrap_path
from magis_ray.events import schema
from magis_ray.events.schema import InstanceGraded
from magis_ray.store import open_store


@pytest.fixture(scope="module")
def cluster():
    """A head (the driver's node) and two workers, each with its own cache root."""
    with nodes_with_own_caches("mrp-") as made:
        yield made


def copies_in(cache: Path) -> list[Path]:
    """The repository copies a node keeps in its cache."""
    return sorted((cache / "repositories").glob("*/calc__calc"))


# --- helpers: a gated grading, a lost worker (test_cluster.py's grading uses them too) -------

def gated(gate: Path) -> str:
    """The fixture's test command, held until `gate` exists (its path carries a uuid, so the
    waiting process is found by its command line, below a raylet the test started)."""
    return f"sh -c 'until [ -e {gate} ]; do sleep 0.05; done' && pytest -rA"


def waiting_on_a_worker(cluster, gate: Path):
    """The worker node (its Node) one of whose processes waits at the gate, or None."""
    for node in cluster.worker_nodes:
        raylet = node.all_processes["raylet"][0].process.pid
        if any(str(gate) in cmdline_of(pid) for pid in tree_of(raylet)):
            return node
    return None


def lose_a_worker_midway(cluster, gate: Path, work, what: str):
    """Run `work()` in a thread; once `what` waits at `gate` on a worker node, take that node down
    without warning, then open the gate. (the lost node's id, what `work` returned)."""
    outcome: dict = {}
    thread = threading.Thread(target=lambda: outcome.update(result=work()))
    thread.start()
    try:
        victim = wait_until(lambda: waiting_on_a_worker(cluster, gate), f"{what} waits at the gate on a worker node",
                            timeout_s=1800, while_running=thread)
        cluster.remove_node(victim, allow_graceful=False)
    finally:
        gate.touch()
        thread.join(timeout=1800)  # a bound for a hang, not a timing
    assert not thread.is_alive(), f"{what} did not finish"
    return victim.node_id, outcome["result"]


def grading_options(root: Path, dataset: Path, predictions: Path, gate: Path, **changes):
    from magis_ray.actors.swebench.grading_service import GradingOptions

    from magis_ray.events.settings import GradeSettings

    return GradingOptions(dataset=str(dataset), repos_dir=str(root / "repos"), store=str(root / "store"),
                          predictions=str(predictions),
                          grade=GradeSettings(test_cmd=gated(gate), sandbox="none", timeout=300, memory="2G", workers=3),
                          **{"env_cache": str(root / "envs"), **changes})


def verdicts(results: list[InstanceGraded]) -> dict[str, tuple]:
    return {r.instance_id: (r.resolved, r.completed, r.tests_status) for r in results}


def write_predictions(path: Path, patches: dict[int, str]) -> Path:
    path.write_text("".join(json.dumps({"instance_id": f"calc__calc-{n}", "model_name_or_path": "m",
                                        "model_patch": p}) + "\n" for n, p in patches.items()))
    return path


# --- submodules through Ray -------------------------------------------------------------------

@pytest.mark.slow  # each node builds the environment from PyPI
def test_a_node_grades_an_instance_whose_tests_import_a_submodule_from_the_commits_that_arrived_through_ray(
        cluster, tmp_path):
    from magis_ray.actors.swebench.grading_service import plan_grading, run_grading_plan

    _, base, _ = make_calc_repos_with_submodule(tmp_path / "repos")  # the submodule's mirror beside it: the driver's alone
    dataset = write_dataset(tmp_path / "calc.jsonl", [submodule_record(base, n) for n in (1, 2, 3)])
    predictions = write_predictions(tmp_path / "preds.jsonl", {1: GOLD, 2: GOLD, 3: GOLD})
    gate = Path(tempfile.gettempdir()) / f"mrp-gate-{uuid.uuid4().hex}"
    gate.touch()  # open: nothing waits
    try:
        done = run_grading_plan(plan_grading(grading_options(tmp_path, dataset, predictions, gate, name="submodules")))
    finally:
        gate.unlink()
    # the tests import the submodule's module: they pass only where the submodule was checked out
    assert done.report["resolved_ids"] == [f"calc__calc-{n}" for n in (1, 2, 3)], done.report
    graded_on = {r.node for r in done.results}
    assert graded_on & {n.node_id for n in cluster.worker_nodes}, graded_on
    # each node checked the submodule out from the copy that arrived in its own cache
    for node in graded_on:
        copies = str(cluster.caches[node] / "repositories")
        logs = [p.read_text() for p in (cluster.caches[node] / "testbeds").glob("*/logs/testbed.log")]
        assert any(f"submodule vendor/helpers: checked out from the local mirror {copies}/" in log for log in logs), logs


# --- a batch with tests on --------------------------------------------------------------------

REPRODUCES = "from calc.stats import mean\n\n\ndef test_mean_of_four():\n    assert mean([1, 2, 3, 4]) == 2.5\n"


@contextlib.contextmanager
def calc_batch(tmp_path, settings):
    """A batch runner of three runs of the calc issue (the scripted team; the repository on the
    driver's node alone), with its store and items."""
    from magis_ray.actors.model.gateway import GatewayConfig
    from magis_ray.actors.model.scripted_server import ScriptedServer
    from magis_ray.actors.model.scripted_team import ScriptedTeam
    from magis_ray.actors.runtime.batch import BatchItem, BatchRunner
    from magis_ray.actors.runtime.deployment import Deployment
    from magis_ray.events.settings import EndpointSettings
    from scenarios import make_calc_repo

    repos = tmp_path / "repos"
    _, base = make_calc_repo(repos / "calc__calc")
    items = [BatchItem(f"calc__calc-{i}", calc_issue(repos / "calc__calc", base, instance_id=f"calc__calc-{i}"))
             for i in (1, 2, 3)]
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX]}, reproductions=[REPRODUCES])
    store_path = tmp_path / "store"
    with ScriptedServer(team) as server:
        deployment = Deployment(str(store_path), GatewayConfig(base_url=server.base_url, api_key="k", model="m",
                                                                endpoint=EndpointSettings(concurrency=16)))
        try:
            with open_store(str(store_path), create=True) as store:
                yield BatchRunner(deployment, store, settings, str(repos), workers=3), store, items
        finally:
            deployment.close()


@pytest.mark.slow  # three nodes each build the environment from PyPI: minutes
@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")
def test_a_batch_with_tests_runs_them_on_several_nodes_from_the_repository_on_the_driver_s_node_alone(cluster, tmp_path):
    from magis_ray.actors.runtime.batch import batch_settings
    from magis_ray.events.schema import RunSettings

    settings = batch_settings(RunSettings(top_k=4, model="m", tests=True, env_setup="python -m pip install pytest"), "placed")
    with calc_batch(tmp_path, settings) as (runner, store, items):
        results = runner.run(items)
        logs = {info.run_id: store.read(info.run_id) for info in store.list_runs()}
    assert [(r.status, r.outcome) for r in results] == [("finished", "patched")] * 3
    runs = {run_id: [r.event for r in events if isinstance(r.event, schema.TestsRan)] for run_id, events in logs.items()}
    alive = {cluster.head_node.node_id, *(n.node_id for n in cluster.worker_nodes)}
    nodes = set()
    for tested in runs.values():
        assert [(t.purpose, t.outcome) for t in tested] == [("prepare", "passed"), ("reproduce", "failed"),
                                                            ("baseline", "failed"), ("check", "failed")]
        # a run's tests ran where its testbed was built, named by Ray node id, the host beside it
        assert len({t.node for t in tested}) == 1 and tested[0].node in alive and tested[0].host == socket.gethostname()
        nodes.add(tested[0].node)
    assert len(nodes) >= 2, nodes
    # every node that ran tests has the commit in its own cache, and its testbeds borrow their
    # objects from that copy, never from the driver's repository
    for node in nodes:
        cache = cluster.caches[node]
        assert copies_in(cache), node
        borrowed = [json.loads(p.read_text())["objects"] for p in (cache / "testbeds").glob("*/ready.json")]
        assert borrowed and all(o.startswith(str(cache / "repositories")) for o in borrowed), borrowed


# --- a node lost mid-batch ---------------------------------------------------------------------

@pytest.mark.slow  # the nodes build the environment from PyPI, and the lost node's runs build it again elsewhere
def test_a_node_lost_mid_batch_the_tests_of_its_runs_are_built_and_run_again_elsewhere_each_recorded_once(cluster, tmp_path):
    from magis_ray.actors.runtime.batch import batch_settings
    from magis_ray.events.schema import RunSettings

    gate = Path(tempfile.gettempdir()) / f"mrp-gate-{uuid.uuid4().hex}"
    # every test run waits at the gate (unconfined, so that it sees the host's file); a build does not
    settings = batch_settings(RunSettings(top_k=4, model="m", tests=True, env_setup="python -m pip install pytest",
                                          sandbox="none", test_cmd=gated(gate)), "lost")
    try:
        with calc_batch(tmp_path, settings) as (runner, store, items):
            # a run's test waits at the gate on a worker node, which holds that run's testbed
            lost, results = lose_a_worker_midway(cluster, gate, lambda: runner.run(items), "a run's test")
            logs = {info.run_id: store.read(info.run_id) for info in store.list_runs()}
    finally:
        gate.unlink(missing_ok=True)
    assert [(r.status, r.outcome) for r in results] == [("finished", "patched")] * 3
    alive = {cluster.head_node.node_id, *(n.node_id for n in cluster.worker_nodes)}
    assert lost not in alive
    runs = {run_id: [r.event for r in events if isinstance(r.event, schema.TestsRan)] for run_id, events in logs.items()}
    moved = []
    for tested in runs.values():
        # each test run once, with the verdicts of a batch that lost no node
        assert [(t.purpose, t.outcome) for t in tested] == [("prepare", "passed"), ("reproduce", "failed"),
                                                            ("baseline", "failed"), ("check", "failed")], tested
        prepared, *ran = tested
        assert all(t.node in alive for t in ran), [(t.purpose, t.node) for t in tested]
        if prepared.node == lost:
            moved.append(ran)
    # the runs whose testbed was on the lost node ran their tests on another node, built there again
    assert moved, {run_id: [t.node for t in tested] for run_id, tested in runs.items()}
    for ran in moved:
        assert len({t.node for t in ran}) == 1
        assert copies_in(cluster.caches[ran[0].node]) and list((cluster.caches[ran[0].node] / "testbeds").glob("*/ready.json"))
