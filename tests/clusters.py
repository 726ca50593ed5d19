"""A Ray cluster on this machine whose nodes each have their own cache root, as separate machines
would: a head (the driver's node) and two workers."""
from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

MB = 1024 ** 2
NODES = ("head", "worker-1", "worker-2")


@contextlib.contextmanager
def nodes_with_own_caches(prefix: str):
    """The cluster, joined by this process; `cluster.caches` maps each Ray node id to its cache root."""
    import ray
    from ray.cluster_utils import Cluster

    from magis_ray.actors.runtime import remote

    temp_dir = tempfile.mkdtemp(prefix=prefix, dir="/tmp")  # short: Ray's socket paths stay under 108 characters
    caches = {name: Path(temp_dir) / "caches" / name for name in NODES}
    common = {"num_cpus": 1, "object_store_memory": 80 * MB}
    cluster = Cluster(initialize_head=True, head_node_args={
        **common, "include_dashboard": False, "temp_dir": temp_dir, "env_vars": {"MAGIS_ENV_CACHE": str(caches["head"])}})
    try:
        for name in NODES[1:]:
            cluster.add_node(**common, env_vars={"MAGIS_ENV_CACHE": str(caches[name])})
        ray.init(address=cluster.address, namespace="magis", log_to_driver=False)
        cluster.caches = {node.node_id: caches[name] for name, node in zip(NODES, [cluster.head_node, *cluster.worker_nodes])}
        yield cluster
    finally:
        remote.forget_shared()
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
