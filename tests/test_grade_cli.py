"""`magis-ray grade` end to end on the calc fixture (a user's repository: --test-cmd), through the
real command, a real store, real environments and the real sandbox: gold resolves, empty does
not, the report has the official shape, `eval` takes resolved from the results, a grading killed
with kill -9 goes on without grading a finished instance twice, and Ray tasks grade in parallel
(under `slow`). A grading without Ray (--no-ray) runs in this process (tests/commands.py's
in_process), but where a signal stops it or a process's own environment is the point. The default
run starts no Ray; under `slow`, a grading on Ray starts its own, and the resume of one a signal
stopped joins the module's Ray head (conftest.py's module_ray)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import msgspec
import pytest

from commands import MAGIS, command_environment, in_process, magis as command
from execfixtures import GOLD, TEST_PATCH, make_calc_repos, new_file_patch, record, write_dataset
from waiting import COMMAND_S, wait_until
from magis_ray.actors.execution.sandbox import bwrap_path
from magis_ray.events.schema import GradingStarted, InstanceGraded, InstanceGradingStarted
from magis_ray.events.streams import StreamKind
from magis_ray.store import open_store

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("grade")
    repo, base = make_calc_repos(root / "repos")
    return {"root": root, "repos": root / "repos", "base": base, "envs": root / "envs"}


def grade_args(setup, dataset: Path, store: Path, *extra: str) -> list[str]:
    return ["grade", *extra, "--dataset", str(dataset), "--repos-dir", str(setup["repos"]), "--store", str(store),
            "--env-cache", str(setup["envs"]), "--test-cmd", "pytest -rA", "--timeout", "120", "--memory", "2G"]


def magis(args, cwd, ray: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`magis-ray ARGS` as a process of its own (a grading on Ray); `ray`: the variables that join a
    Ray (module_ray), else it starts its own."""
    return command(*args, cwd=cwd, env=ray)


@pytest.fixture
def grade(capsys, monkeypatch):
    """`magis-ray ARGS` in this process, in the folder `cwd`: a grading without Ray (--no-ray)."""
    def run(args, cwd):
        monkeypatch.chdir(cwd)
        return in_process(capsys, *args)

    return run


def stream(store: Path, name: str) -> list:
    with open_store(str(store)) as s:
        return [r.event for r in s.read(StreamKind.GRADING.stream_id(name))]


def test_gold_resolves_empty_does_not_and_the_report_has_the_official_shape(setup, tmp_path, grade):
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"])])
    store = tmp_path / "store"
    gold = grade(grade_args(setup, dataset, store, "--gold", "--no-ray"), tmp_path)
    assert gold.code == 0, gold.err
    assert "resolved: 1 of 1" in gold.out
    report = json.loads((store / "gradings" / "gold@calc.json").read_text())
    assert report["resolved_ids"] == ["calc__calc-1"] and report["error_ids"] == []
    entry = json.loads((store / "gradings" / "gold@calc" / "logs" / "gold" / "calc__calc-1" / "report.json").read_text())
    entry = entry["calc__calc-1"]
    assert entry["resolved"] and entry["patch_successfully_applied"]
    assert entry["tests_status"]["FAIL_TO_PASS"] == {"success": ["tests/test_more.py::test_mean_of_two"], "failure": []}
    empty = grade(grade_args(setup, dataset, store, "--empty", "--no-ray"), tmp_path)
    assert empty.code == 0, empty.err
    assert "resolved: 0 of 1" in empty.out
    result = [e for e in stream(store, "empty@calc") if isinstance(e, InstanceGraded)]
    assert [(r.resolved, r.tests_status.fail_to_pass.failure, r.tests_status.pass_to_pass.success) for r in result] == [
        (False, ["tests/test_more.py::test_mean_of_two"], ["tests/test_more.py::test_median_of_one"])]


def test_predictions_of_another_system_and_a_patch_that_does_not_apply(setup, tmp_path, grade):
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"], 1), record(setup["base"], 2)])
    preds = tmp_path / "agent.jsonl"
    broken = GOLD.replace("(len(values) - 1)", "(len(values) - 9)")
    preds.write_text(json.dumps({"instance_id": "calc__calc-1", "model_name_or_path": "agent", "model_patch": GOLD}) + "\n"
                     + json.dumps({"instance_id": "calc__calc-2", "model_name_or_path": "agent", "model_patch": broken}) + "\n")
    store = tmp_path / "store"
    done = grade(grade_args(setup, dataset, store, str(preds), "--no-ray"), tmp_path)
    assert done.code == 0, done.err
    report = json.loads((store / "gradings" / "agent@calc.json").read_text())
    assert report["resolved_ids"] == ["calc__calc-1"]
    details = json.loads((store / "gradings" / "agent@calc.details.json").read_text())
    assert details["calc__calc-2"]["error"]["step"] == "patch" and not details["calc__calc-2"]["completed"]
    assert "calc__calc-2" in report["error_ids"]
    logs = store / "gradings" / "agent@calc" / "logs" / "agent" / "calc__calc-2"
    assert ">>>>> Patch Apply Failed" in (logs / "run_instance.log").read_text()
    assert not (logs / "report.json").exists()  # as the harness: no report for a patch that does not apply


def test_the_report_is_the_harness_s_own_make_run_report(setup, tmp_path, monkeypatch, grade):
    """Every kind of outcome in one grading, and the run report checked against swebench 4.1.0's
    make_run_report reading the same per-instance report.json files: resolved, a patch that does
    not apply (an error), an empty patch (not run), one whose tests do not even collect (completed,
    unresolved), and an instance with no prediction (incomplete)."""
    from swebench.harness.reporting import make_run_report

    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"], n) for n in range(1, 6)])
    broken = GOLD.replace("(len(values) - 1)", "(len(values) - 9)")
    no_tests = GOLD.replace("+    return total / len(values)", "+    return total / len(values)\n+import nothing_at_all")
    no_tests = no_tests.replace("@@ -6,7 +6,7 @@", "@@ -6,7 +6,8 @@")
    predictions = {"calc__calc-1": GOLD, "calc__calc-2": broken, "calc__calc-3": "", "calc__calc-4": no_tests}
    preds = tmp_path / "agent.jsonl"
    preds.write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": "agent/v1", "model_patch": p}) + "\n"
                             for i, p in predictions.items()))
    store = tmp_path / "store"
    done = grade(grade_args(setup, dataset, store, str(preds), "--no-ray"), tmp_path)
    assert done.code == 0, done.err
    ours = json.loads((store / "gradings" / "agent@calc.json").read_text())
    assert ours["resolved_ids"] == ["calc__calc-1"] and ours["unresolved_ids"] == ["calc__calc-4"]
    assert ours["error_ids"] == ["calc__calc-2"] and ours["empty_patch_ids"] == ["calc__calc-3"]
    assert ours["incomplete_ids"] == ["calc__calc-5"]
    # The harness's own function, on the harness's layout of the same report.json files.
    harness_dir = tmp_path / "harness"
    run_dir = harness_dir / "logs" / "run_evaluation" / "check"
    run_dir.mkdir(parents=True)
    (run_dir / "agent__v1").symlink_to(store / "gradings" / "agent@calc" / "logs" / "agent__v1")
    monkeypatch.chdir(harness_dir)
    full = [json.loads(line) for line in dataset.read_text().splitlines()]
    theirs = json.loads(make_run_report({i: {"instance_id": i, "model_name_or_path": "agent/v1", "model_patch": p}
                                         for i, p in predictions.items()}, full, "check").read_text())
    assert ours == theirs
    assert list(ours) == list(theirs)  # key for key, in the harness's order


# slow: what holds a hostile prediction is the sandbox, whose limits test_sandbox.py hits one by one (a fork
# bomb, the host's home, secrets, an output flood); a limit reaching the grading's details and table is
# test_a_prediction_over_its_memory_budget_is_ended_and_named
@pytest.mark.slow
def test_a_hostile_prediction_hits_its_limits_and_an_honest_one_still_resolves(setup, tmp_path, grade):
    """Graded side by side (two workers, this process's threads): the hostile prediction's
    conftest.py forks without end, floods its output and reads the host's home; it is reported with
    the limits it hit, the honest prediction resolves, and the grader ends normally. (What holds
    it is the sandbox, the same in a Ray task: test_batch_resources.py runs the team's sandboxed
    tests on Ray, test_cluster_placement.py grades in Ray tasks.)"""
    secret = Path.home() / f".magis-grade-secret-{os.getpid()}"
    secret.write_text("sk-the-hosts-secret\n")
    conftest = (
        "import os, pathlib, sys\n"
        f"print(pathlib.Path({str(secret)!r}).read_text() if pathlib.Path({str(secret)!r}).exists() else 'no secret here')\n"
        "sys.stdout.write('flood ' * 4_000_000)\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            __import__('time').sleep(30)\n"
        "            os._exit(0)\n"
        "except OSError as exc:\n"
        "    print('fork refused', exc)\n"
    )
    hostile = new_file_patch("conftest.py", conftest)
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"], 1), record(setup["base"], 2)])
    preds = tmp_path / "mixed.jsonl"
    preds.write_text(json.dumps({"instance_id": "calc__calc-1", "model_name_or_path": "honest", "model_patch": GOLD}) + "\n"
                     + json.dumps({"instance_id": "calc__calc-2", "model_name_or_path": "hostile", "model_patch": hostile}) + "\n")
    store = tmp_path / "store"
    try:
        done = grade(grade_args(setup, dataset, store, str(preds), "--workers", "2", "--no-ray"), tmp_path)
    finally:
        secret.unlink()
    assert done.code == 0, done.err
    report = json.loads((store / "gradings" / "mixed@calc.json").read_text())
    assert report["resolved_ids"] == ["calc__calc-1"]
    details = json.loads((store / "gradings" / "mixed@calc.details.json").read_text())
    assert any(limit.startswith("process limit reached") for limit in details["calc__calc-2"].get("limits", [])), details
    logs = store / "gradings" / "mixed@calc" / "logs"
    assert not any("sk-the-hosts-secret" in p.read_text(errors="replace") for p in logs.rglob("*") if p.is_file())
    assert "process limit reached" in done.out


def test_a_prediction_over_its_memory_budget_is_ended_and_named(setup, tmp_path, grade):
    """Its conftest.py starts three processes of 1.5 GiB each under --memory 2G: the test run is
    ended, the limit named in the details and the table, and what held the budget said."""
    hold = "import time; hog = b'1' * (1536 * 1024 ** 2); time.sleep(60)"
    conftest = ("import subprocess, sys\n"
                f"hogs = [subprocess.Popen([sys.executable, '-c', {hold!r}]) for _ in range(3)]\n"
                "[hog.wait() for hog in hogs]\n")
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"], 1)])
    preds = tmp_path / "greedy.jsonl"
    preds.write_text(json.dumps({"instance_id": "calc__calc-1", "model_name_or_path": "greedy",
                                 "model_patch": new_file_patch("conftest.py", conftest)}) + "\n")
    store = tmp_path / "store"
    done = grade(grade_args(setup, dataset, store, str(preds), "--no-ray"), tmp_path)
    assert done.code == 0, done.err
    details = json.loads((store / "gradings" / "greedy@calc.details.json").read_text())["calc__calc-1"]
    assert "memory limit reached (2 GiB)" in details["limits"] and not details["resolved"], details
    assert details["memory"]["control"] in ("cgroup v1", "cgroup v2", "watchdog")
    assert details["memory"]["peak_mb"] >= 1900, details
    assert "memory limit reached (2 GiB)" in done.out


def test_more_workers_than_the_machines_memory_holds_are_lowered_and_said(setup, tmp_path, grade):
    from magis_ray.actors.execution.sandbox.memory_budget import host_memory

    host = host_memory()
    budget = host // 2 - (1 << 20)  # two fit, three do not
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"])])
    args = grade_args(setup, dataset, tmp_path / "store", "--gold", "--no-ray", "--workers", "3")
    args[args.index("--memory") + 1] = str(budget)
    done = grade(args, tmp_path)
    assert done.code == 0, done.err
    assert "resolved: 1 of 1" in done.out
    notices = [line for line in done.err.splitlines() if line.startswith("magis-ray: notice: --workers 3 at a memory budget")]
    assert len(notices) == 1 and notices[0].endswith(": 2 at once instead"), done.err
    args[args.index("--memory") + 1] = str(host + (1 << 30))
    refused = grade(args, tmp_path)
    assert refused.code == 2 and "Traceback" not in refused.err
    assert refused.err.strip().splitlines()[-1].startswith(f"magis-ray: error: --memory {host + (1 << 30)}: a memory budget of ")


def test_bad_input_is_one_line(setup, tmp_path, grade):
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"])])
    for args, words in (
        (grade_args(setup, dataset, tmp_path / "s"), "exactly one"),
        (grade_args(setup, dataset, tmp_path / "s", "--gold", "--instances", "nope"), "not in calc.jsonl: nope"),
        (grade_args(setup, tmp_path / "missing.jsonl", tmp_path / "s", "--gold"), "cannot read the dataset"),
        (grade_args(setup, dataset, tmp_path / "s", str(broken_predictions(tmp_path))), "bad.jsonl line 3: not valid JSON"),
    ):
        done = grade(args, tmp_path)
        assert done.code == 2 and done.err.startswith("magis-ray: error: ") and words in done.err, done.err
        assert "Traceback" not in done.err


def broken_predictions(tmp_path: Path) -> Path:
    """A predictions file whose third line (after a blank one) is not JSON."""
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"instance_id": "calc__calc-1", "model_patch": ""}) + "\n\n{not json\n")
    return path


def test_the_grade_section_comes_from_flags_then_env_then_magis_toml_and_a_bad_value_names_its_source(setup, tmp_path, capsys,
                                                                                                     monkeypatch):
    """The grade settings reach a real grading through the one settings model: the project's
    magis.toml [grade] table, MAGIS_GRADE_* over it, grade's own flags over both; what the grading
    ran with is what its GradingStarted records. An empty prediction is not run: no environment."""
    from checks import assert_one_line_error

    project = tmp_path / "project"  # the current folder's repository: its magis.toml is the project's layer
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    magis_toml = project / "magis.toml"
    magis_toml.write_text('[grade]\ntimeout = 300\nmemory = "3G"\nworkers = 2\n')
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"])])
    preds = tmp_path / "agent.jsonl"
    preds.write_text(json.dumps({"instance_id": "calc__calc-1", "model_name_or_path": "agent", "model_patch": ""}) + "\n")
    store = tmp_path / "store"
    monkeypatch.chdir(project)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    for name in [name for name in os.environ if name.startswith("MAGIS_")]:
        monkeypatch.delenv(name)

    def grade(name: str, *flags: str, **env: str):
        """The grading in this process, in the project, with no MAGIS_ variable but `env`'s."""
        for variable in [variable for variable in os.environ if variable.startswith("MAGIS_GRADE_")]:
            monkeypatch.delenv(variable)
        for variable, value in env.items():
            monkeypatch.setenv(variable, value)
        return in_process(capsys, "grade", preds, "--dataset", dataset, "--repos-dir", setup["repos"], "--store", store,
                          "--env-cache", setup["envs"], "--test-cmd", "pytest -rA", "--no-ray", "--name", name, *flags)

    def started(name: str) -> tuple:
        (event,) = [e for e in stream(store, name) if isinstance(e, GradingStarted)]
        return event.timeout_s, event.memory_mb, event.workers

    from_file = grade("file")
    assert from_file.code == 0, from_file.err
    assert started("file") == (300.0, 3072, 2)
    from_env = grade("env", MAGIS_GRADE_TIMEOUT="240", MAGIS_GRADE_WORKERS="1")
    assert from_env.code == 0, from_env.err
    assert started("env") == (240.0, 3072, 1)
    from_flags = grade("flags", "--timeout", "90", "--memory", "2G", "--workers", "1", MAGIS_GRADE_TIMEOUT="240")
    assert from_flags.code == 0, from_flags.err
    assert started("flags") == (90.0, 2048, 1)

    assert_one_line_error(grade("bad-env", MAGIS_GRADE_TIMEOUT="soon"),
                          "MAGIS_GRADE_TIMEOUT='soon': grade.timeout must be a number, not 'soon'")
    assert_one_line_error(grade("bad-flag", "--memory", "lots"), "--memory: grade.memory must be a size")
    magis_toml.write_text('[grade]\nworkers = 0\n')
    assert_one_line_error(grade("bad-file"), f"{magis_toml}: grade.workers must be at least 1, not 0")
    # a refusal of the service about a value says where that value came from
    magis_toml.write_text('[grade]\nmemory = "4096G"\n')
    assert_one_line_error(grade("too-big"), f"grade.memory = 4096G (project {magis_toml}): a memory budget of ")
    from magis_ray.store.base import UnknownRun

    with open_store(str(store)) as s, pytest.raises(UnknownRun):  # a refused grading left nothing behind
        s.read(StreamKind.GRADING.stream_id("bad-env"))


def test_without_bubblewrap_it_refuses_unless_sandbox_none(setup, tmp_path):
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"])])
    bin_dir = tmp_path / "bin"  # a PATH with git and sh but no bwrap
    bin_dir.mkdir()
    for tool in ("git", "sh"):
        (bin_dir / tool).symlink_to(subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip())
    # a process of its own: what the command finds on its PATH is the point
    refused = command(*grade_args(setup, dataset, tmp_path / "s", "--gold", "--no-ray"), cwd=tmp_path, env={"PATH": str(bin_dir)})
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "magis-ray: error: bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap) or pass --sandbox none"]
    # Unsandboxed (the user trusts the code): the same steps, the eval script's /testbed a host folder.
    trusted = command(*grade_args(setup, dataset, tmp_path / "s", "--gold", "--no-ray", "--sandbox", "none"), cwd=tmp_path)
    assert trusted.returncode == 0 and "resolved: 1 of 1" in trusted.stdout, trusted.stdout + trusted.stderr


def test_kill_9_then_the_same_command_grades_no_finished_instance_twice(setup, tmp_path, grade):
    # Each instance's tests take a moment (a real wait in the test patch), so the kill lands mid-batch:
    # after the first of three, with two to go.
    slow_patch = TEST_PATCH.replace("@@ -0,0 +1,9 @@", "@@ -0,0 +1,10 @@").replace(
        "+def test_median_of_one():\n", "+def test_median_of_one():\n+    __import__('time').sleep(1.5)\n")
    records = [dict(record(setup["base"], n), test_patch=slow_patch) for n in range(1, 4)]
    dataset = write_dataset(tmp_path / "calc.jsonl", records)
    store = tmp_path / "store"
    args = grade_args(setup, dataset, store, "--gold", "--no-ray")
    first = subprocess.Popen([*MAGIS, *args], cwd=tmp_path, env=command_environment(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)

    def graded() -> list:
        if not (store / "events.sqlite3").exists():
            return []
        try:
            return [e for e in stream(store, "gold@calc") if isinstance(e, InstanceGraded)]
        except Exception:  # noqa: BLE001 - the stream does not exist yet
            return []

    wait_until(graded, "the first instance is graded", timeout_s=300, while_running=first)
    first.send_signal(signal.SIGKILL)
    first.wait()
    before = stream(store, "gold@calc")
    finished = {e.instance_id for e in before if isinstance(e, InstanceGraded)}
    assert 1 <= len(finished) < 3  # cut off mid-batch
    again = grade(args, tmp_path)
    assert again.code == 0, again.err
    assert "resolved: 3 of 3" in again.out
    events = stream(store, "gold@calc")
    assert sum(isinstance(e, GradingStarted) for e in events) == 2
    runs = {}
    for e in events:
        if isinstance(e, InstanceGradingStarted):
            runs[e.instance_id] = runs.get(e.instance_id, 0) + 1
    for instance in finished:
        assert runs[instance] == 1  # its tests ran once, before the kill
    assert sorted(e.instance_id for e in events if isinstance(e, InstanceGraded)) == sorted(
        [e.instance_id for e in before if isinstance(e, InstanceGraded)] + [r["instance_id"] for r in records
                                                                            if r["instance_id"] not in finished])
    # and a third time grades nothing at all
    third = grade(args, tmp_path)
    assert third.code == 0 and len(stream(store, "gold@calc")) == len(events) + 1


# slow: test_cluster_placement.py grades instances in Ray tasks, on several nodes
@pytest.mark.slow
def test_ray_tasks_grade_in_parallel(setup, tmp_path):
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"], 1), record(setup["base"], 2)])
    store = tmp_path / "store"
    done = magis(grade_args(setup, dataset, store, "--gold", "--workers", "2"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "resolved: 2 of 2" in done.stdout
    graded = [e for e in stream(store, "gold@calc") if isinstance(e, InstanceGraded)]
    assert all(e.node for e in graded)  # ran as Ray tasks


def test_the_summary_per_repository_counts_what_needs_the_internet_apart():
    from magis_ray.cli.grade import repository_table

    results = [InstanceGraded(instance_id=i, patch_sha="", resolved=r, needs_internet=n)
               for i, r, n in (("psf__requests-1", False, True), ("psf__requests-2", True, False),
                               ("sympy__sympy-3", False, False), ("sympy__sympy-4", True, False))]
    lines = repository_table(results).splitlines()
    assert lines[1].split() == ["psf__requests", "2", "1", "1", "0"]
    assert lines[2].split() == ["sympy__sympy", "2", "1", "0", "1"]


def test_the_grading_service_grades_without_the_command(setup, tmp_path):
    """The service itself, in this process: typed options in, a typed outcome out; each result is
    the very event the grading's stream holds, and its tests_status is the instance's report.json's."""
    from magis_ray.events.settings import GradeSettings
    from magis_ray.actors.swebench.grading_service import (GradingInputError, GradingOptions, plan_grading,
                                                           run_grading_plan)

    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"])])
    store = tmp_path / "store"
    options = GradingOptions(dataset=str(dataset), repos_dir=str(setup["repos"]), store=str(store), patches="gold",
                             env_cache=str(setup["envs"]), use_ray=False,
                             grade=GradeSettings(test_cmd="pytest -rA", timeout=120, memory="2G"))
    heard = []
    plan = plan_grading(options, notice=heard.append)
    assert (plan.name, [j.instance_id for j in plan.jobs], heard) == ("gold@calc", ["calc__calc-1"], [])
    outcome = run_grading_plan(plan, lambda event, skipped: heard.append((event.instance_id, skipped)))
    assert heard == [("calc__calc-1", False)]
    assert outcome.report["resolved_ids"] == ["calc__calc-1"]
    assert [e for e in stream(store, "gold@calc") if isinstance(e, InstanceGraded)] == outcome.results
    report = json.loads((Path(outcome.logs_dir) / "gold" / "calc__calc-1" / "report.json").read_text())
    assert outcome.results[0].tests_status.as_harness() == report["calc__calc-1"]["tests_status"]
    # a name with dots (a dataset's "verified.test" stem, a Python version) is the report's whole name
    dotted = plan_grading(msgspec.structs.replace(options, name="gold@verified.test-3.11"))
    assert dotted.report_path == store / "gradings" / "gold@verified.test-3.11.json"
    with pytest.raises(GradingInputError) as refused:
        plan_grading(msgspec.structs.replace(options, grade=GradeSettings(memory="4096G")))
    assert refused.value.setting == "grade.memory"


# [ray] under `slow` for the suite's time: [in-process] stops and resumes the same grading with the same
# line and exit status, test_start_stop.py's sigterm[mid-run] ends a stopped command's own Ray, and
# test_cluster_placement.py grades in Ray tasks
@pytest.mark.parametrize("executor", [pytest.param([], id="ray", marks=pytest.mark.slow), pytest.param(["--no-ray"], id="in-process")])
def test_a_grading_stopped_by_sigterm_ends_at_once_and_the_same_command_resumes_it(setup, tmp_path, executor, request):
    """SIGTERM (`kill`, `timeout`, a CI cancel) to a grading whose test is running, on Ray or in
    this process's threads (--no-ray): it ends then, as Ctrl-C ends it, with the line that says how
    to go on and the signal's exit code; its Ray and the test end with it, and the same command
    grades the instance."""
    from processes import cmdline_of, describe, in_session, under

    gate = tmp_path / f"gate-{os.getpid()}"
    dataset = write_dataset(tmp_path / "calc.jsonl", [record(setup["base"])])
    store = tmp_path / "store"
    # the test waits at the gate (unconfined, so that it sees the host's file)
    args = [*grade_args(setup, dataset, store, "--gold", "--sandbox", "none"), *executor, "--test-cmd",
            f"sh -c 'until [ -e {gate} ]; do sleep 0.05; done' && pytest -rA", "--timeout", "900"]
    driver = subprocess.Popen([*MAGIS, *args], cwd=tmp_path, env=command_environment(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # the waiting test's own process (the driver's command line names the gate too)
        wait_until(lambda: any(cmdline_of(pid).startswith("sh -c until") for pid in under(str(gate))),
                   "the instance's test waits at the gate", timeout_s=COMMAND_S, while_running=driver)
        driver.send_signal(signal.SIGTERM)  # to the driver alone, as `kill PID` sends it
        _, err = driver.communicate(timeout=COMMAND_S)  # a bound for a hang, not a timing
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode == 143, err
    assert "Traceback" not in err and "SIGTERM received" not in err, err
    assert "run the same command again to resume grading gold@calc" in err
    left: list[int] = []

    def nothing_left() -> bool:  # its Ray, and the test (a session of its own, as the sandbox starts it)
        left[:] = sorted({*in_session(driver.pid), *under(str(gate))})
        return not left

    wait_until(nothing_left, lambda: "the stopped grading's processes end; left: " + "; ".join(f"{p} {describe(p)}" for p in left))
    gate.touch()
    # on Ray, the resumed grading joins the module's Ray: the stopped one's own Ray is what had to end
    again = magis(args, tmp_path, None if executor else request.getfixturevalue("module_ray"))
    assert again.returncode == 0 and "resolved: 1 of 1" in again.stdout, again.stdout + again.stderr
