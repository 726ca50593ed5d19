"""Environments and testbeds built once per cluster: two environments of three instances each
graded on a Ray cluster of three nodes on this machine (`ray.cluster_utils.Cluster`), each node
with a cache root of its own (MAGIS_ENV_CACHE in its environment, as `ray start` passes it) and
all sharing one artifact directory. Counted from the gradings' events, never assumed: each
environment key and each testbed key is built once across the cluster (every other node that
needs it fetches it once, then has it cached), the test runs spread over more than one node, and
the verdicts are those of the same instances graded on one node.

The two environments are the user's-repository setup (`--env-setup`, `--test-cmd`) on two
Pythons: such an environment is its interpreter alone (the setup makes the testbed), so a
grading has one, and the two come from two gradings, as `magis-ray grade --env-python` gives
them. Real throughout: Ray's raylets, the calc repository on the driver's node only, pip
installs from PyPI, the bubblewrap sandbox."""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from clusters import nodes_with_own_caches
from execfixtures import GOLD, make_calc_repos, new_file_patch, record, write_dataset

from magis_ray.actors.execution.sharing.artifacts import BUILT, CACHED, ENVIRONMENTS, FETCHED, TESTBEDS, ArtifactStore, file_digest
from magis_ray.actors.execution.sandbox import bwrap_path
from magis_ray.events.schema import InstanceGraded
from magis_ray.events.streams import StreamKind
from magis_ray.store import open_store

ENV_SETUP, TEST_CMD = "python -m pip install -e . pytest", "pytest -rA"
NOT_A_FIX = new_file_patch("calc/unused.py", "X = 1\n")
# instance number -> (the Python of its environment, its patch): three instances an environment,
# some fixing the bug and some not
INSTANCES = {1: ("3.11", GOLD), 2: ("3.11", NOT_A_FIX), 3: ("3.11", GOLD),
             4: ("3.12", NOT_A_FIX), 5: ("3.12", GOLD), 6: ("3.12", NOT_A_FIX)}


@pytest.fixture(scope="module")
def cluster():
    """A head (the driver's node) and two workers, each with its own cache root."""
    with nodes_with_own_caches("mra-") as made:
        yield made


def gradings(root: Path, dataset: Path, predictions: Path, name: str, **changes) -> dict[str, list[InstanceGraded]]:
    """Grade the instances, one grading per environment's Python: grading name -> the
    InstanceGraded events its stream holds."""
    from magis_ray.events.settings import GradeSettings
    from magis_ray.actors.swebench.grading_service import GradingOptions, plan_grading, run_grading_plan

    graded = {}
    for python in sorted({python for python, _ in INSTANCES.values()}):
        ids = tuple(f"calc__calc-{n}" for n, (p, _) in INSTANCES.items() if p == python)
        options = GradingOptions(dataset=str(dataset), repos_dir=str(root / "repos"), store=str(root / "store"),
                                 predictions=str(predictions), instances=ids, name=f"{name}-{python}",
                                 grade=GradeSettings(env_python=python, env_setup=ENV_SETUP, test_cmd=TEST_CMD, sandbox="bwrap",
                                                     timeout=300, memory="1G", workers=3), **changes)
        outcome = run_grading_plan(plan_grading(options))
        with open_store(options.store) as store:
            events = [r.event for r in store.read(StreamKind.GRADING.stream_id(options.name))]
        graded[options.name] = [e for e in events if isinstance(e, InstanceGraded)]
        # each grading's report is its own, under its whole name (the dots of "3.11" included)
        assert Path(outcome.report_path) == root / "store" / "gradings" / f"{options.name}.json"
        assert json.loads(Path(outcome.report_path).read_text())["completed_ids"] == list(ids)
    return graded


def verdicts(results: list[InstanceGraded]) -> dict[str, tuple]:
    return {r.instance_id: (r.resolved, r.completed, r.tests_status) for r in results}


def obtained(results: list[InstanceGraded], kind: str) -> dict[str, list[tuple[str, str]]]:
    """key -> (node, how that instance's node had it) an instance, for `kind` env or testbed."""
    found = defaultdict(list)
    for r in results:
        part = r.environment if kind == "env" else r.testbed
        found[part.key].append((r.node, part.obtained))
    return dict(found)


@pytest.mark.slow  # four environment and testbed builds from PyPI, six fetches, twelve test runs: about 3 minutes
@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")
def test_each_environment_and_testbed_is_built_once_across_the_cluster_and_the_tests_spread(cluster, tmp_path):
    _, base = make_calc_repos(tmp_path / "repos")
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(base, n) for n in INSTANCES])
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps({"instance_id": f"calc__calc-{n}", "model_name_or_path": "m",
                                               "model_patch": patch}) + "\n" for n, (_, patch) in INSTANCES.items()))
    artifacts = tmp_path / "artifacts"
    graded = gradings(tmp_path, dataset, predictions, "cluster", artifact_store=str(artifacts))
    results = [r for events in graded.values() for r in events]
    ids = [f"calc__calc-{n}" for n in INSTANCES]
    assert sorted(r.instance_id for r in results) == ids  # each instance graded once
    assert all(r.completed and not r.error for r in results), [(r.instance_id, r.error) for r in results]
    alive = {cluster.head_node.node_id, *(n.node_id for n in cluster.worker_nodes)}
    assert {r.node for r in results} <= alive

    # two environments, a testbed each (the calc commit on each Python), each grading one of them
    for kind in ("env", "testbed"):
        assert [len({getattr(r, f"{kind}_key") for r in events}) for events in graded.values()] == [1, 1], kind
    env_keys = {r.environment.key for r in results}
    testbed_keys = {r.testbed.key for r in results}
    assert len(env_keys) == len(testbed_keys) == 2

    store = ArtifactStore(str(artifacts))
    for kind, folder, keys in (("env", ENVIRONMENTS, env_keys), ("testbed", TESTBEDS, testbed_keys)):
        for key, had in obtained(results, kind).items():
            # built on one node of the cluster; every other node that graded an instance of it
            # fetched it once; each node's later instances found it in its own cache
            assert Counter(how for _, how in had)[BUILT] == 1, (kind, key, had)
            first_by_node = Counter(node for node, how in had if how in (BUILT, FETCHED))
            assert first_by_node == Counter({node: 1 for node, _ in had}), (kind, key, had)
            assert {how for _, how in had} <= {BUILT, FETCHED, CACHED}
            # published whole, and present in the cache of each node that had it
            names = store.names(folder, key)
            assert (artifacts / names.digest).read_text().split()[0] == file_digest(artifacts / names.archive)
            for node in {node for node, _ in had}:
                held = cluster.caches[node] / (key if kind == "env" else f"testbeds/{key}")
                assert (held / "ready.json").is_file(), (kind, node, held)
        assert sorted(p.name for p in (artifacts / folder).glob("*.sha256")) == sorted(Path(store.names(folder, k).digest).name for k in keys)

    # the test runs spread: more than one node by Ray node id
    assert len({r.node for r in results}) >= 2, [(r.instance_id, r.node) for r in results]

    # the same instances on one node (this process's threads, its own cache, no artifact store)
    single = gradings(tmp_path, dataset, predictions, "one-node", env_cache=str(tmp_path / "one-node-cache"), use_ray=False)
    single_results = [r for events in single.values() for r in events]
    assert all(r.environment.obtained == BUILT or r.environment.obtained == CACHED for r in single_results)
    assert verdicts(results) == verdicts(single_results)
    resolved = sorted(f"calc__calc-{n}" for n, (_, patch) in INSTANCES.items() if patch == GOLD)
    assert sorted(r.instance_id for r in results if r.resolved) == resolved
