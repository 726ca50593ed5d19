"""A Ray cluster on this machine whose nodes each have their own cache root, as separate machines
would: a head (the driver's node) and two workers, or as many as a test asks for."""
from __future__ import annotations

import contextlib
import itertools
import shutil
import tempfile
from pathlib import Path

from waiting import wait_until

MB = 1024 ** 2
# A node taken down is declared dead by the GCS's health checks: after about 8 s with these, about
# 16 s with Ray's defaults (a check every 3 s, 5 failures). What the tests wait on is the same; a
# live node must miss five checks in a row, each with 3 s to answer, to be taken for dead.
LOST_NODE_SEEN_SOONER = {"health_check_period_ms": 1000, "health_check_timeout_ms": 3000, "health_check_failure_threshold": 5}


def short_temp_dir(prefix: str) -> str:
    """A temp dir for a cluster's sessions and logs, short: Ray's socket paths stay under 108
    characters."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


@contextlib.contextmanager
def local_cluster(temp_dir: str, head: dict, workers: list[dict]):
    """A Ray cluster on this machine (a head with `head`'s arguments and a worker for each of
    `workers`), its sessions in `temp_dir`, joined by this process; at the end it stops and
    `temp_dir` goes. Cluster still names its address in /tmp/ray/ray_current_cluster while it runs;
    magis-ray's drivers start Ray with address="local", so none joins it by mistake."""
    import ray
    from ray.cluster_utils import Cluster

    from magis_ray.actors.runtime import remote

    head = {**head, "_system_config": {**LOST_NODE_SEEN_SOONER, **head.get("_system_config", {})}}
    cluster = Cluster(initialize_head=True, head_node_args={"include_dashboard": False, "temp_dir": temp_dir, **head})
    try:
        for worker in workers:
            cluster.add_node(**worker)
        ray.init(address=cluster.address, namespace="magis", log_to_driver=False)
        yield cluster
    finally:
        remote.forget_shared()
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


@contextlib.contextmanager
def nodes_with_own_caches(prefix: str, workers: int = 2, head: dict | None = None):
    """The cluster of a head (`head`'s arguments added to a node's, replacing any of the same name:
    `env_vars` would replace the cache root's) and `workers` workers, joined by this
    process; `cluster.caches` maps each Ray node id to its cache root, and
    `cluster.workers_at_least(n)` adds workers, each with a cache of its own, until n are alive."""
    temp_dir = short_temp_dir(prefix)
    caches = Path(temp_dir) / "caches"

    def node(name: str) -> dict:
        return {"num_cpus": 1, "object_store_memory": 80 * MB, "env_vars": {"MAGIS_ENV_CACHE": str(caches / name)}}

    def alive_node_ids() -> set[str]:
        import ray

        return {each["NodeID"] for each in ray.nodes() if each["Alive"]}

    with local_cluster(temp_dir, {**node("head"), **(head or {})}, []) as cluster:
        cluster.caches = {cluster.head_node.node_id: caches / "head"}
        names = (f"worker-{number}" for number in itertools.count(1))

        def workers_at_least(count: int) -> None:
            while len(cluster.worker_nodes) < count:
                name = next(names)  # each node's own: Cluster keeps its workers in a set, unordered
                cluster.caches[cluster.add_node(**node(name)).node_id] = caches / name
            # the very nodes, not their number (Cluster.wait_for_nodes): a node killed moments ago,
            # which the GCS has not yet declared dead, would stand in for one still joining, and
            # work placed meanwhile would all go to the head
            wanted = {each.node_id for each in cluster.list_all_nodes()}
            wait_until(lambda: alive_node_ids() == wanted,
                       lambda: f"the GCS sees nodes {sorted(alive_node_ids())}, not {sorted(wanted)}")

        cluster.workers_at_least = workers_at_least
        workers_at_least(workers)
        yield cluster
