"""The projections (events/projections): rebuilt from a stored log they equal the live ones; the
diff applies to the base commit with real git; metrics add up; failed tasks and superseded events
leave no trace in the diff; and the committed golden log of schema v1 still decodes and projects
to its committed expectations."""
from __future__ import annotations

import itertools
import json
import subprocess
import time
from pathlib import Path

import msgspec
import pygit2
import pytest
from gitfixtures import checkout, git, read_tree_files
from runs import BASE_TIME, INSTANCE_ID, MODEL, TIME_STEP, constructed_run, fixed_new_events, intended_files, read_base

from magis_ray.events import schema as ev
from magis_ray.events.codec import decode_recorded, encode
from magis_ray.events.projections import RunView, audit_json, audit_markdown, final_diff, fold, metrics, prediction
from magis_ray.events.projections.diff import changed_files
from magis_ray.store.memory import InMemoryStore
from magis_ray.store.sqlite import SQLiteStore

GOLDEN = Path(__file__).parent / "golden"
STATS, TEXTS = "calc/stats.py", "calc/texts.py"


def record(pairs, run_id: str = "run1") -> list[ev.Recorded]:
    return InMemoryStore().append(run_id, 0, fixed_new_events(pairs))


def projections(view: RunView) -> dict:
    return {
        "final_diff": final_diff(view),
        "audit_json": audit_json(view),
        "audit_markdown": audit_markdown(view),
        "metrics": metrics(view),
        "prediction": prediction(view),
    }


# --- live projections equal the ones rebuilt from the stored log -----------------------------


@pytest.mark.parametrize("variant", [{}, {"fix_texts": True}, {"interrupted": True}], ids=["t2-fails", "both-fixed", "resumed"])
def test_projections_rebuilt_from_the_sqlite_log_equal_the_live_ones(tmp_path, calc_repo, variant):
    repo_path, base = calc_repo
    pairs = constructed_run(repo_path, base, **variant)
    # Real clock times with awkward fractions, as a live run has them.
    new = fixed_new_events(pairs, start=time.time(), step=0.1234567)
    db = tmp_path / "store"
    live = RunView()
    sizes = itertools.cycle([1, 3, 7, 2, 1, 11, 5])
    store = SQLiteStore.open(db, create=True)
    try:
        i, version = 0, 0
        while i < len(new):
            batch = new[i : i + next(sizes)]
            recorded = store.append("r-live", version, batch)
            assert [r.version for r in recorded] == list(range(version + 1, version + len(batch) + 1))
            for rec in recorded:
                live.apply(rec)
            i, version = i + len(batch), recorded[-1].version
    finally:
        store.close()

    reopened = SQLiteStore.open(db)  # a fresh connection on the same file: nothing cached
    try:
        stored = reopened.read("r-live")
    finally:
        reopened.close()
    assert len(stored) == len(pairs)
    rebuilt = projections(fold(stored))
    assert rebuilt == projections(live)
    assert STATS in rebuilt["final_diff"] and rebuilt["prediction"]["model_patch"] == rebuilt["final_diff"]
    assert live.status == "finished" and live.failed is None


# --- the diff applies to the base commit --------------------------------------------------------


@pytest.mark.parametrize("fix_texts", [False, True], ids=["one-file", "two-files"])
def test_the_diff_applies_to_a_checkout_of_the_base_commit_and_gives_the_intended_files(tmp_path, calc_repo, fix_texts):
    repo_path, base = calc_repo
    diff = final_diff(fold(record(constructed_run(repo_path, base, fix_texts=fix_texts))))
    work = checkout(pygit2.Repository(str(repo_path)), base, tmp_path / "work")
    before = read_tree_files(work)
    patch = tmp_path / "fix.patch"
    patch.write_text(diff)

    git("apply", "--check", str(patch), cwd=work)
    git("apply", str(patch), cwd=work)

    intended = intended_files(repo_path, base, fix_texts=fix_texts)
    assert sorted(intended) == ([STATS, TEXTS] if fix_texts else [STATS])
    expected = {**before, **{p: text.encode() for p, text in intended.items()}}
    assert read_tree_files(work) == expected
    assert b"return total / len(values)\n" in expected[STATS]
    # Applied a second time it no longer fits: the diff really changed the files.
    with pytest.raises(subprocess.CalledProcessError):
        git("apply", "--check", str(patch), cwd=work)


def test_the_diff_lists_files_in_path_order_each_once(calc_repo):
    repo_path, base = calc_repo
    view = fold(record(constructed_run(repo_path, base, fix_texts=True)))
    headers = [line for line in final_diff(view).splitlines() if line.startswith("diff --git ")]
    assert headers == [f"diff --git a/{STATS} b/{STATS}", f"diff --git a/{TEXTS} b/{TEXTS}"]
    assert changed_files(view) == [STATS, TEXTS]
    # Only the final attempt of T1 is in the diff, not the rejected first one.
    assert "max(len(values) - 1, 1)" not in final_diff(view)


# --- metrics ------------------------------------------------------------------------------------


def _sums(exchanges: list[tuple[str, ev.LLMExchanged]]) -> dict:
    return {
        "calls": len(exchanges),
        "failed_calls": sum(1 for _, x in exchanges if x.error),
        "prompt_tokens": sum(x.prompt_tokens for _, x in exchanges),
        "completion_tokens": sum(x.completion_tokens for _, x in exchanges),
        "cost_usd": pytest.approx(sum(x.cost_usd for _, x in exchanges), abs=1e-6),
        "llm_seconds": pytest.approx(sum(x.latency_s for _, x in exchanges), abs=1e-3),
    }


COUNTERS = ("calls", "failed_calls", "prompt_tokens", "completion_tokens", "cost_usd", "llm_seconds")


def test_metrics_add_up_per_role_and_per_step(calc_repo):
    repo_path, base = calc_repo
    pairs = constructed_run(repo_path, base)
    m = metrics(fold(record(pairs)))
    exchanges = [(actor, e) for actor, e in pairs if isinstance(e, ev.LLMExchanged)]

    roles = sorted({actor.split(":", 1)[0] for actor, _ in exchanges})
    assert roles == ["custodian", "developer", "manager", "qa"]
    assert list(m["by_role"]) == roles
    for role in roles:
        assert m["by_role"][role] == _sums([(a, x) for a, x in exchanges if a.split(":", 1)[0] == role]), role
    steps = sorted({x.purpose for _, x in exchanges})
    assert list(m["by_step"]) == steps
    for step in steps:
        assert m["by_step"][step] == _sums([(a, x) for a, x in exchanges if x.purpose == step]), step

    total = m["total"]
    assert {k: total[k] for k in COUNTERS} == _sums(exchanges)
    for counter in COUNTERS:
        for group in ("by_role", "by_step"):
            assert sum(b[counter] for b in m[group].values()) == pytest.approx(total[counter], abs=1e-6), (group, counter)
    assert total["failed_calls"] == 2  # the silent meeting turn and T2's first locate_lines
    assert total["events"] == len(pairs)
    assert total["wall_seconds"] == pytest.approx(TIME_STEP * (len(pairs) - 1))
    # "developer:T1:meeting" is the developer's, not a role of its own.
    assert m["by_role"]["developer"]["calls"] == sum(1 for a, _ in exchanges if a.startswith("developer:"))


# --- failed tasks ---------------------------------------------------------------------------------


def _with_t2_status(pairs, status: str):
    out = []
    for actor, e in pairs:
        if isinstance(e, ev.TaskFinished) and e.task_id == "T2":
            e = msgspec.structs.replace(e, status=status, reason="" if status != "failed" else "gave up")
        out.append((actor, e))
    return out


@pytest.mark.parametrize("status", ["approved", "unreviewed", "unapproved", "failed"])
def test_a_task_that_failed_contributes_no_diff(calc_repo, status):
    """T2 has a real patch for calc/texts.py; only the status "failed" keeps it out of the diff."""
    repo_path, base = calc_repo
    pairs = _with_t2_status(constructed_run(repo_path, base, fix_texts=True), status)
    view = fold(record(pairs))
    t2_patch = next(e for _, e in pairs if isinstance(e, ev.PatchProposed) and e.task_id == "T2")
    assert view.tasks["T2"].patches == [t2_patch]  # the patch is recorded either way
    diff = final_diff(view)
    if status == "failed":
        assert TEXTS not in diff and t2_patch.diff not in diff
        assert changed_files(view) == [STATS]
        assert diff == final_diff(fold(record(constructed_run(repo_path, base))))  # as if T2 had no patch
    else:
        assert t2_patch.diff in diff
        assert changed_files(view) == [STATS, TEXTS]
    assert prediction(view)["model_patch"] == diff
    assert audit_json(view)["files_changed"] == changed_files(view)


def test_the_constructed_failed_task_has_a_step_failure_and_no_patch(calc_repo):
    repo_path, base = calc_repo
    view = fold(record(constructed_run(repo_path, base)))
    t2 = view.tasks["T2"]
    assert t2.finished.status == "failed" and t2.patches == [] and t2.final_patch is None
    assert [r.event.purpose for r in view.timeline if isinstance(r.event, ev.StepFailed)] == ["meeting_speak", "locate_lines"]
    assert TEXTS not in final_diff(view)


# --- RunResumed ---------------------------------------------------------------------------------


def _resume_scenario(repo_path, base):
    """(prefix, superseded, resumed, rest) as Recorded lists of one stream: the run dies after
    T1's first review, after work that must not count (an extra task with an approved patch, an
    expensive exchange, a wrong attempt 2), and is resumed from the end of the prefix."""
    pairs = constructed_run(repo_path, base, fix_texts=True)
    cut = next(i for i, (_, e) in enumerate(pairs) if isinstance(e, ev.ReviewIssued) and not e.approved) + 1
    readme = read_base(repo_path, base)["README.md"]
    junk_text = readme[0] + "Superseded line.\n"
    from magis_ray.actors.code.diffs import file_diff

    junk = [
        ("developer:T1", ev.LLMExchanged(purpose="write_code", model=MODEL, messages=[ev.Message("user", "x")],
                                         prompt_tokens=90_000, completion_tokens=9_000, latency_s=99.0, cost_usd=5.0, task_id="T1")),
        ("developer:T1", ev.LinesLocated(task_id="T1", attempt=2, ranges=[ev.LineRange(1, 3)])),
        ("developer:T1", ev.PatchProposed(task_id="T1", attempt=2, path=STATS, base_blob_id="", edits=[],
                                          new_text="broken\n", diff=file_diff(STATS, read_base(repo_path, base)[STATS][0], "broken\n"))),
        ("manager", ev.TaskDefined(task_id="T3", path="README.md", description="Document it.", base_blob_id=readme[1])),
        ("developer:T3", ev.PatchProposed(task_id="T3", attempt=1, path="README.md", base_blob_id=readme[1], edits=[],
                                          new_text=junk_text, diff=file_diff("README.md", readme[0], junk_text))),
        ("developer:T3", ev.TaskFinished(task_id="T3", status="approved", attempts=1)),
        ("supervisor", ev.RunFailed(reason="node lost", error_type="RayActorError")),
    ]
    resumed = ("supervisor", ev.RunResumed(kept_version=cut, superseded=len(junk)))
    recs = record(pairs[:cut] + junk + [resumed] + pairs[cut:])
    n = len(junk)
    return recs[:cut], recs[cut : cut + n], recs[cut + n], recs[cut + n + 1 :]


def test_run_resumed_supersedes_the_events_after_the_kept_version(calc_repo):
    repo_path, base = calc_repo
    prefix, superseded, resumed, rest = _resume_scenario(repo_path, base)
    full = fold(prefix + superseded + [resumed] + rest)

    # The run's state is as if the superseded events had never been written ...
    kept = fold(prefix + rest)
    for name in ("final_diff", "prediction"):
        assert projections(full)[name] == projections(kept)[name], name
    assert full.status == "finished" and full.failed is None and "T3" not in full.tasks
    assert [p.diff for p in full.tasks["T1"].patches] == [p.diff for p in kept.tasks["T1"].patches]
    # ... but its history stays whole: the timeline shows every event, and what was paid counts.
    assert [r.version for r in full.timeline] == [r.version for r in prefix + superseded + [resumed] + rest]
    ignored = fold(prefix + superseded + rest)
    assert metrics(full)["total"]["cost_usd"] == metrics(ignored)["total"]["cost_usd"]
    assert metrics(full)["total"]["cost_usd"] > metrics(kept)["total"]["cost_usd"] + 4.9
    # The superseded events would show in the state: the test can tell.
    assert "README.md" in final_diff(ignored) and "README.md" not in final_diff(full)


def test_run_resumed_applied_live_and_a_second_resume_to_an_earlier_version(calc_repo):
    repo_path, base = calc_repo
    prefix, superseded, resumed, rest = _resume_scenario(repo_path, base)
    # A second failure in the middle of `rest`, resumed from a version inside `prefix`:
    # everything after that version, the first RunResumed included, is superseded.
    keep = len(prefix) - 2
    second = msgspec.structs.replace(resumed, version=rest[-1].version + 1, position=rest[-1].position + 1,
                                     event=ev.RunResumed(kept_version=keep, superseded=99))
    live = RunView()
    for rec in prefix + superseded + [resumed] + rest + [second]:
        live.apply(rec)
    everything = prefix + superseded + [resumed] + rest + [second]
    assert [r.version for r in live.timeline] == [r.version for r in everything]
    for name in ("final_diff", "prediction"):
        assert projections(live)[name] == projections(fold(prefix[:keep] + [second]))[name], name
    # Kept: T1's first patch; gone: its review, everything later, and the first resume.
    assert live.tasks["T1"].reviews == [] and [p.attempt for p in live.tasks["T1"].patches] == [1]
    assert "max(len(values) - 1, 1)" in final_diff(live) and live.finished is None and live.status == "running"


# --- prediction -------------------------------------------------------------------------------------


def test_prediction_has_exactly_the_swe_bench_keys(calc_repo):
    repo_path, base = calc_repo
    view = fold(record(constructed_run(repo_path, base)))
    p = prediction(view)
    assert set(p) == {"instance_id", "model_name_or_path", "model_patch"}
    assert p == {"instance_id": INSTANCE_ID, "model_name_or_path": f"magis-ray/{MODEL}", "model_patch": final_diff(view)}
    assert set(prediction(view, model_name="mine")) == set(p) and prediction(view, model_name="mine")["model_name_or_path"] == "mine"
    assert json.loads(json.dumps(p)) == p


# --- the golden log of schema v1 ---------------------------------------------------------------------


def golden_logs() -> list[Path]:
    return sorted(GOLDEN.glob("v*_run.jsonl"))


def _contains(actual, expected, where: str = "$") -> None:
    """`actual` holds everything `expected` does; dicts may have more keys (fields added with
    defaults by later schema versions), everything else must be equal."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: {actual!r} is not an object"
        for key, value in expected.items():
            assert key in actual, f"{where}.{key} is missing"
            _contains(actual[key], value, f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{where}: {len(actual)} items, expected {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            _contains(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def test_the_golden_log_decodes_with_the_current_code():
    lines = (GOLDEN / "v1_run.jsonl").read_bytes().splitlines()
    assert len(lines) > 50
    recorded = [decode_recorded(line) for line in lines]
    assert [r.version for r in recorded] == list(range(1, len(lines) + 1))
    assert [r.position for r in recorded] == list(range(1, len(lines) + 1))
    assert {r.run_id for r in recorded} == {"5e1f0c2a9b7d"}
    assert [r.time for r in recorded] == [BASE_TIME + TIME_STEP * i for i in range(len(lines))]
    assert [r.event_id for r in recorded] == [f"{i:032x}" for i in range(1, len(lines) + 1)]
    assert {r.schema_version for r in recorded} == {1}
    assert isinstance(recorded[0].event, ev.RunStarted) and recorded[0].event.schema_version == 1
    assert isinstance(recorded[-1].event, ev.RunFinished)


def test_every_event_type_in_the_golden_log_round_trips():
    seen: dict[str, int] = {}
    for line in (GOLDEN / "v1_run.jsonl").read_bytes().splitlines():
        rec = decode_recorded(line)
        again = encode(rec)
        assert decode_recorded(again) == rec
        _contains(json.loads(again), json.loads(line))  # nothing dropped or changed
        tag = type(rec.event).__name__
        assert json.loads(line)["event"]["type"] == tag
        seen[tag] = seen.get(tag, 0) + 1
    assert len(seen) >= 19, seen


def test_the_golden_logs_hold_every_event_type_of_the_schema():
    """A new event type needs a golden log (a new vN_run.jsonl) that shows it."""
    tags = {cls.__struct_config__.tag for cls in ev.AnyEvent.__args__}
    seen = {json.loads(line)["event"]["type"] for path in golden_logs() for line in path.read_bytes().splitlines()}
    assert tags - seen == set(), f"event types in no golden log: {sorted(tags - seen)}"


def test_the_golden_log_projects_to_the_committed_expectations():
    view = fold(decode_recorded(line) for line in (GOLDEN / "v1_run.jsonl").read_bytes().splitlines())
    assert final_diff(view) == (GOLDEN / "v1_run.diff").read_text()
    expected = json.loads((GOLDEN / "v1_run.audit.json").read_text())
    _contains(json.loads(json.dumps(audit_json(view))), expected)
    assert view.status == "finished" and view.started.instance_id == INSTANCE_ID
    assert prediction(view)["model_patch"] == (GOLDEN / "v1_run.diff").read_text()


def test_the_audit_says_which_sandbox_limits_a_test_run_hit():
    from magis_ray.events.projections.audit import describe
    from magis_ray.events.schema import TestsRan

    run = TestsRan(purpose="check", command="python -m pytest -rA tests", outcome="error", task_id="T1", attempt=2,
                   duration_s=3.5, limits=["process limit reached (1024)", "output cut at 16 MiB (of 2.0 GiB)"])
    line = describe(run)
    assert line.startswith("T1 attempt 2: tests of the patch error (no test result, 3.5s;")
    assert "process limit reached (1024); output cut at 16 MiB (of 2.0 GiB)" in line
    assert "limit" not in describe(TestsRan(purpose="check", command="pytest", outcome="passed", passed=["t"]))
