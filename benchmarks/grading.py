"""What grading without Docker costs, measured in one run on SWE-bench instances whose environments
are already cached (run `magis-ray grade --gold` first):

- sandbox ratio: an instance's test command in bubblewrap over the same command on the same
  prepared workspace run directly in the environment (no sandbox); the median of alternating
  repeats per instance (goal: at most 1.2);
- grading ratio: a whole grading of the instance (fresh checkout, the patch and the test patch
  applied, the sandboxed run, parsing, the report) over the direct test command;
- first build time per environment, from the cache's own records of when each was built;
- 2 workers against 1: the same instances graded with one worker, then two (wall time ratio).

Usage: python benchmarks/grading.py [--dataset ../shared/swebench/lite-dev.jsonl] [--repos-dir /work/repos]
                                    [--instances ID ...] [--repeats 3] [--env-cache DIR]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from magis_ray.actors.execution.environments import EnvironmentCache, default_cache_root
from magis_ray.actors.execution.runner import TestRunner
from magis_ray.actors.execution.sandbox import Limits, Sandbox
from magis_ray.actors.execution.workspaces import Workspace
from magis_ray.actors.swebench.grading import grade
from magis_ray.actors.swebench.grading_batch import GradeJob, GradeOptions, ThreadExecutor, run_grading
from magis_ray.actors.execution.specs import instance_spec
from magis_ray.events.schema import GradingStarted
from magis_ray.store.memory import InMemoryStore

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "shared" / "swebench" / "lite-dev.jsonl"


def cached_instances(records, repos_dir: Path, cache: EnvironmentCache) -> list[tuple]:
    """(record, spec, environment) for each record whose environment is in the cache (nothing is built)."""
    found = []
    for record in records:
        repo = repos_dir / record["repo"].replace("/", "__")
        if not repo.is_dir():
            continue
        try:
            spec = instance_spec(record, repo)
            if spec.recipe.unsupported:
                continue
            _, version = cache.interpreter(spec.recipe)
        except Exception:  # noqa: BLE001 - no spec or no interpreter: not benchmarkable here
            continue
        if (cache.root / spec.recipe.key(version) / "ready.json").is_file():
            found.append((record, spec, cache.get(spec.recipe, repo)))
    return found


def sandbox_ratio(record, spec, env, repos_dir: Path, repeats: int) -> tuple[float, float, float]:
    """(median direct seconds, median sandboxed seconds, their ratio) on one prepared workspace."""
    repo = repos_dir / record["repo"].replace("/", "__")
    limits = Limits(wall_seconds=1800)
    sandboxed, direct = TestRunner(Sandbox("bwrap"), limits), TestRunner(Sandbox("none"), limits)
    times = {"bwrap": [], "none": []}
    with Workspace(repo, record["base_commit"]) as ws:
        ws.apply(record["patch"], "gold")
        ws.restore(list(spec.test_files))
        ws.apply(record["test_patch"], "test_patch")
        for _ in range(repeats):
            for name, runner in (("none", direct), ("bwrap", sandboxed)):
                run = runner.run(env, ws, spec.test_command, spec.parse, name=name, prelude=spec.eval_commands)
                times[name].append(run.duration_s)
    d, s = statistics.median(times["none"]), statistics.median(times["bwrap"])
    return d, s, s / d


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--repos-dir", type=Path, default=Path("/work/repos"))
    parser.add_argument("--instances", nargs="*")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env-cache", type=Path, default=default_cache_root())
    args = parser.parse_args()
    records = [json.loads(line) for line in args.dataset.read_text().splitlines() if line.strip()]
    if args.instances:
        records = [r for r in records if r["instance_id"] in args.instances]
    cache = EnvironmentCache(args.env_cache)
    chosen = cached_instances(records, args.repos_dir, cache)
    if not chosen:
        raise SystemExit("no instance has a cached environment: run `magis-ray grade --gold` first")

    print("## sandbox and grading overhead (cached environments; medians of alternating repeats)\n")
    print("| instance | direct s | sandboxed s | sandbox ratio | whole grading s | grading ratio | resolved |")
    print("|---|---:|---:|---:|---:|---:|---|")
    ratios, grading_ratios = [], []
    runner = TestRunner(Sandbox("bwrap"), Limits(wall_seconds=1800))
    for record, spec, env in chosen:
        direct, sandboxed, ratio = sandbox_ratio(record, spec, env, args.repos_dir, args.repeats)
        start = time.monotonic()
        result = grade(record, record["patch"], args.repos_dir, cache, runner)
        whole = time.monotonic() - start
        ratios.append(ratio)
        grading_ratios.append(whole / direct)
        print(f"| {record['instance_id']} | {direct:.2f} | {sandboxed:.2f} | {ratio:.2f} | {whole:.2f} | {whole / direct:.2f} | "
              f"{'yes' if result.resolved else 'no'} |")
    print(f"\nsandbox ratio: median {statistics.median(ratios):.2f}, max {max(ratios):.2f} (goal: at most 1.2)")
    print(f"grading ratio: median {statistics.median(grading_ratios):.2f}, max {max(grading_ratios):.2f}")

    print("\n## first build time per environment (from the cache's records)\n")
    print("| environment | python | first build s |")
    print("|---|---|---:|")
    seen = set()
    for _, spec, env in chosen:
        if env.key not in seen:
            seen.add(env.key)
            print(f"| {env.label} | {env.python_version} | {cache.build_seconds(env):.0f} |")

    print("\n## 2 workers against 1 (the same instances, cached environments)\n")
    jobs = [GradeJob(record, record["patch"], "gold") for record, _, _ in chosen]
    options = GradeOptions(repos_dir=str(args.repos_dir), cache_root=str(args.env_cache))
    walls = {}
    for workers in (1, 2):
        store = InMemoryStore()
        start = time.monotonic()
        results = run_grading(store, f"bench-{workers}", jobs, ThreadExecutor(options, workers), workers,
                              GradingStarted(name=f"bench-{workers}", dataset=str(args.dataset), predictions="gold"))
        walls[workers] = time.monotonic() - start
        print(f"- {workers} worker{'s' if workers > 1 else ''}: {walls[workers]:.1f} s, "
              f"{sum(r.resolved for r in results)} of {len(results)} resolved")
    print(f"\n2 workers / 1 worker wall time: {walls[2] / walls[1]:.2f} (ideal on 2 free cores: 0.5)")


if __name__ == "__main__":
    main()
