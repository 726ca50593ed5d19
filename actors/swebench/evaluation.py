"""The paper's metrics for the runs in a store, against a SWE-bench dataset (`magis-ray eval`
without the command): per run, applied (the diff passes `git apply --check` on the base commit),
file-localization recall, line-localization coverage, the change complexity of the run's diff and
of the gold patch, and resolved; then the totals, the recall curve and the complexity table (the
paper's Table 5) per repository and overall.

Resolved is a grading's verdict, the one way an instance's tests run: a grader given (`--test-cmd`:
the diff graded with the user's own test command, in the sandbox, within the grade settings'
limits), else the result `magis-ray grade` recorded for exactly this diff.

Bad input never stops the evaluation: a dataset line missing a field, a repository missing, a base
commit absent, an unknown run: each becomes an error row, and the rest goes on."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Callable

from magis_ray.events.schema import InstanceGraded
from magis_ray.events.settings import GradeSettings

from .instances import Instance

COVERAGE_BINS = 10
# Grades a run's diff of an instance, its repository at the path given.
Grader = Callable[[Instance, str, Path], InstanceGraded]


def test_command_grader(settings: GradeSettings, repos_dir: str | None) -> Grader:
    """Grades a diff as `magis-ray grade` grades a prediction with the user's own setup
    (`settings.test_cmd`, `settings.env_setup`), in this process: the same testbeds, sandbox and
    limits."""
    from .grading import grade
    from .grading_batch import WorkerOptions, test_runner, testbed_cache

    testbeds = testbed_cache(WorkerOptions(repos_dir=repos_dir or "", grade=settings))
    runner = test_runner(settings)

    def graded(instance: Instance, diff: str, repo_path: Path) -> InstanceGraded:
        return grade(instance.record(), diff, repo_path.parent, testbeds, runner, model="eval", settings=settings,
                     repository=repo_path)
    return graded


@dataclass
class Row:
    """One run's evaluation, or an error row (`error` set, the metrics None)."""

    instance_id: str
    repo: str = ""
    run_id: str = ""
    error: str = ""
    applied: bool | None = None
    apply_error: str = ""
    located: list[str] = field(default_factory=list)
    ranked: list[str] = field(default_factory=list)
    gold: list[str] = field(default_factory=list)
    recall: float | None = None
    coverage: float | None = None
    complexity: dict | None = None  # the run's diff
    gold_complexity: dict | None = None
    resolved: bool | None = None  # None: not tested
    test_detail: str = ""


# --- gathering the rows (all the I/O) --------------------------------------------------------


def evaluate_run(view, instance: Instance, repo_path: str, grader: Grader | None, graded: dict | None = None) -> tuple[Row, str]:
    """The row of one folded run, and its diff: resolved by `grader` where one is given (the
    user's test command), else from a grading of exactly this diff in the store."""
    from magis_ray.actors.code.diffs import changed_line_ranges
    from magis_ray.actors.code.repository import RepoSnapshot
    from magis_ray.actors.swebench.instances import check_applies, gold_files
    from magis_ray.actors.swebench.metrics import complexity, file_recall, line_coverage
    from magis_ray.events.projections import final_diff

    row = Row(instance.instance_id, instance.repo, view.run_id)
    snapshot = RepoSnapshot.open(repo_path, instance.base_commit)  # RepoError: commit absent
    diff = final_diff(view)
    problem = check_applies(repo_path, instance.base_commit, diff)
    row.applied, row.apply_error = problem is None, problem or ""
    row.gold = gold_files(instance.patch)
    row.located = list(view.located.paths) if view.located else []
    row.ranked = [c.path for c in view.ranked.candidates] if view.ranked else []
    row.recall = file_recall(row.located, row.gold)
    run_ranges, gold_ranges = changed_line_ranges(diff), changed_line_ranges(instance.patch)
    row.coverage = line_coverage(run_ranges, gold_ranges)
    base_texts = {p: snapshot.read_text(p) for p in {*run_ranges, *gold_ranges} if snapshot.blob_id(p)}
    row.complexity = complexity(diff, base_texts).as_dict() if diff else None
    row.gold_complexity = complexity(instance.patch, base_texts).as_dict()
    from magis_ray.actors.swebench.grading import patch_sha

    result = grader(instance, diff, Path(repo_path)) if grader is not None and diff.strip() else None
    if result is None and grader is None and graded:
        result = graded.get((instance.instance_id, patch_sha(diff)))  # `magis-ray grade` graded exactly this diff
    if result is not None:
        f2p = result.tests_status.fail_to_pass
        row.resolved = result.resolved
        row.test_detail = (f"{result.error_step}: {result.error}" if result.error_step and not result.resolved
                           else f"FAIL_TO_PASS {len(f2p.success)}/{len(f2p.success) + len(f2p.failure)}")
    elif grader is not None:
        row.resolved, row.test_detail = False, "the diff is empty"
    return row, diff


def repo_for(instance: Instance, view, repos_dir: str | None) -> str:
    """--repos-dir/owner__name when given, else where the run found the repository."""
    from magis_ray.actors.code.repository import find_repo

    if repos_dir:
        return str(find_repo(instance.repo, repos_dir=repos_dir))
    recorded = view.started.repo_path if view.started else ""
    return str(find_repo(instance.repo, repo_path=recorded or None))


def gather(store, instances: dict[str, Instance], runs: list[str] | None, repos_dir: str | None,
           grader: Grader | None = None) -> tuple[list[Row], dict[str, tuple[str, str]]]:
    """A row per run (the run ids given, else every run of a dataset instance), and the diff of each
    instance's latest evaluated run (instance id -> (run id, diff)) for a predictions file."""
    from magis_ray.actors.swebench.grading_batch import grading_results
    from magis_ray.events.projections import fold
    from magis_ray.events.streams import StreamKind

    graded = grading_results(store)  # resolved, without a grader: `magis-ray grade`'s results
    rows: list[Row] = []
    diffs: dict[str, tuple[str, str]] = {}
    chosen = runs if runs is not None else [i.run_id for i in store.list_runs() if StreamKind.of(i.run_id) is StreamKind.RUN]
    for run_id in chosen:
        view = fold(store.read(run_id))
        instance_id = view.started.instance_id if view.started else ""
        instance = instances.get(instance_id)
        if instance is None:
            if runs is not None:  # asked for by id: say why it is not evaluated
                rows.append(Row(instance_id, run_id=run_id, error=f"instance {instance_id or '?'} is not in the dataset"))
            continue
        try:
            row, diff = evaluate_run(view, instance, repo_for(instance, view, repos_dir), grader, graded)
        except Exception as exc:  # noqa: BLE001 - a missing repository or commit is this row's error
            rows.append(Row(instance.instance_id, instance.repo, run_id, error=f"{type(exc).__name__}: {exc}"))
            continue
        rows.append(row)
        diffs[instance.instance_id] = (run_id, diff)
    if runs is None:
        evaluated = {r.instance_id for r in rows}
        rows += [Row(i.instance_id, i.repo, error="no run of this instance in the store")
                 for i in instances.values() if i.instance_id not in evaluated]
    return rows, diffs


# --- the totals ------------------------------------------------------------------------------


def summarize(rows: list[Row]) -> dict:
    from magis_ray.actors.swebench.metrics import Complexity, complexity_summary, histogram, recall_curve

    ok = [r for r in rows if not r.error]
    tested = [r for r in ok if r.resolved is not None]
    recalls = [r.recall for r in ok if r.recall is not None]
    coverages = [r.coverage for r in ok if r.coverage is not None]
    max_k = max((len(r.ranked) for r in ok), default=0)
    by_repo: dict[str, list[Row]] = defaultdict(list)
    for r in ok:
        by_repo[r.repo].append(r)

    def table(group: list[Row]) -> dict:
        return {
            "runs": len(group),
            "run": complexity_summary([Complexity(**r.complexity) for r in group if r.complexity]),
            "gold": complexity_summary([Complexity(**r.gold_complexity) for r in group if r.gold_complexity]),
        }

    return {
        "runs": len(ok),
        "errors": len(rows) - len(ok),
        "applied": sum(bool(r.applied) for r in ok),
        "applied_ratio": _ratio(sum(bool(r.applied) for r in ok), len(ok)),
        "tested": len(tested),
        "resolved": sum(bool(r.resolved) for r in tested) if tested else None,
        "resolved_ratio": _ratio(sum(bool(r.resolved) for r in tested), len(tested)) if tested else None,
        "recall": {
            "located": {"files": mean(len(r.located) for r in ok), "recall": mean(recalls)} if recalls else None,
            "bm25": recall_curve([(r.ranked, r.gold) for r in ok], max_k),
        },
        "coverage": {
            "mean": mean(coverages) if coverages else None,
            "histogram": histogram(coverages, COVERAGE_BINS),
        },
        "complexity": {**{repo: table(group) for repo, group in sorted(by_repo.items())}, "overall": table(ok)},
    }


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None
