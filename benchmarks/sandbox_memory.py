"""What the sandbox's memory budget and its scratch on disk cost a test run, measured in one run.

Each instance whose environment and testbed are cached here is graded with its gold patch (the
prediction applied, the harness's install step again and its eval script: one sandboxed run) in
four sandboxes, alternating, `--repeats` times:

- before: scratch in memory (tmpfs), no memory budget (the sandbox without this change);
- disk + cgroup: root where it can make a cgroup (this machine: cgroup v1), the default here;
- disk + watchdog: root on a host that gives it no cgroup (cgroup v2 without delegation);
- memory + watchdog: scratch in memory, counted by the watchdog (what an ordinary user gets,
  though run here as root: no user namespace).

Printed: the medians of each, their ratios over `before` (goal: at most 1.2), and the peak memory
each run held as the cgroup counted it (anonymous memory and tmpfs, which cannot be reclaimed) and
as the watchdog did (its processes' resident or proportional sets, and its in-memory folders: with
the scratch in memory, the copies of the workspace and of the prefix count too).
Then the fixed cost of one sandbox: `true` on a workspace copied from a small tree.

Usage: python benchmarks/sandbox_memory.py [--dataset D] [--repos-dir R] [--instances ID ...]
                                           [--repeats 3] [--env-cache DIR]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from magis_ray.actors.execution.environments import EnvironmentCache, default_cache_root
from magis_ray.actors.execution.sandbox.memory_budget import why_no_cgroup
from magis_ray.actors.execution.runner import TestRunner
from magis_ray.actors.execution.sandbox import GiB, Limits, Sandbox, Scratch
from magis_ray.actors.execution.sandbox.scratch_disks import why_not_on_disk
from magis_ray.actors.execution.testbeds import TestbedCache
from magis_ray.actors.swebench.grading import grade, grading_limits, spec_for

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "shared" / "swebench" / "verified-tuning.jsonl"
# One instance of each repository of the dataset whose run takes seconds to a minute (astropy's
# recompile of its C takes minutes, and is the same in every sandbox).
DEFAULT_INSTANCES = ["sympy__sympy-11618", "pytest-dev__pytest-10051", "psf__requests-1142", "pallets__flask-5014",
                     "pylint-dev__pylint-4551", "sphinx-doc__sphinx-10323", "pydata__xarray-3305"]
SANDBOXES = {
    "before": (Sandbox(scratch="memory"), 0),
    "disk + cgroup": (Sandbox(), 8 * GiB),
    "disk + watchdog": (Sandbox(memory_control="watchdog"), 8 * GiB),
    "memory + watchdog": (Sandbox(scratch="memory", memory_control="watchdog"), 8 * GiB),
}


def cached(record: dict, repos_dir: Path, testbeds: TestbedCache, cache_root: Path) -> bool:
    """Whether the instance's environment and testbed are built here (the benchmark times runs, not builds)."""
    repo = repos_dir / record["repo"].replace("/", "__")
    try:
        recipe = spec_for(record, repo).testbed
        env_key = recipe.env.key(testbeds.envs.interpreter(recipe.env.python)[1])
    except Exception:  # noqa: BLE001 - no spec or no interpreter here: not measurable
        return False
    return (cache_root / env_key / "ready.json").is_file() and (testbeds.root / recipe.key(env_key) / "ready.json").is_file()


def test_runs(records: list[dict], repos_dir: Path, cache_root: Path, repeats: int) -> None:
    testbeds = TestbedCache(EnvironmentCache(cache_root))
    names = list(SANDBOXES)
    print("\n## a test run as graded (cached testbeds; medians of alternating repeats)\n")
    print("| instance | " + " | ".join(f"{name} s" for name in names) + " | " + " | ".join(f"{name} / before" for name in names[1:])
          + " | peak MiB: cgroup / watchdog / scratch in memory | resolved |")
    print("|---|" + "---:|" * (2 * len(names) - 1) + "---:|---|")
    ratios: dict[str, list[float]] = defaultdict(list)
    for record in records:
        if not cached(record, repos_dir, testbeds, cache_root):
            continue
        times: dict[str, list[float]] = {name: [] for name in names}
        peaks: dict[str, int] = defaultdict(int)
        resolved = set()
        for _ in range(repeats):
            for name, (sandbox, memory) in SANDBOXES.items():
                runner = TestRunner(sandbox, grading_limits(1800, memory))
                result = grade(record, record["patch"], repos_dir, testbeds, runner)
                times[name].append(result.run.seconds)
                peaks[name] = max(peaks[name], result.memory.peak_mb)
                resolved.add(result.resolved)
        medians = {name: statistics.median(times[name]) for name in names}
        for name in names[1:]:
            ratios[name].append(medians[name] / medians["before"])
        print(f"| {record['instance_id']} | " + " | ".join(f"{medians[n]:.2f}" for n in names) + " | "
              + " | ".join(f"{medians[n] / medians['before']:.2f}" for n in names[1:])
              + f" | {peaks['disk + cgroup']} / {peaks['disk + watchdog']} / {peaks['memory + watchdog']} | {'/'.join(sorted({'yes' if r else 'no' for r in resolved}))} |",
              flush=True)
    if not ratios:
        raise SystemExit("no instance has a cached testbed: run `magis-ray grade --gold` first")
    for name in names[1:]:
        print(f"\n{name} over before: median {statistics.median(ratios[name]):.2f}, max {max(ratios[name]):.2f} "
              f"over {len(ratios[name])} instances", end="")
    print(" (goal: at most 1.2)")


def fixed_cost(repeats: int) -> None:
    """`true` in a sandbox whose workspace is a copy of this repository's docs/ folder."""
    tree = Path(__file__).resolve().parents[1] / "docs"
    print(f"\n## the fixed cost of one sandbox: `true` on a copy of {tree.name}/ (median of {repeats * 5} runs)\n")
    times: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(repeats * 5):
            for name, (sandbox, memory) in SANDBOXES.items():
                outcome = sandbox.run("true", cwd="/testbed", scratches=[Scratch("/testbed", str(tree))],
                                      limits=Limits(wall_seconds=120, memory_bytes=memory), log_path=f"{scratch}/log")
                times[name].append(outcome.duration_s)
    print("| sandbox | s | over before |\n|---|---:|---:|")
    for name in SANDBOXES:
        median = statistics.median(times[name])
        print(f"| {name} | {median:.3f} | {median / statistics.median(times['before']):.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--repos-dir", type=Path, default=Path("/work/repos"))
    parser.add_argument("--instances", nargs="*", default=DEFAULT_INSTANCES)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env-cache", type=Path, default=default_cache_root())
    args = parser.parse_args()
    print(f"memory budget here: {why_no_cgroup() or 'a cgroup of its own'}; scratch: {why_not_on_disk() or 'on disk'}")
    records = [json.loads(line) for line in args.dataset.read_text().splitlines() if line.strip()]
    records = [r for r in records if r["instance_id"] in set(args.instances)]
    fixed_cost(args.repeats)
    test_runs(records, args.repos_dir, args.env_cache, args.repeats)


if __name__ == "__main__":
    main()
