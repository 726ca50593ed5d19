"""Environments as cluster artifacts: what fetching one costs against building it, and what that
means for a grading of SWE-bench Verified on a cluster.

Measured, in one run, on real environments and testbeds from this machine's cache (by default a
sympy, a flask and a Django one, and the newest testbed of each that its own install built; their
build times are the ones their own builds recorded in ready.json):
- the archive's size against the folder's size on disk (a testbed's archive leaves its
  interpreter's files out: the fetching node links them from its own);
- publishing (pack + write to a store folder) and fetching (copy + verify + unpack + relocate under
  another cache root) against the build, as ratios;
- that the fetched environment's python runs under its new root, and that the fetched testbed's
  interpreter is this node's own.

Then a cost model on paper for Verified's 500 instances on 8 and 32 nodes, from those measurements
and the assumptions it prints.

    python benchmarks/cluster_grading.py [--env-cache DIR] [--labels sympy/sympy pallets/flask django/django]
"""
from __future__ import annotations

import argparse
import filecmp
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from archive_formats import interpreter_prefix_of

from magis_ray.actors.execution.sharing.artifacts import ENVIRONMENTS, TESTBEDS, ArtifactStore
from magis_ray.actors.execution.sharing.cache_bound import disk_bytes
from magis_ray.actors.execution.environments import default_cache_root

INSTANCES, ENVIRONMENT_COUNT = 500, 60  # SWE-bench Verified: 500 instances over about 60 (repo, version) environments
TESTBED_SECONDS = 60.0  # assumed: a testbed (the repository's own install at its commit) on a cached environment
TEST_SECONDS = 90.0  # assumed: one instance's test run
NODES = (1, 8, 32)


def pick(cache: Path, labels: list[str], testbeds: bool = False) -> list[tuple[str, Path, dict]]:
    """The newest ready environment of each label (its repo name) in the cache; or, `testbeds`, the
    newest testbed of each that its own install built."""
    found = []
    for label in labels:
        matches = []
        for ready in cache.glob("testbeds/*/ready.json" if testbeds else "*/ready.json"):
            info = json.loads(ready.read_text())
            if info.get("label", "").startswith(label) and (not testbeds or info.get("made") == "built"):
                matches.append((info.get("time", 0), ready.parent, info))
        if matches:
            _, folder, info = max(matches, key=lambda match: match[0])
            found.append((info["label"], folder, info))
        else:
            print(f"(no cached {'testbed' if testbeds else 'environment'} of {label} under {cache}: left out)")
    return found


def measure(label: str, folder: Path, info: dict, cache: Path, scratch: Path) -> dict:
    store = ArtifactStore(str(scratch / "store"))
    testbed = folder.parent.name == "testbeds"
    kind, root = (TESTBEDS, folder.parent) if testbed else (ENVIRONMENTS, cache)
    prefix = interpreter_prefix_of(folder) if testbed else info.get("interpreter_prefix", "")
    start = time.perf_counter()
    archive_bytes = store.publish(kind, folder.name, folder, root, prefix)
    publish_s = time.perf_counter() - start
    node = scratch / "another-node" / "envs" / ("testbeds" if testbed else "")
    start = time.perf_counter()
    assert store.fetch(kind, folder.name, node / folder.name, node, prefix), "the fetch failed"
    fetch_s = time.perf_counter() - start
    if testbed:
        python = next((node / folder.name / "python" / "bin").glob("python3.*"))
        assert filecmp.cmp(python, Path(prefix) / "bin" / python.name, shallow=False), "not this node's interpreter"
    else:
        python = node / folder.name / "venv" / "bin" / "python"
        runs = subprocess.run([str(python), "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True)
        assert runs.returncode == 0 and runs.stdout.strip() == str(node / folder.name / "venv"), runs.stderr
    figures = {"label": label + (" (testbed)" if testbed else ""), "build_s": float(info.get("build_seconds", 0.0)),
               "disk": disk_bytes(folder), "archive": archive_bytes, "publish_s": publish_s, "fetch_s": fetch_s,
               "testbed": testbed}
    subprocess.run(["rm", "-rf", str(node / folder.name), str(scratch / "store")], check=True)
    return figures


def cost_model(figures: list[dict]) -> None:
    figures = [f for f in figures if not f["testbed"]]
    if not figures:
        return
    build = sum(f["build_s"] for f in figures) / len(figures)
    fetch = sum(f["fetch_s"] for f in figures) / len(figures)
    size = sum(f["archive"] for f in figures) / len(figures)
    per_env = INSTANCES / ENVIRONMENT_COUNT
    print("\n## Cost model: SWE-bench Verified (500 instances) on a cluster\n")
    print(f"Assumptions: {INSTANCES} instances over {ENVIRONMENT_COUNT} environments, {per_env:.1f} each; an "
          f"environment build {build:.0f} s, a fetch {fetch:.1f} s and an archive {size / 1e6:.0f} MB (the means "
          f"measured above); a testbed {TESTBED_SECONDS:.0f} s, a test run {TEST_SECONDS:.0f} s; one instance at a "
          "time a node; instances spread uniformly when nothing prefers a node, so an environment's instances "
          "reach N(1-(1-1/N)^k) distinct nodes of N.")
    print("\n| nodes | sharing | environment builds | fetches | bytes moved | wall time (h) |")
    print("|---|---|---|---|---|---|")
    for nodes in NODES:
        reached = nodes * (1 - (1 - 1 / nodes) ** per_env)  # distinct nodes an environment's instances land on
        instance_work = INSTANCES * (TESTBED_SECONDS + TEST_SECONDS)
        for sharing in ("none", "artifact store", "store + soft affinity"):
            if sharing == "none":
                builds, fetches = ENVIRONMENT_COUNT * reached, 0.0
            elif sharing == "artifact store":
                builds, fetches = ENVIRONMENT_COUNT, ENVIRONMENT_COUNT * (reached - 1)
            else:
                # instances prefer a node that holds their environment: with fewer nodes than
                # environments each environment stays on about one node; with more, each spreads
                # over about nodes / environments of them to keep every node busy
                spread = min(reached, max(1.0, nodes / ENVIRONMENT_COUNT))
                builds, fetches = ENVIRONMENT_COUNT, ENVIRONMENT_COUNT * (spread - 1)
            if nodes == 1 and sharing != "none":
                continue
            work = builds * build + fetches * fetch + instance_work
            # a node cannot finish before the longest environment's build and its share of the instances
            wall = max(work / nodes, build + per_env / min(nodes, per_env) * (TESTBED_SECONDS + TEST_SECONDS))
            print(f"| {nodes} | {sharing} | {builds:.0f} | {fetches:.0f} | {fetches * size / 1e9:.1f} GB | {wall / 3600:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env-cache", type=Path, default=default_cache_root())
    parser.add_argument("--labels", nargs="+", default=["sympy/sympy", "pallets/flask", "django/django"])
    args = parser.parse_args()
    chosen = pick(args.env_cache, args.labels) + pick(args.env_cache, args.labels, testbeds=True)
    if not chosen:
        sys.exit(f"no cached environment of {', '.join(args.labels)} under {args.env_cache}")
    figures = []
    with tempfile.TemporaryDirectory(prefix="cluster-grading-", dir=args.env_cache) as scratch:
        for label, folder, info in chosen:
            figures.append(measure(label, folder, info, args.env_cache, Path(scratch)))
    print("| environment or testbed | on disk (MB) | archive (MB) | build (s) | publish (s) | fetch + unpack (s) | "
          "fetch / build | (publish + fetch) / build |")
    print("|---|---|---|---|---|---|---|---|")
    for f in figures:
        ratio = f"{f['fetch_s'] / f['build_s']:.3f}" if f["build_s"] else "-"
        both = f"{(f['publish_s'] + f['fetch_s']) / f['build_s']:.3f}" if f["build_s"] else "-"
        print(f"| {f['label']} | {f['disk'] / 1e6:.0f} | {f['archive'] / 1e6:.0f} | {f['build_s']:.0f} | "
              f"{f['publish_s']:.1f} | {f['fetch_s']:.1f} | {ratio} | {both} |")
    cost_model(figures)


if __name__ == "__main__":
    main()
