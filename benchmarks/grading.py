"""What grading without Docker costs, measured on SWE-bench instances.

- from a grading in the store (`--store S --grading NAME`, e.g. `magis-ray grade --gold` at
  `--workers 2`): its wall time, the first build of each environment and the build of each
  testbed, and the test time of each instance (its one sandboxed run: the prediction applied, the
  install again, the tests), with a summary per repository; then per instance its preparation
  (the builds this grading ran for it), how its testbed was made (its own install, another's
  reused, or the install again on a copy of another's), its test time, and over all instances
  (preparation + tests) / tests, the cost of grading against the tests' own time;
- per repository: its environments' builds, its testbeds' builds and its tests, in seconds; how
  each testbed was made (built: its own install; reinstalled: the install again on a copy of
  another's; reused: another's install, no install run; from cache: made before this grading);
  and the two ratios, (testbeds + tests) / tests with the environments warm and
  (environments + testbeds + tests) / tests from nothing;
- the sandbox ratio, on instances whose testbeds are cached: an instance's whole run (the
  prediction applied and the harness's eval script) in bubblewrap over the same steps directly on
  the host (`--sandbox none`, which has no install step again), the median of alternating repeats
  per instance (goal: at most 1.2); and the run as graded (the install step again, on a copy of
  the testbed's prefix) beside it.

Usage: python benchmarks/grading.py --dataset D --repos-dir R [--store S --grading NAME]
                                    [--instances ID ...] [--per-repo 1] [--repeats 3] [--env-cache DIR]
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from magis_ray.actors.execution.environments import EnvironmentCache, default_cache_root
from magis_ray.actors.execution.runner import TestRunner
from magis_ray.actors.execution.sandbox import Sandbox
from magis_ray.actors.execution.testbeds import TestbedCache
from magis_ray.actors.swebench.grading import grade, grading_limits, spec_for
from magis_ray.actors.swebench.grading_batch import preparation_seconds
from magis_ray.events.schema import GradingStarted, InstanceGraded
from magis_ray.events.streams import StreamKind

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "shared" / "swebench" / "verified-tuning.jsonl"


def earlier_build_seconds(cache_root: Path, env_key: str) -> float | None:
    """The build time an environment built before this grading recorded in its cache."""
    try:
        return json.loads((cache_root / env_key / "ready.json").read_text())["build_seconds"]
    except (OSError, KeyError, ValueError):
        return None


def grading_figures(store_path: str, name: str, cache_root: Path) -> None:
    from magis_ray.store import open_store

    with open_store(store_path) as store:
        records = list(store.read(StreamKind.GRADING.stream_id(name)))
    starts = [i for i, r in enumerate(records) if isinstance(r.event, GradingStarted)]
    if not starts:
        raise SystemExit(f"no grading {name!r} in {store_path}")
    # The figures of the grading's first invocation that graded anything (a rerun only skips).
    graded = [r for r in records if isinstance(r.event, InstanceGraded)]
    first = records[starts[0]]
    last = max(graded, key=lambda r: r.time)
    print(f"## the grading {name}: {len(graded)} instances, wall time {(last.time - first.time) / 60:.1f} min "
          f"({first.event.workers} workers)\n")
    print("| environment | first build s | testbeds built | median testbed build s | instances | median test s | max test s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    by_env: dict[str, list[InstanceGraded]] = defaultdict(list)
    for record in graded:
        by_env[record.event.env_label or "(none)"].append(record.event)
    for label in sorted(by_env):
        events = by_env[label]
        built = [e.env_build_seconds for e in events if e.env_built_now]
        earlier = None if built else earlier_build_seconds(cache_root, next((e.env_key for e in events if e.env_key), ""))
        first = f"{max(built):.0f}" if built else (f"{earlier:.0f}*" if earlier is not None else "-")
        testbeds = [e.testbed_build_seconds for e in events if e.testbed_built_now]
        tests = [e.test_seconds for e in events if e.test_seconds]
        print(f"| {label} | {first} | {len(testbeds)} | "
              f"{statistics.median(testbeds) if testbeds else 0:.0f} | {len(events)} | "
              f"{statistics.median(tests) if tests else 0:.1f} | {max(tests) if tests else 0:.1f} |")
    print("\n\\* built before this grading, cached (its build time as the cache recorded it)")
    repository_figures([r.event for r in graded], cache_root)
    preparation_figures([r.event for r in graded], cache_root)


def repository_of(instance_id: str) -> str:
    """owner/name of a SWE-bench instance id (owner__name-NUMBER)."""
    return instance_id.rsplit("-", 1)[0].replace("__", "/")


def repository_figures(events: list[InstanceGraded], cache_root: Path) -> None:
    """Per repository: its environments' builds, its testbeds' builds, its tests; how each testbed
    was made; and the two ratios: (testbeds + tests) / tests, this grading with its environments
    warm, and (environments + testbeds + tests) / tests, a grading from nothing (an environment
    this grading found cached counts with the build time its cache recorded)."""
    print("\n### per repository\n")
    print("| repository | instances | environments s | testbeds s | tests s | testbeds made | "
          "(testbeds + tests) / tests | (environments + testbeds + tests) / tests |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    by_repo: dict[str, list[InstanceGraded]] = defaultdict(list)
    for event in events:
        if event.ran:
            by_repo[repository_of(event.instance_id)].append(event)
    totals = {"environments": 0.0, "testbeds": 0.0, "earlier testbeds": 0.0, "tests": 0.0}
    all_made: dict[str, int] = defaultdict(int)
    for repo in sorted(by_repo):
        group = by_repo[repo]
        environments: dict[str, float] = {}
        for event in group:
            seconds = event.env_build_seconds if event.env_built_now else earlier_build_seconds(cache_root, event.env_key)
            environments[event.env_key] = max(environments.get(event.env_key, 0.0), seconds or 0.0)
        testbeds = sum(e.testbed_build_seconds for e in group if e.testbed_built_now)
        earlier_testbeds = sum(earlier_build_seconds(cache_root / "testbeds", e.testbed_key) or 0.0
                               for e in group if not e.testbed_built_now and e.testbed_key)
        tests = sum(e.test_seconds for e in group)
        made: dict[str, int] = defaultdict(int)
        for event in group:
            how = testbed_made(cache_root, event.testbed_key).split(" ")[0] if event.testbed_built_now else "from cache"
            made[how] += 1
            all_made[how] += 1
        figures = {"environments": sum(environments.values()), "testbeds": testbeds, "earlier testbeds": earlier_testbeds,
                   "tests": tests}
        for name, value in figures.items():
            totals[name] += value
        print(f"| {repo} | {len(group)} | {figures['environments']:.0f} | {testbeds:.0f} | {tests:.0f} | "
              f"{made_text(made)} | {ratio(testbeds + tests, tests)} | {ratio(sum(figures.values()), tests)} |")
    print(f"| **all** | {sum(map(len, by_repo.values()))} | {totals['environments']:.0f} | {totals['testbeds']:.0f} | "
          f"{totals['tests']:.0f} | {made_text(all_made)} | **{ratio(totals['testbeds'] + totals['tests'], totals['tests'])}** | "
          f"**{ratio(sum(totals.values()), totals['tests'])}** |")
    print("\nenvironments s: each environment's build, this grading's or, cached, the one its cache recorded; the last "
          "ratio adds the recorded builds of testbeds taken from the cache too (a grading from nothing builds them)")


def made_text(made: dict[str, int]) -> str:
    return ", ".join(f"{how} {count}" for how, count in sorted(made.items()))


def ratio(part: float, tests: float) -> str:
    return f"{part / tests:.2f}" if tests else "-"


def preparation_figures(events: list[InstanceGraded], cache_root: Path) -> None:
    """Per instance: what preparing it cost, how its testbed was made, its tests; and the ratio."""
    print("\n### preparation and tests per instance\n")
    print("| instance | environment built s | testbed built s | testbed made | tests s | (prep + tests) / tests |")
    print("|---|---:|---:|---|---:|---:|")
    prepared = tested = 0.0
    for event in sorted(events, key=lambda e: e.instance_id):
        if not event.ran:
            continue
        made = testbed_made(cache_root, event.testbed_key) if event.testbed_built_now else "cached"
        prep = preparation_seconds(event)
        prepared, tested = prepared + prep, tested + event.test_seconds
        ratio = f"{(prep + event.test_seconds) / event.test_seconds:.2f}" if event.test_seconds else "-"
        print(f"| {event.instance_id} | {event.env_build_seconds * event.env_built_now:.1f} | "
              f"{event.testbed_build_seconds * event.testbed_built_now:.1f} | {made} | {event.test_seconds:.1f} | {ratio} |")
    total = f"{(prepared + tested) / tested:.2f}" if tested else "-"
    print(f"| **all** | | | | **{tested:.1f}** | **{total}** |")
    print(f"\npreparation {prepared:.1f} s, tests {tested:.1f} s: (preparation + tests) / tests = {total}")


def testbed_made(cache_root: Path, key: str) -> str:
    """How a cached testbed was made (its record): built, or reused / reinstalled from another."""
    try:
        info = json.loads((cache_root / "testbeds" / key / "ready.json").read_text())
    except (OSError, ValueError):
        return "?"
    made = info.get("made", "built")
    return f"{made} ({info['made_from'][:8]})" if info.get("made_from") else made


def sandbox_ratios(records: list[dict], repos_dir: Path, cache_root: Path, repeats: int) -> None:
    testbeds = TestbedCache(EnvironmentCache(cache_root))
    limits = grading_limits(1800, 8 * 1024 ** 3)
    runners = {"bwrap": TestRunner(Sandbox("bwrap"), limits), "none": TestRunner(Sandbox("none"), limits)}
    print("\n## the sandbox ratio (cached testbeds; medians of alternating repeats)\n")
    print("direct: `--sandbox none`, which has no install step again (its testbed is not a copy); sandboxed: the same")
    print("steps in bubblewrap; as graded: bubblewrap with the harness's install step again, on a copy of the prefix.\n")
    print("| instance | direct s | sandboxed s | ratio | as graded s | resolved (graded / direct) |")
    print("|---|---:|---:|---:|---:|---|")
    ratios = []
    for record in records:
        repo = repos_dir / record["repo"].replace("/", "__")
        try:
            recipe = spec_for(record, repo).testbed
            env_key = recipe.env.key(testbeds.envs.interpreter(recipe.env.python)[1])
        except Exception:  # noqa: BLE001 - no spec or no interpreter here: not measurable
            continue
        if not (cache_root / env_key / "ready.json").is_file() or not (testbeds.root / recipe.key(env_key) / "ready.json").is_file():
            continue  # nothing is built here: the benchmark measures runs, not builds
        modes = {"direct": (runners["none"], True), "sandboxed": (runners["bwrap"], False), "graded": (runners["bwrap"], True)}
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        resolved = {}
        for _ in range(repeats):
            for mode, (runner, install_again) in modes.items():
                result = grade(record, record["patch"], repos_dir, testbeds, runner, install_again=install_again)
                times[mode].append(result.test_seconds)
                resolved[mode] = result.resolved
        direct, sandboxed, graded = (statistics.median(times[mode]) for mode in modes)
        ratios.append(sandboxed / direct)
        print(f"| {record['instance_id']} | {direct:.2f} | {sandboxed:.2f} | {sandboxed / direct:.2f} | {graded:.2f} | "
              f"{'yes' if resolved['graded'] else 'no'} / {'yes' if resolved['direct'] else 'no'} |", flush=True)
    if not ratios:
        raise SystemExit("no instance has a cached testbed: run `magis-ray grade --gold` first")
    print(f"\nsandbox ratio (the same steps): median {statistics.median(ratios):.2f}, max {max(ratios):.2f} over "
          f"{len(ratios)} instances (goal: at most 1.2)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--repos-dir", type=Path, default=Path("/work/repos"))
    parser.add_argument("--store")
    parser.add_argument("--grading")
    parser.add_argument("--instances", nargs="*")
    parser.add_argument("--per-repo", type=int, default=1, help="instances per repository in the sandbox ratio")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env-cache", type=Path, default=default_cache_root())
    parser.add_argument("--figures-only", action="store_true", help="the grading's figures, not the sandbox ratio")
    args = parser.parse_args()
    if args.store and args.grading:
        grading_figures(args.store, args.grading, args.env_cache)
        if args.figures_only:
            return
    records = [json.loads(line) for line in args.dataset.read_text().splitlines() if line.strip()]
    if args.instances:
        records = [r for r in records if r["instance_id"] in args.instances]
    else:
        per_repo: dict[str, int] = defaultdict(int)
        chosen = []
        for record in records:
            if per_repo[record["repo"]] < args.per_repo:
                per_repo[record["repo"]] += 1
                chosen.append(record)
        records = chosen
    sandbox_ratios(records, args.repos_dir, args.env_cache, args.repeats)


if __name__ == "__main__":
    main()
