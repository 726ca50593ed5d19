"""The MAGIS team on real Ray: the two-task plan runs in parallel, and an error crosses actors as
itself. The team's own logic, the same Team on Ray or off it, in this process (tests/teamruns.py):
a later stage waits for the one before, the review loop feeds the QA's comment back and stops at its
limit, and the Custodian's memory makes a later issue on a later commit cheaper."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from checks import assert_consistent_log, assert_diff_applies
from gitfixtures import commit_files
from scenarios import BOTH_ISSUE, MEAN_FIX, SHOUT_FIX, STATS, calc_issue
from teamruns import run_team, settings_for
from waiting import WaitTimedOut, wait_until

from magis_ray.actors.runtime.deployment import run_issue
from magis_ray.actors.model.gateway import GatewayConfig
from magis_ray.actors.model.scripted_server import ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.events.projections import fold, metrics
from magis_ray.events.schema import FileSummarized, LLMExchanged, PlanMade, ReviewIssued, RunFinished, RunSettings, TaskFinished
from magis_ray.store import open_store

pytestmark = pytest.mark.usefixtures("ray_session")


@dataclass
class InStep(ScriptedTeam):
    """The scripted team, which answers each of the `paired` calls only once every one of `tasks` has
    asked it (or a generous while has passed): two tasks' calls worked on at once overlap, however
    late a busy machine starts one of their actors; worked on one after the other, they cannot."""
    tasks: tuple[str, ...] = ()
    paired: tuple[str, ...] = ()
    _asked: dict[str, set[str]] = field(default_factory=dict)

    def __call__(self, request):
        if request.purpose in self.paired:
            with self._lock:
                self._asked.setdefault(request.purpose, set()).add(request.task)
            try:
                wait_until(lambda: self._asked[request.purpose] >= set(self.tasks), f"every task asks {request.purpose}")
            except WaitTimedOut:
                pass  # answered alone: the calls do not overlap, and the test says so
        return super().__call__(request)


def submit(server, store_path, issue, repo_path, run_id, **settings):
    end = run_issue(
        store_path=str(store_path), issue=issue, settings=RunSettings(tests=False, **{"top_k": 4, **settings}), repo_path=str(repo_path),
        gateway_config=GatewayConfig(base_url=server.base_url, api_key="k", model="scripted", backoff_base_s=0.01),
        run_id=run_id,
    )
    with open_store(str(store_path)) as store:
        events = store.read(run_id)
    assert_consistent_log(events)
    return end, events


def in_process(server, store_path, issue, repo_path, run_id, **settings):
    """The same run as submit()'s, the team in this process."""
    run = run_team(issue, settings_for(repo_path, base_url=server.base_url, model="scripted", tests="off",
                                       **{"top_k": 4, **settings}), store_path, run_id)
    assert_consistent_log(run.events)
    return run.end, run.events


# A Developer's calls and its QA Engineer's review.
TASK_CALLS = ("design_qa", "locate_lines", "write_code", "review_patch")


def exchanges(events, lane):
    return [(r.time - r.event.latency_s, r.time) for r in events if r.actor == lane and isinstance(r.event, LLMExchanged)]


def test_two_tasks_in_one_stage_run_in_parallel(calc_repo, tmp_path):
    repo_path, base = calc_repo
    team = InStep({"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]}, tasks=("T1", "T2"),
                  paired=("design_qa", "locate_lines", "write_code"))
    with ScriptedServer(team) as server:
        end, events = submit(server, tmp_path / "store", calc_issue(repo_path, base, BOTH_ISSUE), repo_path, "par")
    assert isinstance(end, RunFinished) and end.files_changed == ["calc/stats.py", "calc/texts.py"]
    [plan] = [r.event for r in events if isinstance(r.event, PlanMade)]
    assert plan.stages == [["T1", "T2"]]
    one, two = exchanges(events, "developer:T1"), exchanges(events, "developer:T2")
    assert len(one) == len(two) == 3  # design_qa, locate_lines, write_code
    # each developer's calls overlap the other's: they were in flight at the same time
    overlapping = [(a, b) for a in one for b in two if a[0] < b[1] and b[0] < a[1]]
    assert len(overlapping) >= 2, (one, two)
    assert_diff_applies(events, repo_path, base, tmp_path / "work")


def test_sequential_plan_runs_stage_after_stage(calc_repo, tmp_path):
    repo_path, base = calc_repo
    # the tasks' calls take a while: a second stage that did not wait would start within the first
    team = ScriptedTeam(
        {"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]}, delay_s=0.2, slow=TASK_CALLS,
        stages=[["calc/stats.py"], ["calc/texts.py"]],
    )
    with ScriptedServer(team) as server:
        end, events = in_process(server, tmp_path / "store", calc_issue(repo_path, base, BOTH_ISSUE), repo_path, "seq")
    t1_done = max(r.time for r in events if r.actor in ("developer:T1", "qa:T1"))
    t2_start = min(start for start, _ in exchanges(events, "developer:T2"))
    assert t2_start >= t1_done


def test_a_rejected_patch_is_redone_with_the_comment(calc_repo, tmp_path):
    repo_path, base = calc_repo
    comment = "Divide by len(values) itself; keep the loop as it is."
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX]}, review=lambda path, attempt: (attempt >= 2, comment if attempt < 2 else "Good."))
    with ScriptedServer(team) as server:
        end, events = in_process(server, tmp_path / "store", calc_issue(repo_path, base), repo_path, "loop")
    reviews = [r.event for r in events if isinstance(r.event, ReviewIssued)]
    assert [(r.attempt, r.approved) for r in reviews] == [(1, False), (2, True)]
    second_prompts = [
        r.event for r in events if isinstance(r.event, LLMExchanged) and r.actor == "developer:T1"
        and r.event.purpose in ("locate_lines", "write_code")
    ][2:]
    assert len(second_prompts) == 2 and all(comment in x.messages[-1].content for x in second_prompts)
    [finished] = [r.event for r in events if isinstance(r.event, TaskFinished)]
    assert finished.status == "approved" and finished.attempts == 2


def test_the_review_loop_stops_at_the_iteration_limit(calc_repo, tmp_path):
    repo_path, base = calc_repo
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX]}, review=lambda path, attempt: (False, "Still wrong."))
    with ScriptedServer(team) as server:
        end, events = in_process(server, tmp_path / "store", calc_issue(repo_path, base), repo_path, "limit", max_review_rounds=2)
        assert server.count("review_patch") == 2
    [finished] = [r.event for r in events if isinstance(r.event, TaskFinished)]
    assert finished.status == "unapproved" and finished.attempts == 2
    # the last patch still stands: the run is patched, and the diff applies
    assert isinstance(end, RunFinished) and end.outcome == "patched"
    assert assert_diff_applies(events, repo_path, base, tmp_path / "work")


def test_memory_reuses_summaries_on_a_later_commit(calc_repo, tmp_path):
    import pygit2

    repo_path, base = calc_repo
    later = commit_files(
        pygit2.Repository(str(repo_path)),
        {"calc/stats.py": STATS + "\n\ndef total(values):\n    return sum(values)\n"},
        "stats: add total()",
    )
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]})
    store = tmp_path / "store"
    with ScriptedServer(team) as server:
        _, first = in_process(server, store, calc_issue(repo_path, base, BOTH_ISSUE), repo_path, "first")
        _, second = in_process(server, store, calc_issue(repo_path, later, BOTH_ISSUE, "calc__calc-2"), repo_path, "second")
    sources = {r.event.path: r.event.source for r in second if isinstance(r.event, FileSummarized)}
    assert sources["calc/stats.py"] == "diff" and sources["calc/texts.py"] == "memory"
    assert {r.event.source for r in first if isinstance(r.event, FileSummarized)} == {"fresh"}
    custodian_tokens = [metrics(fold(run))["by_role"]["custodian"]["prompt_tokens"] for run in (first, second)]
    assert custodian_tokens[1] < custodian_tokens[0], custodian_tokens


def test_an_error_arrives_as_itself_across_two_actors():
    """What a role raised reaches the Team as itself, after crossing two processes (as a QA
    Engineer's error crosses its Developer to the supervisor), not as the RayTaskError that carried it."""
    import ray

    from magis_ray.actors.runtime.services import result_of

    @ray.remote(num_cpus=0)
    def refuse():
        raise LookupError("no summary for <calc/stats.py>")

    @ray.remote(num_cpus=0)
    def ask():
        return result_of(refuse.remote())

    with pytest.raises(LookupError) as raised:
        result_of(ask.remote())
    assert type(raised.value) is LookupError and str(raised.value) == "no summary for <calc/stats.py>"
    assert isinstance(raised.value.__cause__, ray.exceptions.RayTaskError)  # its remote traceback is kept
