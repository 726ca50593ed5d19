"""`magis-ray eval`: the command's shell over the evaluation (actors/swebench/evaluation.py): its
rows and totals printed as text, as JSON (--json) and as SVG plots (--plots: recall.svg and
coverage.svg, the paper's figures 3 and 5), and the predictions file written."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .options import store_option
from .wording import count

if TYPE_CHECKING:
    from magis_ray.actors.swebench.evaluation import Row

# The evaluation's modules import pygit2: they are imported inside the command, so that registering
# it keeps `magis-ray --help` free of heavy imports.


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
@click.option("--test-cmd", help='Grade each diff with this test command, e.g. "python -m pytest -rA {tests}" ({tests}: '
                                 "FAIL_TO_PASS and PASS_TO_PASS; without it, the test patch's files), in the sandbox, "
                                 "within the [grade] settings' limits.")
@click.option("--predictions", type=click.Path(path_type=Path),
              help="Write the SWE-bench predictions file here (default when Docker is present: predictions.jsonl).")
@click.pass_context
def eval_command(ctx: click.Context, store_path: str, dataset: Path, runs: tuple[str, ...], repos_dir, json_out, plots,
                 test_cmd, predictions) -> None:
    """Evaluate runs against a SWE-bench dataset: applied, file recall, line coverage, change
    complexity, and resolved (graded with --test-cmd, or by `magis-ray grade` of the same diff)."""
    from magis_ray.actors.swebench.evaluation import Row, gather, summarize, test_command_grader
    from magis_ray.actors.swebench.instances import docker_available, harness_command, load_dataset
    from magis_ray.events.errors import BadInput, MagisError
    from magis_ray.events.projections import fold, prediction
    from magis_ray.store import open_store

    from .config import effective_settings, given_flags, project_root
    from .source import resolve_run_id

    try:
        instances, errors = load_dataset(dataset)
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read the dataset {dataset}: {exc}") from None
    by_id = {i.instance_id: i for i in instances}
    # --test-cmd is the grade section's: the other [grade] settings (timeout, memory, sandbox, env-setup) hold too
    grader = test_command_grader(effective_settings(given_flags(ctx, ("grade",)), project_root(None)).grade,
                                 repos_dir) if test_cmd else None
    rows: list[Row] = [Row(e.instance_id, error=f"dataset line {e.line}: {e.reason}") for e in errors]
    store = open_store(store_path)
    try:
        chosen = None
        if runs:
            chosen = []
            for run in runs:
                try:
                    chosen.append(resolve_run_id(store, run))
                except MagisError as exc:  # an unknown or ambiguous id is one error row
                    rows.append(Row(instance_id="", run_id=run, error=exc.line))
        gathered, diffs = gather(store, by_id, chosen, repos_dir, grader)
        views = {run_id: fold(store.read(run_id)) for run_id, _ in diffs.values()}
    finally:
        store.close()
    rows += gathered
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
