"""Testbeds made from another of their environment against the same testbeds built in full: what
each way costs, and what differs between the two, file by file.

For the given instances, in their order, each testbed is built twice in scratch caches that share
the environments of --env-cache (linked, never rebuilt): once as grading builds it (made from an
earlier testbed of its environment where it can be), once with every install run in full. Then
the two testbeds' trees and prefixes are compared: files only one has, and files whose contents
differ (the testbed's own folder name aside). Logs, git's index, byte caches and the wheelhouse's
files are left out of the comparison.

Usage: python benchmarks/testbed_reuse.py --instances ID ... [--dataset D] [--repos-dir R] [--env-cache DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from magis_ray.actors.execution.environments import EnvironmentCache, default_cache_root
from magis_ray.actors.execution.sandbox import Sandbox
from magis_ray.actors.execution.testbeds import TestbedCache
from magis_ray.actors.swebench.grading import spec_for

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "shared" / "swebench" / "verified-tuning.jsonl"
LEFT_OUT = ("logs/", "trace/", "inputs.json", "ready.json", "wheelhouse/", "tree/.git/")


def scratch_cache(real: Path, parent: Path, name: str) -> Path:
    """A cache root whose environments are `real`'s (linked) and whose testbeds are its own."""
    root = parent / name
    root.mkdir()
    for entry in real.iterdir():
        if entry.is_dir() and (entry / "ready.json").is_file() or entry.name == "pip-cache":
            (root / entry.name).symlink_to(entry)
    return root


def files_of(folder: Path) -> dict[str, Path]:
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            relative = str(path.relative_to(folder))
            if relative.startswith(LEFT_OUT) or "__pycache__" in relative or relative.endswith((".pyc", ".lock")):
                continue
            if relative.startswith("install-") and relative.endswith("-report.json"):
                continue
            found[relative] = path
    return found


def differences(reused: Path, full: Path, roots: tuple[Path, Path]) -> list[str]:
    """What differs between two testbeds of one commit (the names of their caches aside)."""
    ours, theirs = files_of(reused), files_of(full)
    found = [f"only in the reused one: {p}" for p in sorted(set(ours) - set(theirs))]
    found += [f"only in the full build: {p}" for p in sorted(set(theirs) - set(ours))]
    old, new = str(roots[1]).encode(), str(roots[0]).encode()
    for path in sorted(set(ours) & set(theirs)):
        a, b = ours[path], theirs[path]
        if a.is_symlink() or b.is_symlink():
            if not (a.is_symlink() and b.is_symlink() and os.readlink(a) == os.readlink(b).replace(str(roots[1]), str(roots[0]))):
                found.append(f"differs: {path} (a link)")
        elif a.read_bytes() != b.read_bytes().replace(old, new):
            found.append(f"differs: {path}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", nargs="+", required=True)
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--repos-dir", type=Path, default=Path("/work/repos"))
    parser.add_argument("--env-cache", type=Path, default=default_cache_root())
    parser.add_argument("--keep", action="store_true", help="keep the scratch caches (their paths are printed)")
    args = parser.parse_args()
    records = {r["instance_id"]: r for r in map(json.loads, args.dataset.read_text().splitlines()) if r}
    parent = Path(tempfile.mkdtemp(prefix="magis-reuse-", dir=args.env_cache.parent))
    # Names of one length: the testbeds' folders then compare byte for byte, their names replaced.
    reusing = TestbedCache(EnvironmentCache(scratch_cache(args.env_cache, parent, "reuse"), Sandbox()), reuse=True)
    full = TestbedCache(EnvironmentCache(scratch_cache(args.env_cache, parent, "fully"), Sandbox()), reuse=False)
    print("| instance | made | made s | full build s | differences from the full build |")
    print("|---|---|---:|---:|---|")
    totals = [0.0, 0.0]
    try:
        for number, instance in enumerate(args.instances):
            record = records[instance]
            repo = args.repos_dir / record["repo"].replace("/", "__")
            recipe = spec_for(record, repo).testbed
            made = {}
            # Alternating which goes first, so that neither always finds the machine's caches warm.
            for cache in ((reusing, full) if number % 2 == 0 else (full, reusing)):
                start = time.monotonic()
                made[cache is reusing] = cache.get(recipe, repo, mirrors=args.repos_dir)
                made[(cache is reusing, "s")] = time.monotonic() - start
            ours, theirs = made[True], made[False]
            found = differences(Path(ours.path), Path(theirs.path), (reusing.envs.root, full.envs.root))
            how = f"{ours.made} ({ours.made_from[:8]})" if ours.made_from else ours.made
            totals[0] += made[(True, "s")]
            totals[1] += made[(False, "s")]
            shown = "; ".join(found[:4]) + (f"; and {len(found) - 4} more" if len(found) > 4 else "")
            print(f"| {instance} | {how} | {made[(True, 's')]:.1f} | {made[(False, 's')]:.1f} | {shown or 'none'} |", flush=True)
        print(f"\nall: {totals[0]:.1f} s made as grading makes them, {totals[1]:.1f} s built in full")
    finally:
        if args.keep:
            print(f"scratch caches: {parent}")
        else:
            shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
