"""The evaluation: every metric on constructed diffs with known answers (actors/swebench/metrics.py),
the dataset loader and `git apply` against a real repository (actors/swebench/instances.py), and the
`eval` command end to end on a real store, repository and test run (cli/evaluate.py). The test runs
share the module's environment cache (conftest.py's env_cache): the environment they all ask for
(`pip install pytest`) is built once."""
from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import msgspec
import pytest
from commands import Done, in_process
from gitfixtures import make_repo
from runs import constructed_run, fixed_new_events, read_base
from scenarios import MEAN_FIX, SHOUT_FIX, make_calc_repo

from magis_ray.actors.code.diffs import changed_line_ranges, file_diff, join_diffs
from magis_ray.actors.code.edits import apply_edits
from magis_ray.actors.swebench.instances import (
    Instance, apply_patch, check_applies, gold_files, load_dataset, parse_test_list,
)
from magis_ray.cli.evaluate import coverage_svg, recall_svg
from magis_ray.actors.swebench.metrics import (
    complexity, complexity_summary, file_recall, histogram, hunk_counts, line_coverage, recall_curve, scopes,
)
from magis_ray.events.schema import RunStarted
from magis_ray.store import open_store

# --- file recall --------------------------------------------------------------------------


def test_file_recall():
    assert file_recall(["a.py", "b.py"], ["a.py", "c.py"]) == 0.5
    assert file_recall(["a.py", "c.py", "x.py"], ["c.py", "a.py"]) == 1.0
    assert file_recall([], ["a.py"]) == 0.0
    assert file_recall(["a.py"], []) is None


def test_recall_curve_averages_top_k_and_files_located():
    rankings = [(["x.py", "a.py", "b.py"], ["a.py", "b.py"]), (["a.py"], ["a.py"]), (["z.py"], [])]
    assert recall_curve(rankings, 3) == [
        {"k": 1, "files": 1, "recall": 0.5},
        {"k": 2, "files": 1.5, "recall": 0.75},  # the second ranking has only one file
        {"k": 3, "files": 2, "recall": 1.0},
    ]
    assert recall_curve([], 3) == []


# --- line coverage ------------------------------------------------------------------------

GOLD = {"a.py": [(5, 8), (15, 14)]}  # lines 5-8 replaced, and an insertion before line 15


@pytest.mark.parametrize(
    "generated, expected",
    [
        ({"a.py": [(7, 10)]}, 2 / 5),  # lines 7 and 8 of 5-8; the insertion missed
        ({"a.py": [(7, 10), (15, 14)]}, 3 / 5),  # the same insertion point
        ({"a.py": [(7, 10), (14, 14)]}, 3 / 5),  # changing line 14 touches the point before 15
        ({"a.py": [(7, 10), (15, 16)]}, 3 / 5),  # so does changing line 15
        ({"a.py": [(7, 10), (16, 16)]}, 2 / 5),  # line 16 does not
        ({"a.py": [(5, 6), (5, 8)]}, 4 / 5),  # overlapping generated ranges count a line once
        ({"a.py": [(1, 100)]}, 1.0),
        ({"b.py": [(5, 8)]}, 0.0),  # the right lines of the wrong file
        ({}, 0.0),
    ],
)
def test_line_coverage_with_partial_overlaps(generated, expected):
    assert line_coverage(generated, GOLD) == pytest.approx(expected)


def test_line_coverage_from_real_diffs_in_base_line_numbers():
    base = "".join(f"line {i}\n" for i in range(1, 21))
    gold_text = base.replace("line 5\nline 6\n", "five\nsix\n").replace("line 15\n", "new\nline 15\n")
    run_text = base.replace("line 6\nline 7\n", "six\nseven\nextra\n")
    gold, run = changed_line_ranges(file_diff("a.py", base, gold_text)), changed_line_ranges(file_diff("a.py", base, run_text))
    assert gold == {"a.py": [(5, 6), (15, 14)]} and run == {"a.py": [(6, 7)]}
    assert line_coverage(run, gold) == pytest.approx(1 / 3)
    assert line_coverage(run, {}) is None


def test_histogram_bins():
    assert histogram([0.0, 0.05, 0.1, 0.5, 0.95, 1.0]) == [2, 1, 0, 0, 0, 1, 0, 0, 0, 2]
    assert histogram([0.2, 0.7], bins=2) == [1, 1]


# --- change complexity --------------------------------------------------------------------

SHAPES = '''"""Shapes."""
import math


class Circle:
    def __init__(self, r):
        self.r = r

    def area(self):
        return math.pi * self.r ** 2

    def perimeter(self):
        return 2 * math.pi * self.r


def describe(shape):
    name = type(shape).__name__
    return f"{name} of area {shape.area()}"


@staticmethod
def unit():
    return Circle(1)
'''

SHAPES_FIXED = (
    SHAPES.replace("import math\n", "import math, sys\n")  # line 2: module level, no function
    .replace("self.r ** 2\n", "self.r * self.r\n")  # line 10: Circle.area
    .replace("    name = type(shape).__name__\n", "    name = type(shape).__name__\n    name = name.lower()\n")  # after 17: describe
    .replace("@staticmethod\n", "")  # line 21, unit's decorator
)


def test_complexity_counts_files_functions_hunks_and_lines():
    diff = file_diff("shapes.py", SHAPES, SHAPES_FIXED)
    c = complexity(diff, {"shapes.py": SHAPES})
    # hunks: line 2, line 10, and lines 18-21 (3 context lines apart, so git joins them)
    assert (c.files, c.functions, c.hunks, c.added, c.deleted, c.changed, c.start, c.end) == (1, 3, 3, 3, 3, 6, 2, 21)


def test_complexity_of_several_files_and_a_new_file():
    diff = join_diffs([
        file_diff("shapes.py", SHAPES, SHAPES.replace("self.r ** 2", "self.r * self.r")),
        file_diff("extra.py", None, "def f():\n    return 1\n"),
    ])
    c = complexity(diff, {"shapes.py": SHAPES})
    assert (c.files, c.functions, c.hunks, c.added, c.deleted, c.start, c.end) == (2, 1, 2, 3, 1, 1, 10)


def test_functions_need_parsable_python_and_count_each_scope_once():
    assert scopes("def broken(:\n") == []
    diff = file_diff("shapes.py", SHAPES, SHAPES.replace("self.r = r", "self.r = abs(r)").replace("** 2", "** 2.0"))
    assert complexity(diff, {"shapes.py": SHAPES}).functions == 2  # Circle.__init__, Circle.area
    assert complexity(diff, {"shapes.py": "def broken(:\n" + SHAPES}).functions == 0
    assert complexity(diff, {}).functions == 0  # no base text, no functions


def test_hunk_counts_trust_the_header_counts_not_the_look_of_a_line():
    base = "select 1;\n-- a comment\nselect 2;\n"
    diff = join_diffs([file_diff("q.sql", base, base.replace("-- a comment\n", "")), file_diff("r.sql", "a\n", "b\n")])
    assert "\n--- a comment\n" in diff
    assert hunk_counts(diff) == (2, 1, 2)


def test_complexity_summary_is_table_5():
    values = [complexity(file_diff("shapes.py", SHAPES, SHAPES_FIXED), {"shapes.py": SHAPES}),
              complexity(file_diff("shapes.py", SHAPES, SHAPES.replace("** 2", "** 3")), {"shapes.py": SHAPES})]
    table = complexity_summary(values)
    assert list(table) == ["files", "functions", "hunks", "added", "deleted", "start", "end", "changed"]
    assert table["hunks"] == {"min": 1, "max": 3, "mean": 2}
    assert table["changed"] == {"min": 2, "max": 6, "mean": 4}
    assert complexity_summary([]) == {}


# --- the dataset --------------------------------------------------------------------------


def record(instance_id: str, **fields) -> dict:
    base = {"instance_id": instance_id, "repo": "o/n", "base_commit": "abc", "problem_statement": "It breaks.",
            "patch": "diff --git a/x.py b/x.py\n", "FAIL_TO_PASS": '["t.py::test_a"]', "PASS_TO_PASS": []}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def test_load_dataset_reports_bad_lines_and_loads_the_rest(tmp_path):
    lines = [
        json.dumps(record("o__n-1", hints_text="see #2", version=3.1)),
        json.dumps(record("o__n-2", patch=None)),
        "{not json",
        "",
        json.dumps(record("o__n-3", FAIL_TO_PASS="t.py::test_a")),
        json.dumps(record("o__n-1")),
        json.dumps(["a list"]),
        json.dumps(record("o__n-4", FAIL_TO_PASS=["a", "b"], PASS_TO_PASS='["c"]', base_commit="")),
        json.dumps(record("o__n-5", FAIL_TO_PASS=["a", "b"], PASS_TO_PASS='["c"]')),
    ]
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(lines) + "\n")
    instances, errors = load_dataset(path)
    assert [(i.instance_id, i.line) for i in instances] == [("o__n-1", 1), ("o__n-5", 9)]
    assert instances[0].fail_to_pass == ("t.py::test_a",) and instances[0].version == "3.1" and instances[0].hints_text == "see #2"
    assert instances[1].fail_to_pass == ("a", "b") and instances[1].pass_to_pass == ("c",)
    assert [(e.line, e.instance_id) for e in errors] == [(2, "o__n-2"), (3, ""), (5, "o__n-3"), (6, "o__n-1"), (7, ""), (8, "o__n-4")]
    reasons = [e.reason for e in errors]
    assert reasons[0] == "field `patch` is missing" and reasons[1].startswith("not valid JSON")
    assert reasons[2] == "field `FAIL_TO_PASS` is a string but not a JSON list"
    assert reasons[3] == "repeats instance id (first on line 1)" and reasons[5] == "field `base_commit` is empty"


def test_load_dataset_reads_a_json_list(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps([record("o__n-1"), {"instance_id": "o__n-2"}]))
    instances, errors = load_dataset(path)
    assert [i.instance_id for i in instances] == ["o__n-1"]
    assert [(e.line, e.instance_id, e.reason) for e in errors] == [(2, "o__n-2", "field `repo` is missing")]
    path.write_text(json.dumps({"not": "a list"}))
    with pytest.raises(ValueError, match="must be a list"):
        load_dataset(path)


def test_parse_test_list():
    assert parse_test_list('["a", "b"]') == ("a", "b") == parse_test_list(["a", "b"])
    assert parse_test_list("") == ()
    with pytest.raises(ValueError):
        parse_test_list('{"a": 1}')


# --- applying diffs to a real repository ----------------------------------------------------


@pytest.fixture
def shapes_repo(tmp_path):
    _, base = make_repo(tmp_path / "shapes", {"shapes.py": SHAPES, "old.py": "x = 1\n", "README": "shapes\n"})
    return tmp_path / "shapes", base


def test_applied_on_a_real_repository(shapes_repo, tmp_path):
    path, base = shapes_repo
    good = file_diff("shapes.py", SHAPES, SHAPES_FIXED)
    assert check_applies(path, base, good) is None
    stale = file_diff("shapes.py", SHAPES.replace("** 2", "** 4"), SHAPES_FIXED)  # made against other content
    assert "patch does not apply" in check_applies(path, base, stale)
    assert check_applies(path, base, "") == "the diff is empty"
    assert "does not exist in index" in check_applies(path, base, file_diff("gone.py", "a\n", "b\n"))
    assert check_applies(path, "0" * 40, good) == f"commit {'0' * 40} not found in {path}"
    assert check_applies(tmp_path / "nothing", base, good).startswith("no repository at")
    (tmp_path / "plain").mkdir()
    assert check_applies(tmp_path / "plain", base, good).startswith("not a git repository")


def test_apply_patch_gives_each_touched_file_and_writes_nothing_into_the_repository(shapes_repo):
    path, base = shapes_repo
    diff = join_diffs([file_diff("shapes.py", SHAPES, SHAPES_FIXED), file_diff("old.py", "x = 1\n", None),
                       file_diff("new.py", None, "y = 2\n")])
    assert gold_files(diff) == ["shapes.py", "old.py", "new.py"]
    before = sorted(p for p in path.rglob("*"))
    assert apply_patch(path, base, diff) == {"shapes.py": SHAPES_FIXED.encode(), "old.py": None, "new.py": b"y = 2\n"}
    assert sorted(p for p in path.rglob("*")) == before


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
def test_a_test_command_grades_a_diff_as_a_grading_does(calc_repo, env_cache, monkeypatch):
    """--test-cmd's verdict is a grading's: the diff on a testbed of the repository, the user's command
    with the instance's tests in place of {tests}, judged by FAIL_TO_PASS and PASS_TO_PASS, within
    the [grade] settings' limits."""
    from magis_ray.actors.swebench.evaluation import test_command_grader
    from magis_ray.events.settings import GradeSettings

    monkeypatch.setenv("MAGIS_ENV_CACHE", str(env_cache))
    path, base = calc_repo
    stats = "calc/stats.py"
    base_text = read_base(path, base)[stats][0]
    fix = file_diff(stats, base_text, apply_edits(base_text, [MEAN_FIX]))
    instance = Instance("calc__calc-1", "calc/calc", base, "mean is wrong", fix,
                        fail_to_pass=("tests/test_calc.py::test_mean",), pass_to_pass=("tests/test_calc.py::test_median",))
    # calc is a folder of modules and tests, no package to install
    settings = GradeSettings(env_setup="python -m pip install pytest", test_cmd="python -m pytest -rA -p no:cacheprovider {tests}")
    grader = test_command_grader(settings, None)
    fixed = grader(instance, fix, path)
    assert fixed.resolved and fixed.tests_status.fail_to_pass.success == ["tests/test_calc.py::test_mean"], fixed.error
    wrong = file_diff(stats, base_text, base_text.replace("return ordered[middle]\n", "return None\n"))
    broken = grader(instance, wrong, path)
    assert not broken.resolved and broken.tests_status.pass_to_pass.failure == ["tests/test_calc.py::test_median"]


# --- the eval command ---------------------------------------------------------------------


def both_fixes_patch(repo_path: Path, base: str) -> str:
    files = read_base(repo_path, base)
    return join_diffs([
        file_diff(p, files[p][0], apply_edits(files[p][0], [fix]))
        for p, fix in (("calc/stats.py", MEAN_FIX), ("calc/texts.py", SHOUT_FIX))
    ])


@pytest.fixture
def evaluation_setup(tmp_path):
    """A store with three runs, the calc repository in a repos folder, and a dataset of four lines:
    the first run's instance; an instance whose repository is missing; one whose base commit is
    absent; a line without a patch."""
    repos = tmp_path / "repos"
    repos.mkdir()
    _, base = make_calc_repo(repos / "calc__calc")
    pairs = constructed_run(repos / "calc__calc", base)  # locates stats.py and texts.py; fixes mean() only
    started = pairs[0][1]
    assert isinstance(started, RunStarted)

    def renamed(instance_id: str, repo: str):
        return [(pairs[0][0], msgspec.structs.replace(started, instance_id=instance_id, repo=repo)), *pairs[1:]]

    store_path = tmp_path / "store"
    with open_store(str(store_path), create=True) as store:
        store.append("run-calc", 0, fixed_new_events(pairs))
        store.append("run-ghost", 0, fixed_new_events(renamed("ghost__ghost-1", "ghost/ghost"), id_prefix="b"))
        store.append("run-nobase", 0, fixed_new_events(renamed("calc__calc-3", "calc/calc"), id_prefix="c"))
    gold = both_fixes_patch(repos / "calc__calc", base)
    tests = {"FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_mean"]), "PASS_TO_PASS": ["tests/test_calc.py::test_median"]}
    common = {"problem_statement": "mean and shout are wrong", "patch": gold, **tests}
    lines = [
        {"instance_id": "calc__calc-2", "repo": "calc/calc", "base_commit": base, **common},
        {"instance_id": "ghost__ghost-1", "repo": "ghost/ghost", "base_commit": base, **common},
        {"instance_id": "calc__calc-3", "repo": "calc/calc", "base_commit": "f" * 40, **common},
        {"instance_id": "calc__calc-9", "repo": "calc/calc", "base_commit": base, "problem_statement": "x"},
    ]
    dataset = tmp_path / "dev.jsonl"
    dataset.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return store_path, repos, dataset


def invoke(capsys, *args: str, docker: bool = False, monkeypatch=None) -> Done:
    """`magis-ray eval ARGS` in this process (tests/commands.py), with Docker present or not."""
    if monkeypatch is not None:
        monkeypatch.setattr("magis_ray.actors.swebench.instances.docker_available", lambda: docker)
    return in_process(capsys, "eval", *args)


SVG = "{http://www.w3.org/2000/svg}"


def svg_parts(text: str) -> dict[str, list[ET.Element]]:
    """The chart's elements by class (parsing fails on a document that is not well-formed XML)."""
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == f"{SVG}svg"
    parts: dict[str, list[ET.Element]] = {}
    for element in root.iter():
        parts.setdefault(element.get("class", ""), []).append(element)
    return {**parts, "title": [root.find(f"{SVG}title")]}


def test_plots_escape_text_from_the_data():
    hostile = 'runs <script>alert("x")</script> & \x00\x1b</svg>'
    summary = {"recall": {"bm25": [{"k": 1, "files": 1, "recall": 0.5}, {"k": 2, "files": 2, "recall": 1.0}],
                          "located": {"files": 1.5, "recall": 0.75}},
               "coverage": {"histogram": [0, 0, 0, 0, 0, 2, 0, 0, 0, 1]}}
    for text in (recall_svg(summary, hostile), coverage_svg(summary, hostile)):
        assert "<script>" not in text and "\x00" not in text
        title = svg_parts(text)["title"][0].text
        assert title.endswith('runs <script>alert("x")</script> & \\x00\\x1b</svg>')  # as written, control characters shown
    bars = svg_parts(coverage_svg(summary, hostile))["bar"]
    assert [b.find(f"{SVG}title").text for b in bars] == ["50-60%: 2 runs", "90-100%: 1 run"]
    assert float(bars[0].get("height")) == 2 * float(bars[1].get("height"))


def test_eval_command_rows_totals_json_plots_and_error_rows(evaluation_setup, env_cache, tmp_path, monkeypatch, capsys):
    store, repos, dataset = evaluation_setup
    out, plots = tmp_path / "eval.json", tmp_path / "plots"
    monkeypatch.setenv("MAGIS_ENV_CACHE", str(env_cache))
    monkeypatch.setenv("MAGIS_GRADE_ENV_SETUP", "python -m pip install pytest")
    result = invoke(capsys, "--store", store, "--dataset", dataset, "--repos-dir", repos, "--json", out, "--plots", plots,
                    "--test-cmd", "python -m pytest -rA -p no:cacheprovider {tests}", monkeypatch=monkeypatch)
    assert result.code == 0, (result.out + result.err)
    rows = {(r["instance_id"], r["run_id"]): r for r in json.loads(out.read_text())["rows"]}
    calc = rows[("calc__calc-2", "run-calc")]
    assert calc["applied"] is True and calc["recall"] == 1.0 and calc["resolved"] is True
    assert calc["coverage"] == 0.5  # line 9 of stats.py, not line 6 of texts.py
    assert calc["gold"] == ["calc/stats.py", "calc/texts.py"] and calc["located"] == ["calc/stats.py", "calc/texts.py"]
    assert calc["complexity"] == {"files": 1, "functions": 1, "hunks": 1, "added": 1, "deleted": 1, "changed": 2, "start": 9, "end": 9}
    assert calc["gold_complexity"]["files"] == 2 and calc["gold_complexity"]["functions"] == 2
    assert "no clone of ghost/ghost" in rows[("ghost__ghost-1", "run-ghost")]["error"]
    assert f"commit {'f' * 40} not found" in rows[("calc__calc-3", "run-nobase")]["error"]
    assert rows[("calc__calc-9", "")]["error"] == "dataset line 4: field `patch` is missing"
    summary = json.loads(out.read_text())["summary"]
    assert (summary["runs"], summary["errors"], summary["applied"], summary["resolved"]) == (1, 3, 1, 1)
    assert summary["recall"]["bm25"][0] == {"k": 1, "files": 1, "recall": 0.5}
    assert list(summary["complexity"]) == ["calc/calc", "overall"]
    assert "applied:   1 of 1 (100.0%)" in (result.out + result.err) and "resolved:  1 of 1 tested (100.0%)" in (result.out + result.err)
    assert "error: dataset line 4: field `patch` is missing" in (result.out + result.err)
    recall = svg_parts((plots / "recall.svg").read_text(encoding="utf-8"))
    assert recall["title"][0].text == "File-localization recall: dev.jsonl"
    [line] = recall["series"]
    points = [tuple(map(float, p.split(","))) for p in line.get("points").split()]
    assert len(points) == len(summary["recall"]["bm25"])  # a point per k of the BM25 curve
    assert [d.find(f"{SVG}title").text for d in recall["dot"][:2]] == [
        "BM25 top 1: 1.00 files, recall 50.0%", "BM25 top 2: 2.00 files, recall 100.0%"]
    assert [(d.get("cx"), d.get("cy")) for d in recall["dot"]] == [(f"{x}", f"{y}") for x, y in points]
    [located] = recall["mark"]
    assert [k.get("class") for k in recall["key dot"] + recall["key mark"]] == ["key dot", "key mark"]  # the legend
    assert located.find(f"{SVG}title").text == "the runs: 2.00 files, recall 100.0%"
    coverage = svg_parts((plots / "coverage.svg").read_text(encoding="utf-8"))
    [bar] = coverage["bar"]
    assert bar.find(f"{SVG}title").text == "50-60%: 1 run"  # the run covers half the gold lines


def test_eval_chosen_runs_unknown_ids_and_the_harness_command(evaluation_setup, tmp_path, monkeypatch, capsys):
    store, repos, dataset = evaluation_setup
    monkeypatch.chdir(tmp_path)
    result = invoke(capsys, "--store", store, "--dataset", dataset, "--repos-dir", repos, "--runs", "run-c", "--runs", "nope",
                    docker=True, monkeypatch=monkeypatch)
    assert result.code == 0, (result.out + result.err)
    assert "error: unknown run: nope" in (result.out + result.err) and "run-ghost" not in (result.out + result.err)
    [line] = (tmp_path / "predictions.jsonl").read_text().splitlines()
    assert json.loads(line)["instance_id"] == "calc__calc-2" and "calc/stats.py" in json.loads(line)["model_patch"]
    assert f"--dataset_name {dataset.resolve()} --predictions_path {(tmp_path / 'predictions.jsonl').resolve()}" in (result.out + result.err)

    result = invoke(capsys, "--store", store, "--dataset", dataset, "--repos-dir", repos, docker=False, monkeypatch=monkeypatch)
    assert "resolved:  not measured" in (result.out + result.err) and "swebench.harness" not in (result.out + result.err)


def test_eval_bad_dataset_file_is_a_usage_error(evaluation_setup, tmp_path, monkeypatch, capsys):
    store, _, _ = evaluation_setup
    result = invoke(capsys, "--store", store, "--dataset", tmp_path / "missing.jsonl", monkeypatch=monkeypatch)
    assert result.code == 2 and len(result.error_lines) == 1 and "cannot read the dataset" in result.error_lines[0], result.err


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
def test_eval_takes_resolved_from_a_grading_of_the_same_diff(evaluation_setup, env_cache, tmp_path, monkeypatch, capsys):
    from magis_ray.events.projections import final_diff, fold

    store, repos, dataset = evaluation_setup
    out = tmp_path / "eval.json"
    assert invoke(capsys, "--store", store, "--dataset", dataset, "--repos-dir", repos, "--json", out, monkeypatch=monkeypatch).code == 0
    untested = {r["run_id"]: r for r in json.loads(out.read_text())["rows"]}["run-calc"]
    assert untested["resolved"] is None
    with open_store(str(store)) as s:
        diff = final_diff(fold(s.read("run-calc")))
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": "calc__calc-2", "model_name_or_path": "magis", "model_patch": diff}) + "\n")
    graded = in_process(capsys, "grade", preds, "--dataset", dataset, "--instances", "calc__calc-2", "--repos-dir", repos,
                        "--store", store, "--env-cache", env_cache, "--no-ray", "--env-setup", "python -m pip install pytest",
                        "--test-cmd", "python -m pytest -rA")
    assert graded.code == 0 and "resolved: 1 of 1" in graded.out, graded.out + graded.err
    result = invoke(capsys, "--store", store, "--dataset", dataset, "--repos-dir", repos, "--json", out, monkeypatch=monkeypatch)
    assert result.code == 0, (result.out + result.err)
    row = {r["run_id"]: r for r in json.loads(out.read_text())["rows"]}["run-calc"]
    assert row["resolved"] is True and row["test_detail"] == "FAIL_TO_PASS 1/1"
    assert "resolved:  1 of 1 tested (100.0%)" in (result.out + result.err)
