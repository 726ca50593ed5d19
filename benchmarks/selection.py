"""Does candidate selection pick the right patch when one of the candidates is right? A noisy oracle
on SWE-bench instances whose environments build: per instance, the gold patch among plausible wrong
ones (the gold patch with its last hunk left out, with a constant or a comparison changed, and the
unchanged code), the instance's own test patch as the reproduction test (its FAIL_TO_PASS tests must
pass), and the repository's tests nearest the changed files as regression tests. The candidates go
through the team's own machinery (the execution bench, the evidence rules and the selection of
actors/roles/selection.py); no model is involved, so this measures the machinery.

    python benchmarks/selection.py --dataset /work/shared/swebench/lite-dev.jsonl --repos-dir /work/repos \\
        [--instances ID ...] [--env-cache DIR]

Prints a row per instance (the candidates made, which ones the tests accept, the choice, whether it
is gold-equivalent, the test time) and the share of gold-equivalent choices over the instances whose
environment builds (goal: at least 90%).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from pathlib import Path

from magis_ray.actors.code.regression import nearest_tests
from magis_ray.actors.code.repository import RepoSnapshot, find_repo
from magis_ray.actors.roles.developer import TaskResult
from magis_ray.actors.roles.selection import choose, normalized
from magis_ray.actors.roles.testing import Evidence, TestRequest
from magis_ray.actors.runtime.bench import BenchSetup, BenchUnavailable, ExecutionBench
from magis_ray.actors.swebench.instances import gold_files
from magis_ray.events.schema import PatchProposed, TaskFinished

MAX_REGRESSION_FILES = 4

# --- plausible wrong candidates ------------------------------------------------------------------

_HUNK = re.compile(r"^@@ ")
_FLIPS = [("==", "!="), ("!=", "=="), ("<=", ">"), (">=", "<"), (" < ", " >= "), (" > ", " <= "), (" is not ", " is "),
          (" is ", " is not "), (" and ", " or "), (" or ", " and "), ("True", "False"), ("False", "True")]


def _sections(patch: str) -> list[list[str]]:
    """The patch split into its files' sections (each from its `diff --git` line)."""
    sections: list[list[str]] = []
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git") or not sections:
            sections.append([])
        sections[-1].append(line)
    return sections


def without_last_hunk(patch: str) -> str | None:
    """The patch with the last hunk of its file with the most hunks left out; None for a one-hunk patch."""
    sections = _sections(patch)
    counts = [sum(1 for line in s if _HUNK.match(line)) for s in sections]
    if sum(counts) < 2:
        return None
    index = max(range(len(sections)), key=lambda i: counts[i])
    section = sections[index]
    if counts[index] == 1:  # one hunk in each of several files: drop the last file's change whole
        return "".join(line for s in sections[:-1] for line in s)
    last = max(i for i, line in enumerate(section) if _HUNK.match(line))
    sections[index] = section[:last]
    return "".join(line for s in sections for line in s)


def mutated(patch: str) -> str | None:
    """The patch with one added line's comparison, boolean or integer constant changed; None if none."""
    lines = patch.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if not line.startswith("+") or line.startswith("+++"):
            continue
        for old, new in _FLIPS:
            if old in line:
                lines[i] = line.replace(old, new, 1)
                return "".join(lines)
        number = re.search(r"(?<![\w.])(\d+)(?![\w.])", line[1:])
        if number:
            start, end = number.start(1) + 1, number.end(1) + 1
            lines[i] = line[:start] + str(int(number.group(1)) + 1) + line[end:]
            return "".join(lines)
    return None


def candidates_for(gold: str, seed: str) -> list[tuple[str, str]]:
    """(kind, diff) pairs: the gold patch and each wrong kind that can be made, in a seeded order."""
    made = [("gold", gold), ("no hunk", without_last_hunk(gold)), ("mutated", mutated(gold)), ("unchanged", "")]
    kept, seen = [], set()
    for kind, diff in made:
        if diff is None or normalized(diff) in seen:
            continue
        seen.add(normalized(diff))
        kept.append((kind, diff))
    random.Random(seed).shuffle(kept)
    return kept


# --- one instance ---------------------------------------------------------------------------------


def regression_targets(repo_path: str, record: dict) -> tuple[str, ...]:
    snapshot = RepoSnapshot.open(repo_path, record["base_commit"])
    touched = set(gold_files(record.get("test_patch", "")))
    targets: list[str] = []
    for path in gold_files(record["patch"]):
        for test in nearest_tests(snapshot, path):
            if test not in targets and test not in touched:
                targets.append(test)
    return tuple(targets[:MAX_REGRESSION_FILES])


def select(record: dict, repos_dir: str, env_cache: str) -> dict:
    repo_path = str(find_repo(record["repo"], repos_dir=repos_dir))
    os.environ["MAGIS_ENV_CACHE"] = env_cache  # the bench's node setting, read where the bench runs: here
    bench = ExecutionBench(BenchSetup(record=record, repo_path=repo_path))
    env = bench.environment()  # BenchUnavailable: the instance is not counted, and the row says why
    build_s = env.build_seconds if env.built_now else bench.cache.build_seconds(env)  # its first build's time
    reproduction = tuple(json.loads(record["FAIL_TO_PASS"]) if isinstance(record["FAIL_TO_PASS"], str) else record["FAIL_TO_PASS"])
    test_patch = record.get("test_patch", "")
    targets = regression_targets(repo_path, record)
    tests_started = time.perf_counter()
    regressions: tuple[str, ...] = ()
    if targets:
        regressions = tuple(bench.run(TestRequest("baseline", targets, (test_patch,))).passed)
    # files run, ids judge (a parsed id is not always one pytest takes back)
    check_targets = tuple(gold_files(test_patch)) + targets
    results, kinds = [], {}
    for number, (kind, diff) in enumerate(candidates_for(record["patch"], record["instance_id"]), 1):
        run = bench.run(TestRequest("check", check_targets, (test_patch, diff)))
        evidence = Evidence(run, reproduction, regressions)
        status = "unapproved" if evidence.blocks_approval else "approved"
        patch = PatchProposed(task_id="T1", attempt=1, path="", base_blob_id="", edits=[], new_text="", diff=diff, candidate=number)
        results.append(TaskResult(TaskFinished(task_id="T1", status=status, attempts=1, candidate=number), patch, evidence))
        kinds[number] = (kind, not evidence.blocks_approval)
    # No model here: a tie between groups falls to the lowest-numbered candidate (the order is
    # shuffled per instance), where the team would ask its QA Engineer.
    chosen, event = choose(results, None, record["problem_statement"])
    accepted = sum(ok for _, ok in kinds.values())
    decided_by = "tests" if accepted == 1 else "tie" if "different changes" in event.reason else "majority"
    return {
        "instance": record["instance_id"], "env": env.label, "env_build_s": round(build_s, 1),
        "candidates": [f"{kinds[n][0]}{'+' if kinds[n][1] else '-'}" for n in sorted(kinds)],
        "chosen": kinds[chosen.finished.candidate][0], "gold_equivalent": normalized(chosen.patch.diff) == normalized(record["patch"]),
        "reason": event.reason, "decided_by": decided_by, "regressions": len(regressions), "test_s": round(time.perf_counter() - tests_started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--repos-dir", required=True)
    parser.add_argument("--instances", nargs="*", default=[])
    parser.add_argument("--env-cache", default="", help="the environments' folder (default: MAGIS_ENV_CACHE or ~/.cache/magis-ray/envs)")
    parser.add_argument("--json", help="write the rows here as well")
    args = parser.parse_args(argv)
    records = [json.loads(line) for line in Path(args.dataset).read_text().splitlines() if line.strip()]
    if args.instances:
        records = [r for r in records if r["instance_id"] in set(args.instances)]
    rows, skipped = [], []
    print(f"{'instance':<34} {'env':>7} {'tests':>7}  {'candidates (+ accepted by the tests)':<40} chosen")
    print(f"{'':<34} {'(first build)':>15}")
    for record in records:
        try:
            row = select(record, args.repos_dir, args.env_cache)
        except BenchUnavailable as exc:
            skipped.append((record["instance_id"], str(exc)))
            print(f"{record['instance_id']:<34} skipped: {' '.join(str(exc).split())[:120]}")
            continue
        except Exception as exc:  # noqa: BLE001 - one broken instance must not end the benchmark
            skipped.append((record["instance_id"], f"{type(exc).__name__}: {exc}"))
            print(f"{record['instance_id']:<34} skipped: {type(exc).__name__}: {' '.join(str(exc).split())[:120]}")
            continue
        rows.append(row)
        mark = "gold-equivalent" if row["gold_equivalent"] else "WRONG"
        print(f"{row['instance']:<34} {row['env_build_s']:>6.0f}s {row['test_s']:>6.0f}s  {' '.join(row['candidates']):<40} "
              f"{row['chosen']} ({mark}, by {row['decided_by']})")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "skipped": skipped}, indent=1))
    if not rows:
        print("no instance had an environment")
        return 1
    right = sum(r["gold_equivalent"] for r in rows)
    ties = [r for r in rows if r["decided_by"] == "tie"]
    print(f"\ngold-equivalent choices: {right} of {len(rows)} ({100 * right / len(rows):.0f}%); {len(skipped)} skipped; "
          f"{len(ties)} decided by a tie-break ({sum(r['gold_equivalent'] for r in ties)} of them gold-equivalent)")
    return 0 if right >= 0.9 * len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
