"""`magis-ray eval`: the paper's metrics for the runs in a store, against a SWE-bench dataset.

Per run: applied (the diff passes `git apply --check` on the base commit), file-localization
recall, line-localization coverage, the change complexity of the run's diff and of the gold
patch, and, with --test-cmd, resolved. Then the totals, the recall curve, the complexity table
(the paper's Table 5) per repository and overall; as text, as JSON (--json) and as SVG plots
(--plots: recall.svg and coverage.svg, the paper's figures 3 and 5).

Bad input never stops the evaluation: a dataset line missing a field, a repository missing, a
base commit absent, an unknown run: each becomes an error row, and the rest goes on.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING

import click

from .options import store_option
from .wording import count

if TYPE_CHECKING:
    from magis_ray.actors.swebench.instances import Instance

# The metric modules import pygit2: they are imported inside the functions, so that registering
# this command keeps `magis-ray --help` free of heavy imports.

COVERAGE_BINS = 10


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


def evaluate_run(view, instance: Instance, repo_path: str, test_cmd: str | None, graded: dict | None = None) -> tuple[Row, str]:
    """The row of one folded run, and its diff."""
    from magis_ray.actors.code.diffs import changed_line_ranges
    from magis_ray.actors.code.repository import RepoSnapshot
    from magis_ray.actors.swebench.instances import check_applies, gold_files, run_tests
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
    if test_cmd:
        outcome = run_tests(repo_path, instance, diff, test_cmd)
        row.resolved, row.test_detail = outcome.resolved, outcome.detail
    elif graded:
        from magis_ray.actors.swebench.grading import patch_sha

        result = graded.get((instance.instance_id, patch_sha(diff)))
        if result is not None:  # `magis-ray grade` graded exactly this diff
            row.resolved = result.resolved
            row.test_detail = (f"graded: {result.error_step}: {result.error}" if result.error_step and not result.resolved
                               else f"graded: FAIL_TO_PASS {len(result.fail_to_pass_success)}/"
                                    f"{len(result.fail_to_pass_success) + len(result.fail_to_pass_failure)}")
    return row, diff


def repo_for(instance: Instance, view, repos_dir: str | None) -> str:
    """--repos-dir/owner__name when given, else where the run found the repository."""
    from magis_ray.actors.code.repository import find_repo

    if repos_dir:
        return str(find_repo(instance.repo, repos_dir=repos_dir))
    recorded = view.started.repo_path if view.started else ""
    return str(find_repo(instance.repo, repo_path=recorded or None))


def gather(store, instances: dict[str, Instance], runs: tuple[str, ...], repos_dir: str | None,
           test_cmd: str | None) -> tuple[list[Row], dict[str, tuple[str, str]]]:
    """A row per run (the given ones, else every run of a dataset instance), and the diff of each
    instance's latest evaluated run (instance id -> (run id, diff)) for a predictions file."""
    from magis_ray.actors.swebench.grading_batch import grading_results
    from magis_ray.events.projections import fold
    from magis_ray.events.streams import StreamKind

    from .source import resolve_run_id

    graded = grading_results(store)  # resolved, when --test-cmd is not given: `magis-ray grade`'s results
    rows: list[Row] = []
    diffs: dict[str, tuple[str, str]] = {}
    if runs:
        chosen = []
        for run in runs:
            try:
                chosen.append(resolve_run_id(store, run))
            except Exception as exc:  # noqa: BLE001 - an unknown or ambiguous id is one error row
                rows.append(Row(instance_id="", run_id=run, error=str(exc)))
    else:
        chosen = [info.run_id for info in store.list_runs() if StreamKind.of(info.run_id) is StreamKind.RUN]
    for run_id in chosen:
        view = fold(store.read(run_id))
        instance_id = view.started.instance_id if view.started else ""
        instance = instances.get(instance_id)
        if instance is None:
            if runs:  # asked for by id: say why it is not evaluated
                rows.append(Row(instance_id, run_id=run_id, error=f"instance {instance_id or '?'} is not in the dataset"))
            continue
        try:
            row, diff = evaluate_run(view, instance, repo_for(instance, view, repos_dir), test_cmd, graded)
        except Exception as exc:  # noqa: BLE001 - a missing repository or commit is this row's error
            rows.append(Row(instance.instance_id, instance.repo, run_id, error=f"{type(exc).__name__}: {exc}"))
            continue
        rows.append(row)
        diffs[instance.instance_id] = (run_id, diff)
    if not runs:
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


# --- the terminal report ---------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _yes(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"


def report_text(rows: list[Row], summary: dict) -> str:
    header = ("INSTANCE", "RUN", "APPLIED", "RECALL", "COVERAGE", "FILES", "HUNKS", "+/-", "RESOLVED")
    cells = []
    for r in rows:
        c = r.complexity or {}
        cells.append((r.instance_id or "-", r.run_id[:12] or "-") + (() if r.error else (
            _yes(r.applied), _pct(r.recall), _pct(r.coverage), str(c.get("files", 0)), str(c.get("hunks", 0)),
            f"+{c.get('added', 0)} -{c.get('deleted', 0)}", _yes(r.resolved))))
    widths = [max(len(line[i]) for line in [header, *cells] if len(line) > i) for i in range(len(header))]
    out = []
    for line, r in zip([header, *cells], [None, *rows]):
        text = "  ".join(cell.ljust(w) for cell, w in zip(line, widths))
        out.append((text + (f"  error: {r.error}" if r is not None and r.error else "")).rstrip())
    s = summary
    out.append("")
    out.append(f"runs:      {s['runs']} evaluated, {s['errors']} error rows")
    out.append(f"applied:   {s['applied']} of {s['runs']} ({_pct(s['applied_ratio'])})")
    if s["tested"]:
        out.append(f"resolved:  {s['resolved']} of {s['tested']} tested ({_pct(s['resolved_ratio'])})")
    located = s["recall"]["located"]
    if located:
        curve = ", ".join(f"@{p['k']} {_pct(p['recall'])}" for p in s["recall"]["bm25"] if p["k"] in (1, 3, 5, 10))
        out.append(f"recall:    {_pct(located['recall'])} with {located['files']:.2f} files located on average; BM25 top-k {curve}")
    out.append(f"coverage:  mean {_pct(s['coverage']['mean'])}; histogram (10% bins) {s['coverage']['histogram']}")
    out.append("")
    out.append("change complexity (the paper's Table 5): the runs' diffs and the gold patches, min / max / mean")
    for group, t in s["complexity"].items():
        out.append(f"{group} ({t['runs']} runs)")
        out.append(f"  {'':<10} {'run min':>8} {'max':>8} {'mean':>8}   {'gold min':>8} {'max':>8} {'mean':>8}")
        for metric in t["gold"] or t["run"]:  # Table 5's rows, in its order
            cells = []
            for side in ("run", "gold"):
                m = t[side].get(metric)
                cells += [f"{m['min']:>8}", f"{m['max']:>8}", f"{m['mean']:>8.2f}"] if m else ["-".rjust(8)] * 3
            out.append(f"  {metric:<10} {' '.join(cells[:3])}   {' '.join(cells[3:])}")
    return "\n".join(out)


# --- plots: SVG from the inspector's template set (templates/chart.svg), escaped as its pages ---


class Chart:
    """Where a chart draws: a plot area with axes, data x in [0, x_max] and y in [0, y_max], and
    what it holds, as the context of templates/chart.svg."""

    LEFT, RIGHT, TOP, BOTTOM = 70, 20, 30, 50

    def __init__(self, title: str, x_label: str, y_label: str, x_max: float, y_max: float,
                 width: int = 640, height: int = 400) -> None:
        self.x_max, self.y_max = x_max or 1, y_max or 1
        self.context: dict = {
            "title": title, "x_label": x_label, "y_label": y_label, "width": width, "height": height,
            "left": self.LEFT, "right": width - self.RIGHT, "top": self.TOP, "bottom": height - self.BOTTOM,
            "grid": [], "ticks": [], "bars": [], "series": [], "marks": [], "legend": [],
        }

    def at(self, x: float, y: float) -> dict:
        c = self.context
        return {"x": round(c["left"] + (c["right"] - c["left"]) * x / self.x_max, 1),
                "y": round(c["bottom"] - (c["bottom"] - c["top"]) * y / self.y_max, 1)}

    def axes(self, x_ticks: list[tuple[float, str]], y_ticks: list[tuple[float, str]]) -> None:
        self.context["grid"] = [{"y": self.at(0, y)["y"], "label": label} for y, label in y_ticks]
        self.context["ticks"] = [{"x": self.at(x, 0)["x"], "label": label} for x, label in x_ticks]

    def svg(self) -> str:
        from .pages import render

        return render("chart.svg", c=self.context)


def recall_svg(summary: dict, subject: str) -> str:
    """Recall against the number of files located: BM25's top k (blue line), the runs (red square)."""
    curve, located = summary["recall"]["bm25"], summary["recall"]["located"]
    x_max = max([p["files"] for p in curve] + [located["files"] if located else 0, 1])
    chart = Chart(f"File-localization recall: {subject}", "files located", "recall", x_max * 1.05, 100)
    chart.axes([(k, str(k)) for k in range(0, int(x_max) + 1)], [(y, f"{y}%") for y in range(0, 101, 20)])
    if curve:
        points = [{**chart.at(p["files"], 100 * p["recall"]),
                   "title": f"BM25 top {p['k']}: {p['files']:.2f} files, recall {_pct(p['recall'])}"} for p in curve]
        chart.context["series"].append({"title": "BM25 top k", "points": points})
        chart.context["legend"].append({"kind": "dot", "label": "BM25 top k"})
    if located:
        chart.context["marks"].append({**chart.at(located["files"], 100 * located["recall"]),
                                       "title": f"the runs: {located['files']:.2f} files, recall {_pct(located['recall'])}"})
        chart.context["legend"].append({"kind": "mark", "label": "files the runs located"})
    return chart.svg()


def coverage_svg(summary: dict, subject: str) -> str:
    """The runs' line-coverage histogram: bars per 10% bin."""
    counts = summary["coverage"]["histogram"]
    top = max(counts + [1])
    step = max(1, -(-top // 5))
    y_max = step * -(-top // step)
    chart = Chart(f"Line-localization coverage: {subject}", "coverage of the gold patch's lines (%)", "runs",
                  len(counts), y_max)
    chart.axes([(i, f"{100 * i // len(counts)}") for i in range(0, len(counts) + 1, 2)],
               [(y, str(y)) for y in range(0, y_max + 1, step)])
    width = 100 // len(counts)
    for i, runs in enumerate(counts):
        if runs:
            corner, base = chart.at(i + 0.1, runs), chart.at(i + 0.9, 0)
            chart.context["bars"].append({**corner, "width": round(base["x"] - corner["x"], 1),
                                          "height": round(base["y"] - corner["y"], 1),
                                          "title": f"{i * width}-{(i + 1) * width}%: {count(runs, 'run')}"})
    return chart.svg()


# --- the command -----------------------------------------------------------------------------


@click.command("eval", short_help="Evaluate runs against a SWE-bench dataset.")
@store_option
@click.option("--dataset", type=click.Path(path_type=Path), required=True, help="SWE-bench instances (.jsonl or a .json list).")
@click.option("--runs", multiple=True, metavar="RUN", help="Runs to evaluate (repeatable; ids or prefixes). Default: every run of a dataset instance.")
@click.option("--repos-dir", type=click.Path(), help="A folder of owner__name clones (default: where each run found its repository).")
@click.option("--json", "json_out", type=click.Path(path_type=Path), help="Write every row and the totals as JSON.")
@click.option("--plots", type=click.Path(path_type=Path), help="Write recall.svg and coverage.svg into this folder.")
@click.option("--test-cmd", help='Run the tests: e.g. "python -m pytest -x {tests}" ({tests}: FAIL_TO_PASS and PASS_TO_PASS).')
@click.option("--predictions", type=click.Path(path_type=Path),
              help="Write the SWE-bench predictions file here (default when Docker is present: predictions.jsonl).")
def eval_command(store_path: str, dataset: Path, runs: tuple[str, ...], repos_dir, json_out, plots, test_cmd, predictions) -> None:
    """Evaluate runs against a SWE-bench dataset: applied, file recall, line coverage, change
    complexity, and resolved (with --test-cmd, or the official harness where Docker runs)."""
    from magis_ray.actors.swebench.instances import docker_available, harness_command, load_dataset
    from magis_ray.events.projections import fold, prediction
    from magis_ray.store import open_store

    from .errors import BadInput

    try:
        instances, errors = load_dataset(dataset)
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read the dataset {dataset}: {exc}") from None
    by_id = {i.instance_id: i for i in instances}
    store = open_store(store_path)
    try:
        rows, diffs = gather(store, by_id, runs, repos_dir, test_cmd)
        views = {run_id: fold(store.read(run_id)) for run_id, _ in diffs.values()}
    finally:
        store.close()
    rows = [Row(e.instance_id, error=f"dataset line {e.line}: {e.reason}") for e in errors] + rows
    summary = summarize(rows)
    click.echo(report_text(rows, summary))
    if json_out:
        json_out.write_text(json.dumps({"rows": [asdict(r) for r in rows], "summary": summary}, indent=2))
        click.echo(f"json:      {json_out}")
    if plots:
        plots.mkdir(parents=True, exist_ok=True)
        (plots / "recall.svg").write_text(recall_svg(summary, dataset.name), encoding="utf-8")
        (plots / "coverage.svg").write_text(coverage_svg(summary, dataset.name), encoding="utf-8")
        click.echo(f"plots:     {plots / 'recall.svg'} (BM25 top-k: blue line; files the runs located: red square), "
                   f"{plots / 'coverage.svg'}")
    docker = docker_available()
    if predictions or docker:
        predictions = predictions or Path("predictions.jsonl")
        with predictions.open("w") as f:
            for run_id, _ in diffs.values():
                f.write(json.dumps(prediction(views[run_id])) + "\n")
        click.echo(f"predictions: {predictions} ({len(diffs)} instances)")
    if docker:
        click.echo("Docker is present: the official SWE-bench harness gives the resolved figure:")
        click.echo(f"  {harness_command(dataset, predictions)}")
    elif not test_cmd and not any(r.resolved is not None for r in rows):
        click.echo("resolved:  not measured (grade the predictions with `magis-ray grade`, give --test-cmd, "
                   "or run the official harness where Docker is present)")
