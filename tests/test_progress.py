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
    phases = [line.strip() for line in printed]
    assert phases[:3] == ["starting the team", "preparing the test environment", "custodian: ranking files"]
    assert "reproduction test" in phases and any(p.startswith("stage 1 of") for p in phases)
    assert all(a != b for a, b in zip(phases, phases[1:]))  # a phase is named when it begins, once
    assert all(line.startswith("  ") and "(" not in line for line in printed)
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
