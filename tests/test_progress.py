"""What `submit` and `resume` print while a run works (cli/progress.py): a line when the run's
phase changes, a heartbeat while it stays quiet. Fed a real recorded run with tests (the golden v2
log), on a clock the test owns; the printing through the CLI is in test_submit_cli."""
from __future__ import annotations

from pathlib import Path

from magis_ray.cli.progress import PhaseTicker
from magis_ray.cli.wording import duration
from magis_ray.events.codec import decode_recorded
from magis_ray.events.projections.catalog import RunSummary

LOG = Path(__file__).parent / "golden" / "v2_tests_run.jsonl"


def recorded():
    return [decode_recorded(line) for line in LOG.read_bytes().splitlines()]


def test_a_line_per_phase_in_the_order_the_run_went_through_them():
    records = recorded()
    summary, ticker, printed = RunSummary(records[0].run_id), PhaseTicker(heartbeat_s=30, waiting="starting the team"), []
    printed += ticker.tick(summary, 0.0)
    for second, rec in enumerate(records, 1):
        summary.apply(rec)
        printed += ticker.tick(summary, float(second))  # a second apart: no heartbeat falls due
    said = [line.strip() for line in printed]
    # whether tests run is said once the environment is prepared, before the Custodian's first step
    assert said[:4] == ["starting the team", "preparing the test environment",
                        "tests on (environment example/calc (--env-setup): from this node's cache)",
                        "custodian: ranking files"]
    phases = [line for line in said if not line.startswith("tests ")]
    assert "reproduction test" in phases and any(p.startswith("stage 1 of") for p in phases)
    assert all(a != b for a, b in zip(phases, phases[1:]))  # a phase is named when it begins, once
    assert all(line.startswith("  ") and "(" not in line for line in printed if not line.startswith("  tests "))
    assert ticker.tick(summary, 10_000.0) == []  # the run ended: the summary speaks now


def test_a_quiet_phase_is_mentioned_again_with_how_long_it_has_lasted():
    records = recorded()
    summary, ticker = RunSummary(records[0].run_id), PhaseTicker(heartbeat_s=30)
    summary.apply(records[0])  # RunStarted with tests on: the environment is being prepared
    assert ticker.tick(summary, 100.0) == ["  preparing the test environment"]
    assert ticker.tick(summary, 129.0) == []
    assert ticker.tick(summary, 130.0) == ["  preparing the test environment (30 s)"]
    assert ticker.tick(summary, 145.0) == []
    assert ticker.tick(summary, 190.0) == ["  preparing the test environment (1 min 30 s)"]
    summary.calls = 4
    assert ticker.tick(summary, 220.0) == ["  preparing the test environment (2 min 0 s; 4 model calls so far)"]


def test_durations_read_as_words():
    assert [duration(s) for s in (0, 40.9, 90, 3599, 7500)] == ["0 s", "40 s", "1 min 30 s", "59 min 59 s", "2 h 5 min"]


def started_with(tests: bool):
    import msgspec

    first = recorded()[0]
    started = first.event
    return msgspec.structs.replace(first, event=msgspec.structs.replace(
        started, settings=msgspec.structs.replace(started.settings, tests=tests)))


def prepared(outcome: str, output: str, command: str = ""):
    from magis_ray.events import schema as ev

    first = recorded()[0]
    return ev.Recorded(run_id=first.run_id, version=2, position=first.position + 1, time=first.time + 1,
                       actor="supervisor", event_id="e2", event=ev.TestsRan(purpose="prepare", command=command, outcome=outcome, output=output))


def test_tests_off_by_the_settings_are_said_when_the_run_starts():
    start = started_with(tests=False)
    summary, ticker = RunSummary(start.run_id), PhaseTicker()
    summary.apply(start)
    assert ticker.tick(summary, 1.0) == ["  tests off (--tests off): the patches are judged from their diffs, as in the "
                                         "MAGIS paper", "  ranking files"]
    assert ticker.tick(summary, 2.0) == []  # said once


def test_tests_that_cannot_run_are_a_notice_before_any_role_acts():
    start = started_with(tests=True)
    summary, ticker = RunSummary(start.run_id), PhaseTicker()
    summary.apply(start)
    assert ticker.tick(summary, 1.0) == ["  preparing the test environment"]
    summary.apply(prepared("error", "the tests run in a sandbox, and none can be made here:\n bubblewrap (bwrap) is "
                                    "not installed"))
    assert ticker.tick(summary, 2.0) == [
        "magis-ray: notice: tests off for this run: the tests run in a sandbox, and none can be made here: bubblewrap "
        "(bwrap) is not installed", "  custodian: ranking files"]


def test_the_decision_is_said_even_when_the_run_ends_in_the_same_read():
    from magis_ray.events import schema as ev

    start = started_with(tests=True)
    summary, ticker = RunSummary(start.run_id), PhaseTicker()
    ready = prepared("passed", "environment calc: built in 3 s", "python -m pytest -rA")
    ended = ev.Recorded(run_id=start.run_id, version=3, position=ready.position + 1, time=ready.time + 1,
                        actor="supervisor", event_id="e3", event=ev.RunFinished(outcome="no_patch"))
    for rec in (start, ready, ended):
        summary.apply(rec)
    assert ticker.tick(summary, 1.0) == ["  tests on: python -m pytest -rA (environment calc: built in 3 s)"]
