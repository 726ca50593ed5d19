"""File recall@k of the Custodian's BM25 stage: the ranking (new), the ranking before symbol
evidence (old, PREVIOUS_RANKING) and the SWE-bench paper's plain BM25, on the same instances, in one run.

    python benchmarks/localization.py --dataset /work/shared/swebench/lite-dev.jsonl \\
        /work/shared/swebench/verified-tuning.jsonl --repos-dir /work/repos [--folds 2] [--seed 15] \\
        [--instances ID ...] [--ks 1 3 5 10]

For each instance: the documents of its base commit (select_documents), ranked for the issue with
and without its hints. Recall@k = the share of gold files in the top k, averaged over instances.

--folds N: cross-validation. The instances are split into N folds (seeded, stratified by
repository); for each fold the weights of GRID that give the best recall@5 + recall@10 (without
hints) on the other folds are chosen, and the fold is ranked with them. The table then shows
every instance held out once, old against new, per repository. Without --folds, new uses the
defaults (RankingSettings()).

Time to rank: select_documents plus ranking (tokenizing every file at the commit, the token cache
cleared first), old and new measured back to back on each instance; the ratio of the totals.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import random
import sys
import time
from collections import defaultdict

from magis_ray.actors.code import ranking
from magis_ray.actors.code.ranking import PREVIOUS_RANKING, FileRanker, RankingSettings, localize_files, select_documents
from magis_ray.actors.code.repository import RepoSnapshot, find_repo
from magis_ray.actors.swebench.instances import Instance, gold_files, load_dataset
from magis_ray.actors.swebench.metrics import file_recall

# The weights tried: small on purpose (216 points), around the defaults.
GRID = [
    RankingSettings(symbol_weight=s, plain_name_weight=p, mention_weight=m, import_mention_weight=m, path_weight=w,
                    crash_weight=c, definition_weight=d)
    for s, p, m, w, c, d in itertools.product((0.15, 0.3, 0.6), (0.0, 0.3), (0.5, 1.0), (0.5, 0.8, 1.2), (2.0, 3.0), (0.4, 0.6, 0.8))
]
TOP = 10


def split_folds(instances: list[Instance], folds: int, seed: int) -> dict[str, int]:
    """instance id -> fold; each repository's instances dealt round-robin after a seeded shuffle."""
    by_repo: dict[str, list[str]] = defaultdict(list)
    for instance in instances:
        by_repo[instance.repo].append(instance.instance_id)
    fold_of, rng, turn = {}, random.Random(seed), 0
    for repo in sorted(by_repo):
        ids = sorted(by_repo[repo])
        rng.shuffle(ids)
        for instance_id in ids:
            fold_of[instance_id] = turn % folds
            turn += 1
    return fold_of


def timed(function):
    ranking._word_tokens.cache_clear()
    started = time.perf_counter()
    result = function()
    return result, time.perf_counter() - started


def measure(instance: Instance, repos_dir: str) -> dict:
    snapshot = RepoSnapshot.open(find_repo(instance.repo, repos_dir=repos_dir), instance.base_commit)
    hints = {False: "", True: instance.hints_text}
    select_documents(snapshot, settings=PREVIOUS_RANKING)  # untimed: the first read of the blobs pays for both
    old_documents, old_time = timed(lambda: (d := select_documents(snapshot, settings=PREVIOUS_RANKING),
                                             localize_files(d, instance.problem_statement, "", TOP, settings=PREVIOUS_RANKING))[0])
    new_ranker, new_time = timed(lambda: (r := FileRanker(select_documents(snapshot)), r.rank(instance.problem_statement, "", TOP))[0])
    result = {"old_time": old_time, "new_time": new_time, "old": {}, "plain": {}, "grid": {}}
    for use_hints, hint in hints.items():
        result["old"][use_hints] = [p for p, _ in localize_files(old_documents, instance.problem_statement, hint, TOP, settings=PREVIOUS_RANKING)]
        result["plain"][use_hints] = [p for p, _ in localize_files(old_documents, instance.problem_statement, hint, TOP, plain=True)]
        evidence = new_ranker.evidence(instance.problem_statement, hint)
        result["grid"][use_hints] = [[p for p, _ in new_ranker.weigh(evidence, TOP, s)] for s in [RankingSettings(), *GRID]]
    return result


def table(rows: dict[str, list[tuple[str, list[str], list[str]]]], ks: list[int]) -> None:
    """rows: label -> [(repo, ranking, gold)]; recall per repository and overall, and the hit difference."""
    labels = list(rows)
    repos = sorted({repo for repo, _, _ in rows[labels[0]]})
    header = f"{'repository':<30}{'n':>4}  " + "  ".join(f"{label:>{8 * len(ks)}}" for label in labels)
    print(header)
    print(f"{'':<34}  " + "  ".join("".join(f"{f'@{k}':>8}" for k in ks) for _ in labels) + "   new-old hits @5 @10")
    for repo in [*repos, "all"]:
        cells, sums = [], {}
        for label in labels:
            chosen = [(r, g) for rp, r, g in rows[label] if repo in ("all", rp)]
            sums[label] = {k: sum(file_recall(r[:k], g) for r, g in chosen) for k in ks}
            cells.append("".join(f"{sums[label][k] / len(chosen):8.3f}" for k in ks))
        n = sum(1 for rp, _, _ in rows[labels[0]] if repo in ("all", rp))
        delta = "" if len(labels) < 2 else "   " + " ".join(
            f"{sums[labels[1]][k] - sums[labels[0]][k]:+5.1f}" for k in (5, 10) if k in ks)
        print(f"{repo:<30}{n:>4}  " + "  ".join(cells) + delta)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, nargs="+", help="one or more SWE-bench .jsonl/.json files")
    parser.add_argument("--repos-dir", required=True)
    parser.add_argument("--instances", nargs="*", default=[])
    parser.add_argument("--ks", nargs="*", type=int, default=[1, 3, 5, 10])
    parser.add_argument("--folds", type=int, default=0, help="cross-validate the weights over this many folds (2 or more)")
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args(argv)
    if args.folds == 1 or args.folds < 0 or max(args.ks) > TOP:
        parser.error(f"--folds must be 0 (off) or at least 2, and every k at most {TOP}")

    instances: list[Instance] = []
    for dataset in args.dataset:
        loaded, errors = load_dataset(dataset)
        instances += loaded
        for error in errors:
            print(f"{dataset} line {error.line}: {error.reason}")
    if args.instances:
        instances = [i for i in instances if i.instance_id in set(args.instances)]
    measured: dict[str, dict] = {}
    for instance in instances:
        try:
            measured[instance.instance_id] = measure(instance, args.repos_dir)
        except Exception as exc:  # noqa: BLE001 - an unreadable repository is skipped, and said so
            print(f"{instance.instance_id}: skipped: {type(exc).__name__}: {exc}")
            continue
        m = measured[instance.instance_id]
        print(f"{instance.instance_id:<40} old {m['old_time']:5.2f}s new {m['new_time']:5.2f}s", flush=True)
    instances = [i for i in instances if i.instance_id in measured]
    if not instances:
        print("no instance could be ranked")
        return 1
    gold = {i.instance_id: gold_files(i.patch) for i in instances}

    def recall_sum(ids, choice: int, use_hints: bool) -> float:
        return sum(file_recall(measured[i]["grid"][use_hints][choice][:k], gold[i]) for i in ids for k in (5, 10))

    chosen = {i.instance_id: 0 for i in instances}  # index into [defaults, *GRID]
    if args.folds:
        fold_of = split_folds(instances, args.folds, args.seed)
        for fold in range(args.folds):
            train = [i for i in fold_of if fold_of[i] != fold]
            best = max(range(1, len(GRID) + 1), key=lambda c: (recall_sum(train, c, False), -c))
            print(f"fold {fold}: chosen on the other folds ({len(train)} instances): {describe(GRID[best - 1])}")
            for i in fold_of:
                if fold_of[i] == fold:
                    chosen[i] = best
    print(f"\nnew defaults: {describe(RankingSettings())}")
    for use_hints in (False, True):
        print(f"\nrecall@k {'with' if use_hints else 'without'} hints, {len(instances)} instances"
              + (f", each held out once ({args.folds} folds)" if args.folds else ""))
        table({
            "old": [(i.repo, measured[i.instance_id]["old"][use_hints], gold[i.instance_id]) for i in instances],
            "new": [(i.repo, measured[i.instance_id]["grid"][use_hints][chosen[i.instance_id]], gold[i.instance_id]) for i in instances],
            "plain": [(i.repo, measured[i.instance_id]["plain"][use_hints], gold[i.instance_id]) for i in instances],
        }, args.ks)
    old_total = sum(m["old_time"] for m in measured.values())
    new_total = sum(m["new_time"] for m in measured.values())
    print(f"\ntime to rank one instance (documents + ranking, cold token cache): old {old_total / len(measured):.2f}s, "
          f"new {new_total / len(measured):.2f}s on average; new/old = {new_total / old_total:.2f}")
    return 0


def describe(settings: RankingSettings) -> str:
    return ", ".join(f"{f.name}={getattr(settings, f.name)}" for f in dataclasses.fields(settings)
                     if f.name in ("symbol_weight", "plain_name_weight", "mention_weight", "import_mention_weight", "path_weight",
                                   "crash_weight", "definition_weight"))


if __name__ == "__main__":
    sys.exit(main())
