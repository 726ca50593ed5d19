"""Which regression tests the team picks, per repository, on a SWE-bench dataset: for each
instance, the suite its spec's test command names (pytest, or Django's runner), and the tests
nearest each file the gold patch changes (actors/code/regression.py), as that suite addresses them.

Nothing is run. It counts the instances that get at least one regression test, and those whose
picks include a test file (or Django module) that the instance's own test patch changes: the
dataset's authors judged those the tests of the change, so a pick among them is a pick on target.
The team never sees the test patch; this only measures how near its layout-based picks come.

    python benchmarks/regression_layout.py --dataset /work/big3/verified-big3-rebuilt.jsonl \\
        --repos-dir /work/big3/repos
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from magis_ray.actors.code.regression import nearest_tests
from magis_ray.actors.code.repository import RepoSnapshot
from magis_ray.actors.code.suites import suite_for
from magis_ray.actors.execution.specs import NoSpec, instance_spec


def changed_files(patch: str) -> list[str]:
    from swebench.harness.utils import get_modified_files

    return get_modified_files(patch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, type=Path)
    parser.add_argument("--repos-dir", required=True, type=Path)
    args = parser.parse_args()
    counts: dict[str, Counter] = {}
    for record in map(json.loads, args.dataset.read_text().splitlines()):
        repo_path = args.repos_dir / record["repo"].replace("/", "__")
        if not repo_path.is_dir():
            continue
        try:
            spec = instance_spec({**record, "test_patch": ""}, repo_path)
        except NoSpec:
            continue
        suite = suite_for(spec.test_command)
        snapshot = RepoSnapshot.open(repo_path, record["base_commit"])
        picked = [t for path in changed_files(record["patch"]) for t in nearest_tests(snapshot, path, suite)]
        wanted = {suite.target_of(p) for p in changed_files(record["test_patch"]) if suite.is_test_file(p)}
        count = counts.setdefault(f"{record['repo']} ({suite.name})", Counter())
        count["instances"] += 1
        count["with regression tests"] += bool(picked)
        count["a pick the test patch changes"] += bool(set(picked) & wanted)
        count["picks"] += len(set(picked))
        print(f"{record['instance_id']}: {', '.join(dict.fromkeys(picked)) or '-'}"
              f"{'  (on target)' if set(picked) & wanted else ''}", flush=True)
    print()
    print("| repository (suite) | instances | with regression tests | a pick the test patch changes | picks per instance |")
    print("|---|---|---|---|---|")
    for name, c in sorted(counts.items()):
        print(f"| {name} | {c['instances']} | {c['with regression tests']} | {c['a pick the test patch changes']} | "
              f"{c['picks'] / c['instances']:.1f} |")


if __name__ == "__main__":
    main()
