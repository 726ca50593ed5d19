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
- the environments this grading built: their median build and the ones over 120 s;
- `--before STORE GRADING CACHE`: the per-repository ratios of another grading (the same instances
  graded by other code, cold) beside this one's, before -> after;
- the sandbox ratio, on instances whose testbeds are cached: an instance's whole run (the
  prediction applied and the harness's eval script) in bubblewrap over the same steps directly on
  the host (`--sandbox none`, which has no install step again), the median of alternating repeats
  per instance (goal: at most 1.2); and the run as graded (the install step again, on a copy of
  the testbed's prefix) beside it.

Usage: python benchmarks/grading.py --dataset D --repos-dir R [--store S --grading NAME]
                                    [--instances ID ...] [--per-repo 1] [--repeats 3] [--env-cache DIR]
                                    [--figures-only] [--before STORE GRADING CACHE]
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from magis_ray.actors.execution.environments import EnvironmentCache, default_cache_root
from magis_ray.actors.execution.runner import TestRunner
from magis_ray.actors.execution.sandbox import Sandbox
from magis_ray.actors.execution.testbeds import TestbedCache
from magis_ray.actors.swebench.grading import grade, grading_limits, spec_for
from magis_ray.actors.swebench.grading_batch import preparation_seconds
from magis_ray.events.schema import GradingStarted, InstanceGraded
from magis_ray.events.streams import StreamKind
from magis_ray.store.base import UnknownRun

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "shared" / "swebench" / "verified-tuning.jsonl"


def earlier_build_seconds(cache_root: Path, env_key: str) -> float | None:
    """The build time an environment built before this grading recorded in its cache."""
    try:
        return json.loads((cache_root / env_key / "ready.json").read_text())["build_seconds"]
    except (OSError, KeyError, ValueError):
        return None


def grading_records(store_path: str, name: str) -> list:
    """The grading's records, or a one-line exit when the store has no such grading."""
    from magis_ray.store import open_store

    try:
        with open_store(store_path) as store:
            records = list(store.read(StreamKind.GRADING.stream_id(name)))
    except UnknownRun:
        records = []
    if not any(isinstance(r.event, GradingStarted) for r in records):
        raise SystemExit(f"no grading {name!r} in {store_path}")
    return records


def graded_events(store_path: str, name: str) -> list[InstanceGraded]:
    return [r.event for r in grading_records(store_path, name) if isinstance(r.event, InstanceGraded)]


def grading_figures(store_path: str, name: str, cache_root: Path) -> None:
    records = grading_records(store_path, name)
    starts = [i for i, r in enumerate(records) if isinstance(r.event, GradingStarted)]
    # The figures of the grading's first invocation that graded anything (a rerun only skips).
    graded = [r for r in records if isinstance(r.event, InstanceGraded)]
    if not graded:
        raise SystemExit(f"the grading {name!r} has graded no instance yet")
    first = records[starts[0]]
    last = max(graded, key=lambda r: r.time)
    print(f"## the grading {name}: {len(graded)} instances, wall time {(last.time - first.time) / 60:.1f} min "
          f"({first.event.workers} workers)\n")
    print("| environment | first build s | testbeds built | median testbed build s | instances | median test s | max test s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    by_env: dict[str, list[InstanceGraded]] = defaultdict(list)
    for record in graded:
        by_env[record.event.environment.label or "(none)"].append(record.event)
    for label in sorted(by_env):
        events = by_env[label]
        built = [e.environment.build_seconds for e in events if e.environment.built_now]
        earlier = None if built else earlier_build_seconds(cache_root, next((e.environment.key for e in events if e.environment.key), ""))
        first = f"{max(built):.0f}" if built else (f"{earlier:.0f}*" if earlier is not None else "-")
        testbeds = [e.testbed.build_seconds for e in events if e.testbed.built_now]
        tests = [e.run.seconds for e in events if e.run.seconds]
        print(f"| {label} | {first} | {len(testbeds)} | "
              f"{statistics.median(testbeds) if testbeds else 0:.0f} | {len(events)} | "
              f"{statistics.median(tests) if tests else 0:.1f} | {max(tests) if tests else 0:.1f} |")
    print("\n\\* built before this grading, cached (its build time as the cache recorded it)")
    environment_builds([r.event for r in graded])
    repository_figures([r.event for r in graded], cache_root)
    preparation_figures([r.event for r in graded], cache_root)


def environment_builds(events: list[InstanceGraded]) -> None:
    """The environments this grading built: how many, their median build, the longest, and
    which took over 120 s."""
    builds: dict[str, tuple[str, float]] = {}
    for event in events:
        if event.environment.built_now:
            builds[event.environment.key] = (event.environment.label, max(event.environment.build_seconds, builds.get(event.environment.key, ("", 0.0))[1]))
    if not builds:
        print("\nno environment was built by this grading")
        return
    seconds = sorted(s for _, s in builds.values())
    slow = sorted(((s, label) for label, s in builds.values() if s > 120), reverse=True)
    print(f"\nenvironments built: {len(seconds)}, median {statistics.median(seconds):.0f} s, longest {seconds[-1]:.0f} s; "
          f"over 120 s: {', '.join(f'{label} {s:.0f}' for s, label in slow) or 'none'}")


def repository_of(instance_id: str) -> str:
    """owner/name of a SWE-bench instance id (owner__name-NUMBER)."""
    return instance_id.rsplit("-", 1)[0].replace("__", "/")


@dataclass
class RepositoryCost:
    """One repository's share of a grading, in seconds; testbeds made before it count at their
    recorded build time in `earlier_testbeds`."""

    instances: int = 0
    environments: float = 0.0
    testbeds: float = 0.0
    earlier_testbeds: float = 0.0
    tests: float = 0.0
    made: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, other: "RepositoryCost") -> None:
        self.instances += other.instances
        self.environments += other.environments
        self.testbeds += other.testbeds
        self.earlier_testbeds += other.earlier_testbeds
        self.tests += other.tests
        for how, count in other.made.items():
            self.made[how] += count

    @property
    def warm(self) -> str:
        """(testbeds + tests) / tests: the environments already built."""
        return ratio(self.testbeds + self.tests, self.tests)

    @property
    def cold(self) -> str:
        """(environments + testbeds + tests) / tests: everything built from nothing."""
        return ratio(self.environments + self.testbeds + self.earlier_testbeds + self.tests, self.tests)


def repository_costs(events: list[InstanceGraded], cache_root: Path) -> dict[str, RepositoryCost]:
    """Per repository (owner/name) and over all ("all"): its environments' builds (this grading's,
    or for one it found cached, the build its cache recorded), its testbeds' builds, its tests, and
    how each testbed was made."""
    by_repo: dict[str, list[InstanceGraded]] = defaultdict(list)
    for event in events:
        if event.ran:
            by_repo[repository_of(event.instance_id)].append(event)
    costs: dict[str, RepositoryCost] = {}
    total = RepositoryCost()
    for repo in sorted(by_repo):
        group = by_repo[repo]
        environments: dict[str, float] = {}
        for event in group:
            seconds = event.environment.build_seconds if event.environment.built_now else earlier_build_seconds(cache_root, event.environment.key)
            environments[event.environment.key] = max(environments.get(event.environment.key, 0.0), seconds or 0.0)
        cost = RepositoryCost(
            instances=len(group), environments=sum(environments.values()),
            testbeds=sum(e.testbed.build_seconds for e in group if e.testbed.built_now),
            earlier_testbeds=sum(earlier_build_seconds(cache_root / "testbeds", e.testbed.key) or 0.0
                                 for e in group if not e.testbed.built_now and e.testbed.key),
            tests=sum(e.run.seconds for e in group))
        for event in group:
            how = testbed_made(cache_root, event.testbed.key).split(" ")[0] if event.testbed.built_now else "from cache"
            cost.made[how] += 1
        costs[repo] = cost
        total.add(cost)
    costs["all"] = total
    return costs


def repository_figures(events: list[InstanceGraded], cache_root: Path) -> None:
    """Per repository: its environments' builds, its testbeds' builds, its tests; how each testbed
    was made; and the two ratios: (testbeds + tests) / tests, this grading with its environments
    warm, and (environments + testbeds + tests) / tests, a grading from nothing."""
    print("\n### per repository\n")
    print("| repository | instances | environments s | testbeds s | tests s | testbeds made | "
          "(testbeds + tests) / tests | (environments + testbeds + tests) / tests |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for repo, cost in repository_costs(events, cache_root).items():
        name, warm, cold = (("**all**", f"**{cost.warm}**", f"**{cost.cold}**") if repo == "all" else (repo, cost.warm, cost.cold))
        print(f"| {name} | {cost.instances} | {cost.environments:.0f} | {cost.testbeds:.0f} | {cost.tests:.0f} | "
              f"{made_text(cost.made)} | {warm} | {cold} |")
    print("\nenvironments s: each environment's build, this grading's or, cached, the one its cache recorded; the last "
          "ratio adds the recorded builds of testbeds taken from the cache too (a grading from nothing builds them)")


def before_and_after(before: list[InstanceGraded], before_cache: Path, after: list[InstanceGraded], after_cache: Path) -> None:
    """The per-repository ratios of two gradings of the same instances side by side, on the
    instances both graded."""
    both = {e.instance_id for e in before if e.ran} & {e.instance_id for e in after if e.ran}
    then = repository_costs([e for e in before if e.instance_id in both], before_cache)
    now = repository_costs([e for e in after if e.instance_id in both], after_cache)
    print(f"\n### before -> after, per repository ({len(both)} instances both graded)\n")
    print("| repository | instances | environments s | testbeds s | tests s | (testbeds + tests) / tests | "
          "(environments + testbeds + tests) / tests |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for repo in now:
        a, b = then[repo], now[repo]
        name = "**all**" if repo == "all" else repo
        print(f"| {name} | {b.instances} | {a.environments:.0f} -> {b.environments:.0f} | {a.testbeds:.0f} -> {b.testbeds:.0f} | "
              f"{a.tests:.0f} -> {b.tests:.0f} | {a.warm} -> {b.warm} | {a.cold} -> {b.cold} |")


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
        made = testbed_made(cache_root, event.testbed.key) if event.testbed.built_now else "cached"
        prep = preparation_seconds(event)
        prepared, tested = prepared + prep, tested + event.run.seconds
        ratio = f"{(prep + event.run.seconds) / event.run.seconds:.2f}" if event.run.seconds else "-"
        print(f"| {event.instance_id} | {event.environment.build_seconds * event.environment.built_now:.1f} | "
              f"{event.testbed.build_seconds * event.testbed.built_now:.1f} | {made} | {event.run.seconds:.1f} | {ratio} |")
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
                times[mode].append(result.run.seconds)
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
    parser.add_argument("--before", nargs=3, metavar=("STORE", "GRADING", "CACHE"),
                        help="another grading of the same instances (its store, name and cache root), compared per repository")
    args = parser.parse_args()
    if args.before and not (args.store and args.grading):
        parser.error("--before needs --store and --grading: the grading it is compared with")
    if args.store and args.grading:
        grading_figures(args.store, args.grading, args.env_cache)
        if args.before:
            store, name, cache = args.before
            before_and_after(graded_events(store, name), Path(cache), graded_events(args.store, args.grading), args.env_cache)
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
