"""`magis-ray tasks validate` on candidates `tasks make` made from a real history (pygit2): a small
project whose pyproject.toml declares pytest, its environment inferred from that, its tests run in
the real sandbox. The fix is kept with the lists SWE-bench's validation would give it, and `grade`
reads the tasks file (gold resolves, empty does not); every other candidate is dropped with its
reason (no test changed state, no test ran (a test patch of no tests), the environment failed, the test patch or the gold
patch does not apply, a test flaky across two runs); bad input is one line, exit 2, and nothing
written; an interrupted validation resumes with what it had; and on a 3-node Ray cluster 20
candidates spread over the nodes, their environment built once.

The flaky test fails the first time it ever runs and passes after: it keeps that in a file of the
host, so its case runs with `--sandbox none` (the sandbox gives every run a /tmp of its own, which
is what keeps test runs apart)."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from commands import in_process
from gitfixtures import commit_files, make_repo

from magis_ray.actors.code.history import History
from magis_ray.actors.code.suites import PYTEST_COMMAND
from magis_ray.actors.execution.sandbox import bwrap_path
from magis_ray.actors.swebench import task_making, validation
from magis_ray.actors.swebench.instances import load_dataset
from magis_ray.events.schema import CandidateValidated, ValidationStarted
from magis_ray.events.streams import StreamKind
from magis_ray.store import open_store

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")

PYPROJECT = '[dependency-groups]\ntest = ["pytest"]\n\n[tool.pytest.ini_options]\npythonpath = ["."]\n'
NO_PYTHON_HERE = '[project]\nname = "calc"\nversion = "0"\nrequires-python = ">=3.99"\n\n' + PYPROJECT
STATS = ("def mean(values):\n    return sum(values) / (len(values) - 1)\n\n\n"
         "def median(values):\n    ordered = sorted(values)\n    return ordered[len(ordered) // 2]\n")
MEAN_FIXED = STATS.replace("(len(values) - 1)", "len(values)")
TESTS = "from calc.stats import mean, median\n\n\ndef test_median():\n    assert median([3, 1, 2]) == 2\n"
WITH_TEST_MEAN = TESTS + "\n\ndef test_mean():\n    assert mean([1, 2, 3]) == 2\n"
MEDIAN_REWRITTEN = MEAN_FIXED.replace("    ordered = sorted(values)\n    return ordered[len(ordered) // 2]\n",
                                      "    return sorted(values)[len(values) // 2]\n")


def first_run_fails(flag: Path) -> str:
    """A test that fails the first time it ever runs (the host's `flag` is not there yet, and it
    makes it) and passes after."""
    return (f"import pathlib\n\nDONE = pathlib.Path({str(flag)!r})\n\n\ndef test_first_run_fails():\n"
            "    if not DONE.exists():\n        DONE.touch()\n        raise AssertionError('the first run ever fails')\n")


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """acme/calc under REPOS/acme__calc, its commits by name, and its candidates as `tasks make`
    makes them, by the name of the commit each was made from."""
    root = tmp_path_factory.mktemp("validate")
    path = root / "repos" / "acme__calc"
    repo, first = make_repo(path, {"pyproject.toml": PYPROJECT, "calc/__init__.py": "", "calc/stats.py": STATS,
                                   "tests/test_stats.py": TESTS})
    c = {"first": first}
    c["fix"] = commit_files(repo, {"calc/stats.py": MEAN_FIXED, "tests/test_stats.py": WITH_TEST_MEAN}, "Mean divides by the count\n")
    c["refactor"] = commit_files(repo, {"calc/stats.py": MEDIAN_REWRITTEN,
                                        "tests/test_stats.py": WITH_TEST_MEAN + "\n\ndef test_median_of_one():\n    assert median([7]) == 7\n"},
                                 "Median in one line\n")
    c["words"] = commit_files(repo, {"calc/words.py": "WORDS = ['mean', 'median']\n", "tests/words.py": "EXPECTED = 2\n"},
                              "The words, and how many the tests expect\n")
    c["flaky"] = commit_files(repo, {"calc/__init__.py": "VERSION = 2\n", "tests/test_first.py": first_run_fails(root / "ran-once")},
                              "Version 2, and a test of the first run\n")
    c["no_python"] = commit_files(repo, {"pyproject.toml": NO_PYTHON_HERE}, "Needs a Python of the future\n")
    c["mode"] = commit_files(repo, {"calc/modes.py": "def mode(values):\n    return max(set(values), key=values.count)\n",
                                    "tests/test_modes.py": "from calc.modes import mode\n\n\ndef test_mode():\n    assert mode([1, 2, 2]) == 2\n"},
                             "Mode\n")
    c["python_back"] = commit_files(repo, {"pyproject.toml": PYPROJECT}, "Any Python again\n")
    made = task_making.make_tasks(History(repo, path), History(repo, path).first_parent_line(), "acme/calc")
    by_commit = {record.commit: record for record in made.records}
    candidates = {name: json.loads(msgspec.json.encode(by_commit[commit])) for name, commit in c.items() if commit in by_commit}
    assert sorted(candidates) == ["fix", "flaky", "mode", "refactor", "words"]
    return {"root": root, "repos": root / "repos", "path": path, "commits": c, "candidates": candidates}


def altered(record: dict, suffix: str, **patches: tuple[str, str]) -> dict:
    """`record` under another id, each named patch with one text replaced."""
    changed = {name: record[name].replace(*change) for name, change in patches.items()}
    assert all(changed[name] != record[name] for name in changed)
    return {**record, **changed, "instance_id": f"{record['instance_id']}-{suffix}"}


def write_records(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def validate_args(records: Path, out: Path, store: Path, env_cache: Path, *extra) -> list:
    return ["tasks", "validate", records, "--out", out, "--store", store, "--env-cache", env_cache, "--memory", "2G",
            "--timeout", "300", "--no-ray", *extra]


def stream(store: Path, name: str) -> list:
    with open_store(str(store)) as s:
        return [r.event for r in s.read(StreamKind.VALIDATION.stream_id(name))]


def test_the_lists_are_the_harness_s_rules_over_both_runs_of_each_side():
    before = {"t::absent_before_error": "ERROR", "t::fixed": "FAILED", "t::kept": "PASSED", "t::skipped": "SKIPPED",
              "t::flaky": "FAILED", "t::broken": "PASSED", "t::expected": "XFAIL"}
    after = {"t::fixed": "PASSED", "t::kept": "PASSED", "t::skipped": "PASSED", "t::flaky": "PASSED", "t::broken": "FAILED",
             "t::new": "PASSED", "t::xfail": "XFAIL", "t::expected": "XFAIL"}
    flipped = {**after, "t::flaky": "FAILED"}
    f2p, p2p, flaky = validation.lists_from([before, before], [after, flipped])
    # a test absent before (its module did not import) fails before, as the harness counts; a
    # skipped one neither fails nor passes; an expected failure (XFAIL) is in neither list, as in
    # SWE-bench's records
    assert f2p == ["t::fixed", "t::new"]
    assert p2p == ["t::kept"]
    assert flaky == ["t::flaky"]
    assert validation.lists_from([before], [after])[0] == ["t::fixed", "t::flaky", "t::new"]


def test_the_fix_is_kept_with_its_lists_and_every_other_candidate_is_dropped_with_its_reason(history, tmp_path, capsys, env_cache):
    c = history["candidates"]
    bad_test = altered(c["fix"], "bad-test", test_patch=("     assert median([3, 1, 2]) == 2", "     assert median([9]) == 9"))
    bad_gold = altered(c["fix"], "bad-gold", patch=("-    return sum(values) / (len(values) - 1)", "-    return sum(values) / (len(values) - 7)"))
    # a record's own lists are ignored and replaced
    fix = {**c["fix"], "FAIL_TO_PASS": json.dumps(["tests/test_stats.py::test_median"]), "PASS_TO_PASS": "[]"}
    records = write_records(tmp_path / "candidates.jsonl", [fix, c["refactor"], c["words"], c["mode"], bad_test, bad_gold])
    out, store = tmp_path / "tasks.jsonl", tmp_path / "store"
    done = in_process(capsys, *validate_args(records, out, store, env_cache, "--repo", history["path"]))
    assert done.code == 0, done.err

    [task] = lines_of(out)
    assert task["instance_id"] == fix["instance_id"] and list(task)[:12] == list(c["fix"])[:12]
    assert (json.loads(task["FAIL_TO_PASS"]), json.loads(task["PASS_TO_PASS"])) == (
        ["tests/test_stats.py::test_mean"], ["tests/test_stats.py::test_median"])
    assert task["commit"] == history["commits"]["fix"] and task["patch"] == c["fix"]["patch"]
    dropped = {d["instance_id"]: d for d in lines_of(tmp_path / "tasks.dropped.jsonl")}
    assert {i: d["reason"] for i, d in dropped.items()} == {
        c["refactor"]["instance_id"]: validation.NO_TEST_CHANGED,
        c["words"]["instance_id"]: validation.NO_TESTS_RAN,
        c["mode"]["instance_id"]: validation.ENVIRONMENT_FAILED,
        bad_test["instance_id"]: validation.TEST_PATCH_FAILS,
        bad_gold["instance_id"]: validation.GOLD_PATCH_FAILS,
    }
    assert "needs Python >=3.99" in dropped[c["mode"]["instance_id"]]["detail"]
    assert "patch does not apply" in dropped[bad_test["instance_id"]]["detail"]
    assert f"{PYTEST_COMMAND} tests/words.py`" in dropped[c["words"]["instance_id"]]["detail"]
    assert dropped[c["refactor"]["instance_id"]]["commit"] == history["commits"]["refactor"]

    assert "validation candidates: 6 candidates" in done.out and "  kept: 1\n  dropped: 5\n" in done.out
    assert f"       1  {validation.NO_TESTS_RAN}\n" in done.out and "seconds per candidate: " in done.out
    events = stream(store, "candidates")
    assert isinstance(events[0], ValidationStarted) and events[0].candidates == [r["instance_id"] for r in lines_of(records)]
    outcomes = [e for e in events if isinstance(e, CandidateValidated)]
    assert sorted(e.instance_id for e in outcomes) == sorted(r["instance_id"] for r in lines_of(records))
    by_id = {e.instance_id: e for e in outcomes}
    kept = by_id[fix["instance_id"]]
    assert kept.kept and kept.test_runs == 4 and kept.seconds > 0 and kept.environment.key and kept.flaky == []
    # the runs stop where the first two show no change; nothing runs for a test patch that does not apply
    assert [by_id[r["instance_id"]].test_runs for r in (c["refactor"], c["words"], bad_test, bad_gold)] == [2, 2, 0, 2]
    logs = store / "validations" / "candidates" / "logs" / fix["instance_id"]
    assert sorted(p.name for p in logs.iterdir()) == ["after-1", "after-2", "before-1", "before-2"]
    assert json.loads((logs / "after-1" / "report.json").read_text())[fix["instance_id"]]["resolved"]

    # what `grade` and `submit` read: the dataset reader takes it as SWE-bench's, and grading its
    # gold patches resolves it while empty ones do not
    [instance], errors = load_dataset(out)
    assert errors == [] and instance.fail_to_pass == ("tests/test_stats.py::test_mean",)
    for patches, resolved in (("--gold", "resolved: 1 of 1"), ("--empty", "resolved: 0 of 1")):
        graded = in_process(capsys, "grade", patches, "--dataset", out, "--repos-dir", history["repos"], "--store", store,
                            "--env-cache", env_cache, "--memory", "2G", "--timeout", "300", "--no-ray")
        assert graded.code == 0 and resolved in graded.out, graded.err


def test_a_test_flaky_across_two_runs_is_left_out_and_its_candidate_dropped(history, tmp_path, capsys, env_cache):
    flaky = history["candidates"]["flaky"]
    records = write_records(tmp_path / "flaky.jsonl", [flaky])
    out, store = tmp_path / "tasks.jsonl", tmp_path / "store"
    done = in_process(capsys, *validate_args(records, out, store, env_cache, "--repo", history["path"], "--sandbox", "none"))
    assert done.code == 0, done.err
    assert out.read_text() == ""
    [dropped] = lines_of(tmp_path / "tasks.dropped.jsonl")
    assert (dropped["reason"], dropped["detail"]) == (validation.FLAKY, "flaky: tests/test_first.py::test_first_run_fails")
    [outcome] = [e for e in stream(store, "flaky") if isinstance(e, CandidateValidated)]
    # it failed before and passed after in the first two runs, passed both ways in the next two
    assert (outcome.test_runs, outcome.flaky, outcome.fail_to_pass) == (4, ["tests/test_first.py::test_first_run_fails"], [])


def test_an_interrupted_validation_goes_on_with_what_it_had(history, tmp_path, env_cache):
    from magis_ray.actors.swebench.validation_service import ValidationOptions, plan_validation, run_validation_plan
    from magis_ray.events.settings import GradeSettings

    c = history["candidates"]
    records = write_records(tmp_path / "two.jsonl", [c["fix"], c["refactor"]])
    options = ValidationOptions(records=str(records), out=str(tmp_path / "tasks.jsonl"), store=str(tmp_path / "store"),
                                repository=str(history["path"]), env_cache=str(env_cache), use_ray=False,
                                grade=GradeSettings(timeout=300, memory="2G"))
    heard: list[tuple[str, bool]] = []

    def stop_after_the_first(outcome: CandidateValidated, skipped: bool) -> None:
        heard.append((outcome.instance_id, skipped))
        raise KeyboardInterrupt  # what Ctrl-C raises in the driver: the workers' runs are stopped

    with pytest.raises(KeyboardInterrupt):
        run_validation_plan(plan_validation(options), stop_after_the_first)
    [(first, skipped)] = heard
    assert not skipped
    assert not (tmp_path / "tasks.jsonl").exists()  # written once the validation is whole
    again: list[tuple[str, bool]] = []
    outcome = run_validation_plan(plan_validation(options), lambda o, skipped: again.append((o.instance_id, skipped)))
    second = next(r["instance_id"] for r in (c["fix"], c["refactor"]) if r["instance_id"] != first)
    assert again == [(first, True), (second, False)]
    events = stream(tmp_path / "store", "two")
    assert [type(e).__name__ for e in events] == ["ValidationStarted", "CandidateValidated", "ValidationStarted",
                                                  "CandidateValidated"]
    assert [r.kept for r in outcome.results] == [True, False]
    assert [line["instance_id"] for line in lines_of(tmp_path / "tasks.jsonl")] == [c["fix"]["instance_id"]]


def test_bad_input_is_one_line_exit_2_and_nothing_written(history, tmp_path, capsys, env_cache):
    c = history["candidates"]
    out = tmp_path / "tasks.jsonl"
    out.write_text("earlier\n")
    good = write_records(tmp_path / "good.jsonl", [c["fix"]])
    predictions = write_records(tmp_path / "predictions.jsonl", [{"instance_id": "x", "model_patch": ""}])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    not_json = tmp_path / "notes.jsonl"
    not_json.write_text("some notes\n")
    two_repos = write_records(tmp_path / "two.jsonl", [c["fix"], {**c["refactor"], "repo": "acme/other"}])
    (tmp_path / "plain").mkdir()
    (tmp_path / "no-repos").mkdir()
    cases = [
        ([good, "--repo", tmp_path / "missing"], "missing does not exist"),
        ([good, "--repo", tmp_path / "plain"], "not a git repository"),
        ([good], "give the records' repository: --repo PATH, or --repos-dir DIR"),
        ([good, "--repo", history["path"], "--repos-dir", history["repos"]], "(exactly one)"),
        ([good, "--repos-dir", tmp_path / "no-repos"], "no repository for acme/calc"),
        ([good, "--repos-dir", tmp_path / "nowhere"], "not a folder"),
        ([predictions, "--repo", history["path"]], "predictions.jsonl line 1 is no record: field `repo` is missing"),
        ([not_json, "--repo", history["path"]], "notes.jsonl line 1 is no record: "),
        ([empty, "--repo", history["path"]], "holds no records"),
        ([tmp_path / "absent.jsonl", "--repo", history["path"]], "cannot read the records"),
        ([two_repos, "--repo", history["path"]], "the records are of 2 repositories"),
        ([good, "--repo", history["path"], "--instances", "acme__calc-nothing"], "not in good.jsonl: acme__calc-nothing"),
        ([good, "--repo", history["path"], "--test-cmd", "pytest {tests}"], "--test-cmd pytest {tests}: the test command names {tests}"),
    ]
    for args, words in cases:
        records, *rest = args
        done = in_process(capsys, *validate_args(records, out, tmp_path / "store", env_cache, *rest))
        assert done.code == 2 and len(done.error_lines) == 1 and words in done.error_lines[0], (args, done.err)
        assert out.read_text() == "earlier\n" and not (tmp_path / "tasks.dropped.jsonl").exists()


# --- placement over a cluster ------------------------------------------------------------------

def twenty_fixes(root: Path) -> tuple[Path, list[dict]]:
    """A repository of 20 commits, each a function and its test (which fails before it: its module
    does not import), and the 20 candidates `tasks make` makes of them."""
    path = root / "repos" / "acme__many"
    repo, _ = make_repo(path, {"pyproject.toml": PYPROJECT, "many/__init__.py": ""})
    for n in range(20):
        commit_files(repo, {f"many/f{n}.py": f"def f{n}():\n    return {n}\n",
                            f"tests/test_f{n}.py": f"from many.f{n} import f{n}\n\n\ndef test_f{n}():\n    assert f{n}() == {n}\n"},
                     f"f{n}\n")
    made = task_making.make_tasks(History(repo, path), History(repo, path).first_parent_line(), "acme/many")
    return path, [json.loads(msgspec.json.encode(record)) for record in made.records]


def test_the_candidates_of_one_environment_spread_over_the_nodes_that_hold_it(tmp_path):
    """The placement a validation's Ray tasks get (remote.RayExecutor's, in process): the 20
    candidates need one environment; three in flight on three nodes of a core each go to three
    nodes, each of which holds it from then on, and a later candidate goes to one of them."""
    from magis_ray.actors.runtime.placement import EnvironmentPlacement
    from magis_ray.actors.swebench.grading_batch import Job, environment_of, next_job

    _, records = twenty_fixes(tmp_path)
    jobs = [Job(record) for record in records]
    assert len(jobs) == 20 and {environment_of(job) for job in jobs} == {("acme/many", "")}
    placement, alive = EnvironmentPlacement(), {"head": 1.0, "worker-1": 1.0, "worker-2": 1.0}
    todo, chosen = list(jobs), []
    for _ in range(3):
        job = todo.pop(next_job(todo, []))
        chosen.append(placement.choose(str(environment_of(job)), alive))
    assert sorted(chosen) == sorted(alive) and placement.holders(str(environment_of(jobs[0]))) == chosen
    placement.finished(chosen[1])
    assert placement.choose(str(environment_of(todo[0])), alive) == chosen[1]


@pytest.mark.slow  # a Ray cluster of three nodes, an environment from PyPI, 20 testbeds and 80 test runs: minutes
def test_twenty_candidates_on_a_three_node_cluster_spread_and_build_their_environment_once(tmp_path):
    from clusters import nodes_with_own_caches

    from magis_ray.actors.execution.sharing.artifacts import BUILT
    from magis_ray.actors.swebench.validation_service import ValidationOptions, plan_validation, run_validation_plan
    from magis_ray.events.settings import GradeSettings

    path, records = twenty_fixes(tmp_path)
    dataset = write_records(tmp_path / "many.jsonl", records)
    with nodes_with_own_caches("mrv-") as cluster:
        options = ValidationOptions(records=str(dataset), out=str(tmp_path / "tasks.jsonl"), store=str(tmp_path / "store"),
                                    repository=str(path), artifact_store=str(tmp_path / "artifacts"),
                                    grade=GradeSettings(timeout=300, memory="1G", workers=3))
        outcome = run_validation_plan(plan_validation(options))
        alive = {cluster.head_node.node_id, *(n.node_id for n in cluster.worker_nodes)}
    results = outcome.results
    assert [r.kept for r in results] == [True] * 20, [(r.instance_id, r.reason, r.detail) for r in results]
    assert [r.fail_to_pass for r in results] == [[f"tests/test_f{n}.py::test_f{n}"] for n in range(20)]
    nodes = Counter(r.node for r in results)
    assert set(nodes) <= alive and len(nodes) >= 2, nodes
    # one environment: built once across the cluster (the other nodes fetched it, then had it
    # cached); each candidate's testbed (its own base commit) built once
    assert len({r.environment.key for r in results}) == 1
    assert Counter(r.environment.obtained for r in results)[BUILT] == 1, [(r.node, r.environment.obtained) for r in results]
    assert all(n == 1 for n in Counter(r.testbed.key for r in results if r.testbed.obtained == BUILT).values())
    assert len(lines_of(tmp_path / "tasks.jsonl")) == 20
