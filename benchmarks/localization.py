"""File recall@k of the Custodian's BM25 stage against the SWE-bench paper's plain BM25, in one run.

    python benchmarks/localization.py --dataset /work/shared/swebench/lite-dev.jsonl --repos-dir /work/repos \\
        [--instances ID ...] [--ks 1 3 5 10] [--no-hints]

For each instance: the documents of its base commit (actors.code.ranking.select_documents), ranked
for the issue as the Custodian reads it (problem statement and hints) by the code scheme
(actors.code.ranking.localize_files) and by the plain baseline (plain=True). Recall@k = the share of
gold files in the top k, averaged over the instances that could be read. Goal: the code scheme
beats the baseline at every k.
"""
from __future__ import annotations

import argparse
import sys
import time
from statistics import mean

from magis_ray.actors.code.ranking import localize_files, select_documents
from magis_ray.actors.code.repository import RepoSnapshot, find_repo
from magis_ray.actors.swebench.instances import Instance, gold_files, load_dataset
from magis_ray.actors.swebench.metrics import file_recall

SCHEMES = {"code": False, "plain": True}  # name -> plain=


def rankings(instance: Instance, repos_dir: str, k: int, use_hints: bool) -> dict[str, list[str]]:
    snapshot = RepoSnapshot.open(find_repo(instance.repo, repos_dir=repos_dir), instance.base_commit)
    documents = select_documents(snapshot)
    issue = instance.issue().brief(use_hints)
    return {name: [path for path, _ in localize_files(documents, issue, k=k, plain=plain)] for name, plain in SCHEMES.items()}


def first_hit(ranking: list[str], gold: list[str]) -> str:
    return next((str(n) for n, path in enumerate(ranking, 1) if path in gold), "-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--repos-dir", required=True)
    parser.add_argument("--instances", nargs="*", default=[])
    parser.add_argument("--ks", nargs="*", type=int, default=[1, 3, 5, 10])
    parser.add_argument("--no-hints", action="store_true", help="rank for the problem statement alone")
    args = parser.parse_args(argv)

    instances, errors = load_dataset(args.dataset)
    if args.instances:
        instances = [i for i in instances if i.instance_id in set(args.instances)]
    for error in errors:
        print(f"dataset line {error.line}: {error.reason}")
    recalls: dict[str, dict[int, list[float]]] = {name: {k: [] for k in args.ks} for name in SCHEMES}
    width = max([len(i.instance_id) for i in instances] + [10])
    print(f"{'instance':<{width}}  first gold file at: {'  '.join(f'{n:>5}' for n in SCHEMES)}")
    for instance in instances:
        started = time.perf_counter()
        gold = gold_files(instance.patch)
        try:
            ranked = rankings(instance, args.repos_dir, max(args.ks), not args.no_hints)
        except Exception as exc:  # noqa: BLE001 - an unreadable repository is skipped, and said so
            print(f"{instance.instance_id:<{width}}  skipped: {type(exc).__name__}: {exc}")
            continue
        for name, ranking in ranked.items():
            for k in args.ks:
                recalls[name][k].append(file_recall(ranking[:k], gold))
        hits = "  ".join(f"{first_hit(ranked[n], gold):>5}" for n in SCHEMES)
        print(f"{instance.instance_id:<{width}}  {'':<19} {hits}   ({time.perf_counter() - started:.1f}s)")

    counted = len(recalls["code"][args.ks[0]])
    if not counted:
        print("no instance could be ranked")
        return 1
    print(f"\nrecall@k over {counted} instances")
    print("scheme  " + "  ".join(f"{f'@{k}':>6}" for k in args.ks))
    for name in SCHEMES:
        print(f"{name:<6}  " + "  ".join(f"{100 * mean(recalls[name][k]):5.1f}%" for k in args.ks))
    beats = all(mean(recalls["code"][k]) > mean(recalls["plain"][k]) for k in args.ks)
    print(f"code beats plain at every k: {'yes' if beats else 'no'}")
    return 0 if beats else 1


if __name__ == "__main__":
    sys.exit(main())
