"""Does `magis-ray tasks validate` compute the lists SWE-bench's own validation gave its records?
Each record of a SWE-bench dataset is stripped of its FAIL_TO_PASS and PASS_TO_PASS, validated as
`tasks validate` validates (the same service: the test patch alone, then with the gold patch, each
twice, in the sandbox), and the lists it computes are compared with the dataset's, per instance
and in total: FAIL_TO_PASS identical, PASS_TO_PASS identical (as sets: the lists' order is the
order of a test log, which the comparison leaves out). A dropped instance counts with the lists
its validation recorded (none, when it stopped before the second runs).

    python benchmarks/validation_agreement.py --dataset /work/shared/swebench/verified-tuning.jsonl \\
        --repos-dir /work/repos [--instances ID ...] [--ignore-specs] [--workers 2] [--no-ray] \\
        [--store S] [--json agreement.json]

--ignore-specs validates in the environments inferred from what each project declares at the base
commit and its date, as for a repository SWE-bench's tables do not know: the records' `version` is
cleared, so the tables name no spec for them. The same --store and options resume a validation
cut off (its name says which dataset and which environments).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from magis_ray.actors.swebench.grading_service import GradingInputError, load_records
from magis_ray.actors.swebench.validation_service import ValidationOptions, plan_validation, run_validation_plan
from magis_ray.events.schema import CandidateValidated
from magis_ray.events.settings import GradeSettings

LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")


def stripped(records: list[dict], ignore_specs: bool) -> list[dict]:
    """The records without their lists (and, to ignore SWE-bench's tables, without their version)."""
    return [{**{k: v for k, v in r.items() if k not in LISTS}, **({"version": ""} if ignore_specs else {})} for r in records]


def listed(record: dict, name: str) -> set[str]:
    value = record.get(name) or []
    return set(json.loads(value) if isinstance(value, str) else value)


def compared(record: dict, outcome: CandidateValidated) -> dict:
    """One instance's agreement: each list identical or not, and what is missing and extra."""
    entry = {"kept": outcome.kept, "reason": outcome.reason, "detail": outcome.detail, "flaky": outcome.flaky}
    for name, ours in zip(LISTS, (set(outcome.fail_to_pass), set(outcome.pass_to_pass))):
        theirs = listed(record, name)
        entry[name] = {"identical": ours == theirs, "missing": sorted(theirs - ours), "extra": sorted(ours - theirs)}
    return entry


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
    args = parser.parse_args(argv)

    dataset = Path(args.dataset)
    records = [r for i, r in load_records(dataset).items() if not args.instances or i in args.instances]
    with tempfile.TemporaryDirectory(prefix="magis-agreement-") as scratch:
        store = Path(args.store or scratch)
        store.mkdir(parents=True, exist_ok=True)
        name = f"{dataset.stem}-{'inferred' if args.ignore_specs else 'specs'}"
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
    agreement = {r["instance_id"]: compared(r, o) for r, o in zip(records, outcome.results)}
    width = max(len(i) for i in agreement)
    print(f"{'INSTANCE':<{width}}  F2P        P2P        OUTCOME")
    for instance_id, entry in agreement.items():
        cells = [("identical" if entry[n]["identical"] else f"-{len(entry[n]['missing'])} +{len(entry[n]['extra'])}")
                 for n in LISTS]
        print(f"{instance_id:<{width}}  {cells[0]:<9}  {cells[1]:<9}  {'kept' if entry['kept'] else entry['reason']}")
    total = len(agreement)
    for name in LISTS:
        same = sum(entry[name]["identical"] for entry in agreement.values())
        print(f"{name} identical: {same} of {total} ({100 * same / total:.1f}%)")
    print(f"kept: {sum(e['kept'] for e in agreement.values())} of {total}; "
          f"seconds per instance on its node: {sum(o.seconds for o in outcome.results) / total:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(agreement, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
