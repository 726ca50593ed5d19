"""`magis-ray eval`: the paper's metrics for the runs in a store, against a SWE-bench dataset.

Per run: applied (the diff passes `git apply --check` on the base commit), file-localization
recall, line-localization coverage, the change complexity of the run's diff and of the gold
patch, and, with --test-cmd, resolved. Then the totals, the recall curve, the complexity table
(the paper's Table 5) per repository and overall; as text, as JSON (--json) and as PNG plots
(--plots: recall.png and coverage.png, the paper's figures 3 and 5).

Bad input never stops the evaluation: a dataset line missing a field, a repository missing, a
base commit absent, an unknown run: each becomes an error row, and the rest goes on.
"""
from __future__ import annotations

import json
import struct
import zlib
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING

import click

from .options import store_option

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
        from magis_ray.actors.swebench.grading_batch import patch_sha

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
    from magis_ray.actors.swebench.grading_batch import STREAM_PREFIX, grading_results
    from magis_ray.events.projections import fold

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
        chosen = [info.run_id for info in store.list_runs() if not info.run_id.startswith(STREAM_PREFIX)]
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


# --- PNG plots, drawn here: no plotting library is a dependency -----------------------------

# 3x5 pixel digits for tick labels (rows top to bottom, 3 bits each).
_GLYPHS = {
    "0": (7, 5, 5, 5, 7), "1": (2, 6, 2, 2, 7), "2": (7, 1, 7, 4, 7), "3": (7, 1, 7, 1, 7), "4": (5, 5, 7, 1, 1),
    "5": (7, 4, 7, 1, 7), "6": (7, 4, 7, 5, 7), "7": (7, 1, 1, 1, 1), "8": (7, 5, 7, 5, 7), "9": (7, 5, 7, 1, 7),
    ".": (0, 0, 0, 0, 2), "%": (5, 1, 2, 4, 5),
}
WHITE, BLACK, GREY, BLUE, RED = (255, 255, 255), (0, 0, 0), (215, 215, 215), (31, 119, 180), (214, 39, 40)


class Canvas:
    """An RGB image with just enough drawing for two charts."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(WHITE * (width * height))

    def fill(self, x0: int, y0: int, x1: int, y1: int, color: tuple[int, int, int]) -> None:
        """The rectangle of pixels x0..x1, y0..y1 (inclusive, clipped to the canvas)."""
        x0, x1 = max(0, min(x0, x1)), min(self.width - 1, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.height - 1, max(y0, y1))
        for y in range(y0, y1 + 1):
            start = (y * self.width + x0) * 3
            self.pixels[start : start + (x1 - x0 + 1) * 3] = bytes(color) * (x1 - x0 + 1)

    def line(self, x0: int, y0: int, x1: int, y1: int, color: tuple[int, int, int], width: int = 1) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(steps + 1):
            x, y = round(x0 + (x1 - x0) * i / steps), round(y0 + (y1 - y0) * i / steps)
            self.fill(x - width // 2, y - width // 2, x + (width - 1) // 2, y + (width - 1) // 2, color)

    def text(self, x: int, y: int, text: str, color: tuple[int, int, int] = BLACK, scale: int = 2) -> None:
        for n, char in enumerate(text):
            for row, bits in enumerate(_GLYPHS.get(char, (0,) * 5)):
                for col in range(3):
                    if bits & (4 >> col):
                        left, top = x + (n * 4 + col) * scale, y + row * scale
                        self.fill(left, top, left + scale - 1, top + scale - 1, color)

    def png(self) -> bytes:
        rows = b"".join(b"\x00" + bytes(self.pixels[y * self.width * 3 : (y + 1) * self.width * 3]) for y in range(self.height))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)  # 8-bit RGB
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


class Chart:
    """A plot area with axes: data x in [0, x_max], y in [0, y_max]."""

    LEFT, RIGHT, TOP, BOTTOM = 60, 20, 20, 40

    def __init__(self, x_max: float, y_max: float, width: int = 640, height: int = 400) -> None:
        self.canvas = Canvas(width, height)
        self.x_max, self.y_max = x_max or 1, y_max or 1
        self.x0, self.x1 = self.LEFT, width - self.RIGHT
        self.y0, self.y1 = height - self.BOTTOM, self.TOP  # y grows upwards

    def at(self, x: float, y: float) -> tuple[int, int]:
        return (round(self.x0 + (self.x1 - self.x0) * x / self.x_max), round(self.y0 - (self.y0 - self.y1) * y / self.y_max))

    def axes(self, x_ticks: list[tuple[float, str]], y_ticks: list[tuple[float, str]]) -> None:
        c = self.canvas
        for y, label in y_ticks:
            _, py = self.at(0, y)
            c.line(self.x0, py, self.x1, py, GREY)
            c.text(self.x0 - 8 - 8 * len(label), py - 5, label)
        for x, label in x_ticks:
            px, _ = self.at(x, 0)
            c.line(px, self.y0, px, self.y0 + 5, BLACK)
            c.text(px - 4 * len(label), self.y0 + 10, label)
        c.line(self.x0, self.y0, self.x1, self.y0, BLACK)
        c.line(self.x0, self.y0, self.x0, self.y1, BLACK)


def recall_png(summary: dict) -> bytes:
    """Recall against the number of files located: BM25's top k (blue line), the runs (red square)."""
    curve, located = summary["recall"]["bm25"], summary["recall"]["located"]
    x_max = max([p["files"] for p in curve] + [located["files"] if located else 0, 1])
    chart = Chart(x_max * 1.05, 100)
    chart.axes([(k, str(k)) for k in range(0, int(x_max) + 1)], [(y, f"{y}%") for y in range(0, 101, 20)])
    points = [chart.at(p["files"], 100 * p["recall"]) for p in curve]
    for a, b in zip(points, points[1:]):
        chart.canvas.line(*a, *b, BLUE, width=3)
    for x, y in points:
        chart.canvas.fill(x - 3, y - 3, x + 3, y + 3, BLUE)
    if located:
        x, y = chart.at(located["files"], 100 * located["recall"])
        chart.canvas.fill(x - 6, y - 6, x + 6, y + 6, RED)
    return chart.canvas.png()


def coverage_png(summary: dict) -> bytes:
    """The runs' line-coverage histogram: bars per 10% bin."""
    counts = summary["coverage"]["histogram"]
    top = max(counts + [1])
    step = max(1, -(-top // 5))
    chart = Chart(len(counts), step * -(-top // step))
    chart.axes([(i, f"{100 * i // len(counts)}") for i in range(0, len(counts) + 1, 2)],
               [(y, str(y)) for y in range(0, step * -(-top // step) + 1, step)])
    for i, count in enumerate(counts):
        if count:
            (left, bottom), (right, top_) = chart.at(i + 0.1, 0), chart.at(i + 0.9, count)
            chart.canvas.fill(left, top_, right, bottom - 1, BLUE)
    return chart.canvas.png()


# --- the command -----------------------------------------------------------------------------


@click.command("eval")
@store_option
@click.option("--dataset", type=click.Path(path_type=Path), required=True, help="SWE-bench instances (.jsonl or a .json list).")
@click.option("--runs", multiple=True, metavar="RUN", help="Runs to evaluate (repeatable; ids or prefixes). Default: every run of a dataset instance.")
@click.option("--repos-dir", type=click.Path(), help="A folder of owner__name clones (default: where each run found its repository).")
@click.option("--json", "json_out", type=click.Path(path_type=Path), help="Write every row and the totals as JSON.")
@click.option("--plots", type=click.Path(path_type=Path), help="Write recall.png and coverage.png into this folder.")
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
        (plots / "recall.png").write_bytes(recall_png(summary))
        (plots / "coverage.png").write_bytes(coverage_png(summary))
        click.echo(f"plots:     {plots / 'recall.png'} (BM25 top-k: blue line; files the runs located: red square), "
                   f"{plots / 'coverage.png'}")
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
