"""A grading on a Ray cluster gives the verdicts of a grading on one node.

Starts a cluster of NODES nodes on this machine (`ray.cluster_utils.Cluster`), each with its own
cache root (MAGIS_ENV_CACHE, as separate machines have) and one shared artifact store, grades the
instances' gold patches and then empty ones with `magis-ray grade` joined to it (RAY_ADDRESS), and
compares each verdict with one-node reports of the same instances. From the gradings' events it
also counts, per environment and testbed key, how many times it was built, fetched or found cached,
and on which nodes the tests ran.

    python benchmarks/cluster_fidelity.py --dataset verified-tuning.jsonl --repos-dir REPOS \\
        --instances-file ids.txt --out DIR --one-node-gold gold.json --one-node-empty empty.json

Exit 0 when every verdict equals the one-node one, 1 when one differs, 2 on bad input. The same
--out again resumes its gradings (their store is DIR/store)."""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

MB = 1024 ** 2


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--repos-dir", type=Path, required=True)
    parser.add_argument("--instances-file", type=Path, help="one instance id per line (default: the whole dataset)")
    parser.add_argument("--out", type=Path, required=True, help="caches, artifact store, store and reports")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--one-node-gold", type=Path, help="a one-node grading's report (the harness's shape) of the gold patches")
    parser.add_argument("--one-node-empty", type=Path, help="the same of empty patches")
    return parser.parse_args()


def grade(mode: str, args: argparse.Namespace, address: str, ids: list[str]) -> dict:
    report = args.out / f"{mode}.json"
    command = [str(Path(sys.executable).with_name("magis-ray")), "grade", f"--{mode}", "--dataset", str(args.dataset),
               "--repos-dir", str(args.repos_dir), "--workers", str(args.workers), "--store", str(args.out / "store"),
               "--name", f"cluster-{mode}", "--report", str(report), *[part for i in ids for part in ("--instances", i)]]
    env = {**os.environ, "RAY_ADDRESS": address, "MAGIS_ARTIFACT_STORE": str(args.out / "artifacts"),
           "MAGIS_ENV_CACHE": str(args.out / "caches" / "node-0")}
    with open(args.out / f"{mode}.log", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0 or not report.is_file():
        sys.exit(f"cluster_fidelity: the {mode} grading failed (exit {done.returncode}); see {args.out / f'{mode}.log'}")
    return json.loads(report.read_text())


def verdicts(report: dict) -> dict[str, str]:
    found = {}
    for kind in ("resolved", "unresolved", "error", "empty_patch"):
        for instance in report.get(f"{kind}_ids", []):
            found[instance] = kind
    return found


def events(store: Path, name: str) -> list:
    from magis_ray.events.schema import InstanceGraded
    from magis_ray.store import open_store

    with open_store(str(store)) as opened:
        return [r.event for r in opened.read(f"grading:{name}") if isinstance(r.event, InstanceGraded)]


def main() -> int:
    args = arguments()
    if not args.dataset.is_file() or not args.repos_dir.is_dir():
        print("cluster_fidelity: --dataset must be a file and --repos-dir a folder", file=sys.stderr)
        return 2
    ids = args.instances_file.read_text().split() if args.instances_file else \
        [json.loads(line)["instance_id"] for line in args.dataset.read_text().splitlines() if line.strip()]
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)

    from ray.cluster_utils import Cluster

    temp_dir = tempfile.mkdtemp(prefix="fid", dir="/tmp")  # short: Ray's socket paths stay under 108 characters
    common = {"num_cpus": 1, "object_store_memory": 300 * MB}
    cluster = Cluster(initialize_head=True, head_node_args={
        **common, "include_dashboard": False, "temp_dir": temp_dir, "env_vars": {"MAGIS_ENV_CACHE": str(args.out / "caches" / "node-0")}})
    try:
        for number in range(1, args.nodes):
            cluster.add_node(**common, env_vars={"MAGIS_ENV_CACHE": str(args.out / "caches" / f"node-{number}")})
        cluster.wait_for_nodes()
        reports = {mode: grade(mode, args, cluster.address, ids) for mode in ("gold", "empty")}
    finally:
        cluster.shutdown()

    differ = 0
    for mode, one_node_path in (("gold", args.one_node_gold), ("empty", args.one_node_empty)):
        graded = events(args.out / "store", f"cluster-{mode}")
        nodes = collections.Counter(event.node[:8] for event in graded)
        obtained = collections.Counter((kind, how) for event in graded
                                       for kind, how in (("environment", event.environment.obtained), ("testbed", event.testbed.obtained)))
        print(f"{mode}: {len(reports[mode].get('resolved_ids', []))} of {len(ids)} resolved; tests on nodes {dict(nodes)}; "
              + ", ".join(f"{kind}s {how} {count}" for (kind, how), count in sorted(obtained.items())))
        if one_node_path is None:
            continue
        cluster_verdicts, one_node = verdicts(reports[mode]), verdicts(json.loads(one_node_path.read_text()))
        compared = [i for i in ids if i in one_node]
        changed = [i for i in compared if cluster_verdicts.get(i) != one_node[i]]
        for instance in changed:
            print(f"  {instance}: one node {one_node[instance]}, cluster {cluster_verdicts.get(instance, 'incomplete')}")
        print(f"{mode}: {len(compared) - len(changed)} of {len(compared)} verdicts equal to one node's")
        differ += len(changed)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
