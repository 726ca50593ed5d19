"""Does `magis-ray tasks validate` compute the lists SWE-bench's own validation gave its records?
Each record of a SWE-bench dataset is stripped of its FAIL_TO_PASS and PASS_TO_PASS, validated as
`tasks validate` validates (the same service: the test patch alone, then with the gold patch, each
twice, in the sandbox), and the lists it computes are compared with the dataset's, per instance
and in total: FAIL_TO_PASS identical, PASS_TO_PASS identical (as sets: the lists' order is the
order of a test log, which the comparison leaves out); and, where a dataset names tests by function
alone (sympy's runner) or the lists here by an old pytest's ids (`Class::()::test`), whether they
hold the same tests. A dropped instance counts with the lists
its validation recorded (none, when it stopped before the second runs).

    python benchmarks/validation_agreement.py --dataset /work/shared/swebench/verified-tuning.jsonl \\
        --repos-dir /work/repos [--instances ID ...] [--ignore-specs] [--workers 2] [--no-ray] \\
        [--store S] [--json agreement.json] [--needs-internet ID ...] [--so-far]

--ignore-specs validates in the environments inferred from what each project declares at the base
commit and its date, as for a repository SWE-bench's tables do not know: the records' `version` is
cleared, so the tables name no spec for them. The same --store and options resume a validation
cut off (its name says which dataset and which environments); --so-far reports the instances that
store has validated, validating none (a pass of hours, read while it runs).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from magis_ray.actors.swebench.grading_service import GradingInputError, load_records
from magis_ray.actors.swebench.validation_service import (ValidationLog, ValidationOptions, plan_validation,
                                                          run_validation_plan)
from magis_ray.events.schema import CandidateValidated
from magis_ray.events.settings import GradeSettings

LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")


def stripped(records: list[dict], ignore_specs: bool) -> list[dict]:
    """The records without their lists (and, to ignore SWE-bench's tables, without their version)."""
    return [{**{k: v for k, v in r.items() if k not in LISTS}, **({"version": ""} if ignore_specs else {})} for r in records]


def listed(record: dict, name: str) -> set[str]:
    value = record.get(name) or []
    return set(json.loads(value) if isinstance(value, str) else value)


def by_function(record: dict) -> bool:
    """Whether the dataset names the record's tests by function alone (sympy's runner prints
    `test_sqrt`, where pytest, which the inferred environments run, names `path::test_sqrt`)."""
    named = listed(record, "FAIL_TO_PASS") | listed(record, "PASS_TO_PASS")
    return bool(named) and not any("::" in test for test in named)


def as_named(tests: set[str], by_function_alone: bool) -> set[str]:
    """Tests as the dataset names them: by function alone (by_function; two files' tests of one
    name become one), and without the `()` node by which pytest before 4 named a class's
    instance (`Class::()::test`)."""
    plain = {test.replace("::()::", "::") for test in tests}
    return {test.rsplit("::", 1)[-1] for test in plain} if by_function_alone else plain


def compared(record: dict, outcome: CandidateValidated) -> dict:
    """One instance's agreement: each list identical or not, and what is missing and extra; and
    whether it holds the same tests once they are named as the dataset names them (`same_tests`)."""
    entry = {"kept": outcome.kept, "reason": outcome.reason, "detail": outcome.detail, "flaky": outcome.flaky}
    renamed = by_function(record)
    for name, ours in zip(LISTS, (set(outcome.fail_to_pass), set(outcome.pass_to_pass))):
        theirs = listed(record, name)
        entry[name] = {"identical": ours == theirs, "same_tests": as_named(ours, renamed) == as_named(theirs, renamed),
                       "missing": sorted(theirs - ours), "extra": sorted(ours - theirs)}
    return entry


def report(agreement: dict[str, dict], results: list[CandidateValidated], json_path: str | None,
           online: frozenset[str] = frozenset()) -> None:
    """The table, a row an instance, and the totals, over all and over those not `online` (whose
    tests need the internet, which the sandbox has not); each instance's agreement to `json_path`."""
    if not agreement:
        print("no instance validated yet")
        return
    width = max(len(i) for i in agreement)
    print(f"{'INSTANCE':<{width}}  F2P        P2P        OUTCOME")
    for instance_id, entry in agreement.items():
        cells = [("identical" if entry[n]["identical"] else f"-{len(entry[n]['missing'])} +{len(entry[n]['extra'])}")
                 for n in LISTS]
        print(f"{instance_id:<{width}}  {cells[0]:<9}  {cells[1]:<9}  {'kept' if entry['kept'] else entry['reason']}")
    total = len(agreement)
    offline = {i: e for i, e in agreement.items() if i not in online}
    measures = [("identical", "identical")]
    if any(entry[n]["same_tests"] != entry[n]["identical"] for entry in agreement.values() for n in LISTS):
        measures.append(("same_tests", "the same tests, named as the dataset names them"))
    for measure, words in measures:
        for name in LISTS:
            same = sum(entry[name][measure] for entry in agreement.values())
            line = f"{name} {words}: {same} of {total} ({100 * same / total:.1f}%)"
            if online and offline:
                same = sum(entry[name][measure] for entry in offline.values())
                line += f"; of the {len(offline)} that need no internet: {same} ({100 * same / len(offline):.1f}%)"
            print(line)
    print(f"kept: {sum(e['kept'] for e in agreement.values())} of {total}; "
          f"seconds per instance on its node: {sum(o.seconds for o in results) / total:.1f}")
    if json_path:
        Path(json_path).write_text(json.dumps(agreement, indent=2))


def so_far(store: Path, name: str, records: list[dict]) -> tuple[dict[str, dict], list[CandidateValidated]]:
    """The agreement of the records the store's validation `name` has an outcome for, in the records' order."""
    from magis_ray.store import open_store

    with open_store(str(store)) as opened:
        validated = ValidationLog(opened, name).validated
    done = [(r, validated[r["instance_id"]]) for r in records if r["instance_id"] in validated]
    return {r["instance_id"]: compared(r, o) for r, o in done}, [o for _, o in done]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="SWE-bench .jsonl or .json")
    parser.add_argument("--repos-dir", required=True, help="folder of owner__name clones")
    parser.add_argument("--instances", nargs="*", default=[], help="only these instance ids")
    parser.add_argument("--ignore-specs", action="store_true", help="inferred environments, not SWE-bench's tables")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=GradeSettings().timeout, help="seconds a test run may take")
    parser.add_argument("--memory", default=GradeSettings().memory, help="each test run's memory budget")
    parser.add_argument("--no-ray", action="store_true", help="threads of this process, not Ray tasks")
    parser.add_argument("--store", help="the store (default: a temporary folder, so nothing resumes)")
    parser.add_argument("--json", help="write each instance's agreement here")
    parser.add_argument("--needs-internet", nargs="*", default=[], metavar="ID",
                        help="instances whose tests need the internet: the totals are also given without them")
    parser.add_argument("--so-far", action="store_true", help="report what --store has validated; validate nothing")
    args = parser.parse_args(argv)

    dataset = Path(args.dataset)
    records = [r for i, r in load_records(dataset).items() if not args.instances or i in args.instances]
    name = f"{dataset.stem}-{'inferred' if args.ignore_specs else 'specs'}"
    if args.so_far:
        if not args.store or not (Path(args.store) / "events.sqlite3").exists():
            print(f"error: --so-far reads the store of a validation: none in {args.store or '(no --store)'}", file=sys.stderr)
            return 2
        report(*so_far(Path(args.store), name, records), args.json, frozenset(args.needs_internet))
        return 0
    with tempfile.TemporaryDirectory(prefix="magis-agreement-") as scratch:
        store = Path(args.store or scratch)
        store.mkdir(parents=True, exist_ok=True)
        without = store / f"{name}.jsonl"
        without.write_text("".join(json.dumps(r) + "\n" for r in stripped(records, args.ignore_specs)))
        options = ValidationOptions(records=str(without), out=str(store / f"{name}.tasks.jsonl"), store=str(store),
                                    repos_dir=args.repos_dir, name=name, use_ray=not args.no_ray,
                                    grade=GradeSettings(workers=args.workers, timeout=args.timeout, memory=args.memory))
        try:
            plan = plan_validation(options, notice=lambda line: print(f"notice: {line}", file=sys.stderr))
        except GradingInputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        outcome = run_validation_plan(plan, lambda o, skipped: print(
            f"{o.instance_id}: {'validated before' if skipped else 'kept' if o.kept else o.reason} ({o.seconds:.0f} s)",
            file=sys.stderr, flush=True))
    report({r["instance_id"]: compared(r, o) for r, o in zip(records, outcome.results)}, outcome.results, args.json,
           frozenset(args.needs_internet))
    return 0


if __name__ == "__main__":
    sys.exit(main())
