"""Does the whole pipeline reproduce the gold patch when every answer is right? For each instance,
the oracle (actors/swebench/oracle.py) answers every step of a real run (Custodian, Manager, meeting, plan,
Developers, QA; real gateway over HTTP; a real SQLite store); the run's diff must apply to the base
commit and leave every file the gold patch touches byte-identical to the gold patch's result.

    python benchmarks/oracle.py --dataset /work/shared/swebench/lite-dev.jsonl --repos-dir /work/repos \\
        [--instances ID ...] [--top-k 10] [--ranking symbols]

Prints one line per instance ("applies / identical", or why not) and "N of M" at the end, M
counting every instance of the dataset (one that cannot be tried counts as a failure).
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time

import structlog

from magis_ray.actors.swebench.oracle import build_oracle, compare_with_gold, run_oracle
from magis_ray.actors.code.repository import RepoError, find_repo
from magis_ray.actors.swebench.instances import Instance, PatchError, load_dataset
from magis_ray.events.projections import final_diff, fold
from magis_ray.events.schema import RunFailed, RunSettings
from magis_ray.store import open_store


def try_instance(instance: Instance, repos_dir: str, store, settings: RunSettings) -> tuple[bool, bool, str]:
    """(applies, identical, note) for one instance."""
    try:
        repo_path = str(find_repo(instance.repo, repos_dir=repos_dir))
        oracle = build_oracle(instance, repo_path, settings)
    except (RepoError, PatchError) as exc:
        return False, False, f"cannot try: {exc}"
    except Exception as exc:  # noqa: BLE001 - one broken repository must not end the benchmark
        return False, False, f"cannot try: {type(exc).__name__}: {exc}"
    end = run_oracle(instance, repo_path, store, instance.instance_id, settings, oracle=oracle)
    if isinstance(end, RunFailed):
        return False, False, f"run failed: {end.reason}"
    comparison = compare_with_gold(repo_path, instance, final_diff(fold(store.read(instance.instance_id))))
    notes = [comparison.reason] if comparison.reason else []
    notes += [f"known limit: {path} {why}" for path, why in oracle.limits.items()]
    return comparison.applies, comparison.identical, "; ".join(notes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="SWE-bench .jsonl or .json")
    parser.add_argument("--repos-dir", required=True, help="folder of owner__name clones")
    parser.add_argument("--instances", nargs="*", default=[], help="only these instance ids")
    parser.add_argument("--top-k", type=int, default=RunSettings().top_k, help="BM25 candidates (the run's top_k)")
    parser.add_argument("--ranking", choices=["previous", "symbols"], default="symbols", help="the Custodian's file ranking")
    args = parser.parse_args(argv)
    # The runs' own debug logging would bury the table.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    instances, errors = load_dataset(args.dataset)
    if args.instances:
        instances = [i for i in instances if i.instance_id in set(args.instances)]
        errors = [e for e in errors if e.instance_id in set(args.instances)]
    settings = RunSettings(tests=False, top_k=args.top_k, model="oracle", ranking=args.ranking)
    total = len(instances) + len(errors)
    reproduced = 0
    width = max([len(i.instance_id) for i in instances] + [20])
    for error in errors:
        print(f"{(error.instance_id or f'line {error.line}'):<{width}}  -        -          dataset line {error.line}: {error.reason}")
    with tempfile.TemporaryDirectory(prefix="magis-oracle-") as folder:
        store = open_store(folder, create=True)
        for instance in instances:
            started = time.perf_counter()
            applies, identical, note = try_instance(instance, args.repos_dir, store, settings)
            reproduced += applies and identical
            seconds = time.perf_counter() - started
            print(f"{instance.instance_id:<{width}}  {'applies' if applies else 'FAILS  '}  "
                  f"{'identical' if identical else 'DIFFERS  '}  {seconds:5.1f}s  {note}", flush=True)
        store.close()
    print(f"{reproduced} of {total} reproduced (applies and identical)")
    return 0 if reproduced == total else 1


if __name__ == "__main__":
    sys.exit(main())
