"""The inspector (`magis-ray serve`, `magis-ray watch`) as a user meets it: a real server process
over a real SQLite store of constructed runs, read with plain HTTP; the compare page against the
replay journal itself; hostile model output from the scripted server; and the terminal watch.
(tests/test_inspector_browser.py drives the pages' JavaScript in a real Chromium.)"""
from __future__ import annotations

import io
import json
import re
import socket
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
from commands import magis
from inspecting import FIXED, REJECTED, RESUMED, get, make_store, page, serve
from waiting import wait_until
from runs import REVIEW_APPROVAL, REVIEW_REJECTION, constructed_run, fixed_new_events, repo_for

from magis_ray.actors.runtime.journal import Divergence, Journal, lanes_of
from magis_ray.cli.divergence import describe_side
from magis_ray.cli.inspector.compare import compare
from magis_ray.cli.inspector.watch import Watcher
from magis_ray.events import schema as ev
from magis_ray.events.codec import new_event
from magis_ray.events.history import effective
from magis_ray.store import open_store
from magis_ray.store.memory import InMemoryStore


class Tags(HTMLParser):
    """The tags a page really has, and its visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parsed(html: str) -> Tags:
    p = Tags()
    p.feed(html)
    return p


# --- the pages --------------------------------------------------------------------------------


def test_the_runs_list_shows_runs_batches_and_gradings(inspector_url):
    body = page(inspector_url)
    for run in (REJECTED, FIXED, RESUMED):
        assert f'data-run="{run}"' in body
    assert "nightly" in body and "1 of 1 ended" in body  # the batch, with its progress
    assert "gold@calc" in body and "1 of 1 graded" in body and "1 of 1</td>" in body  # the grading: resolved 1 of 1
    assert "grading:gold@calc" not in re.findall(r'data-run="([^"]+)"', body)  # a grading is no run


def test_the_runs_list_filters_and_sorts(inspector_url):
    def runs(query: str) -> list[str]:
        return re.findall(r'data-run="([^"]+)"', page(inspector_url + query))

    assert runs("?model=gpt-4o") == [FIXED]
    assert runs("?batch=nightly") == [FIXED]
    assert runs("?status=finished&outcome=patched&instance=calc__calc") == [RESUMED, FIXED, REJECTED]  # newest first
    assert runs("?sort=time&order=asc") == [REJECTED, FIXED, RESUMED]
    assert runs("?status=running") == [] and runs("?outcome=no_patch") == []
    for key in ("cost", "tokens", "duration", "events"):
        assert sorted(runs(f"?sort={key}")) == sorted([REJECTED, FIXED, RESUMED])
    # the tokens column, sorted by tokens, falls
    tokens = [int(t.replace(",", "")) for t in re.findall(r'<td class="num">([\d,]+)</td>\s*<td class="num">\$', page(inspector_url + "?sort=tokens").split('id="runs"')[1])]
    assert len(tokens) == 3 and tokens == sorted(tokens, reverse=True) and len(set(tokens)) == 3
    assert runs("?sort=tokens&order=asc") == runs("?sort=tokens")[::-1]


def test_a_runs_page_shows_the_timeline_plan_tasks_diff_and_memory(inspector_url, inspector_store):
    body = page(f"{inspector_url}runs/{REJECTED[:6]}")  # a unique prefix names the run
    tags = parsed(body)
    text = " ".join(tags.text)
    assert re.search(r'id="status"[^>]*>finished<', body) and ">patched<" in body
    assert re.search(r"stage 1( \(parallel\))?: ", text) and "T1" in text and "T2" in text  # the plan, each task's status beside it
    assert REVIEW_REJECTION in text and REVIEW_APPROVAL in text  # both reviews of T1, under their attempts
    assert body.count('class="badge bad review"') == 1 and body.count('class="badge ok review"') == 1
    assert '<span class="d-del">-    return total / (len(values) - 1)</span>' in body  # a diff rendered line by line
    assert '<span class="d-add">+    return total / len(values)</span>' in body
    assert "Nothing reused from memory; 3 summaries written fresh." in text
    # every decision made with the model links to its exchanges, with tokens, cost and latency
    timeline = body.split('id="timeline"')[1].split("</section>")[0]
    calls = body.split('id="llm"')[1].split("</section>")[0]
    with open_store(str(inspector_store)) as s:
        events = s.read(REJECTED)
    exchanges = [r.version for r in events if isinstance(r.event, ev.LLMExchanged)]
    for section in (timeline, calls):  # beside the decisions they led to, and in the list of every call
        assert sorted(map(int, re.findall(rf'href="/runs/{REJECTED}/exchanges/(\d+)"', section))) == exchanges
    located = next(r for r in events if isinstance(r.event, ev.LinesLocated))
    row = body.split(f'id="v{located.version}"')[1].split("</tr>")[0]
    assert "locate_lines</a>" in row and "700+20 tok" in row and "0.90 s" in row
    # the role filter keeps one role's rows
    qa_only = page(f"{inspector_url}runs/{REJECTED}?role=qa")
    qa_rows = qa_only.split('id="timeline"')[1].split("</section>")[0]
    assert re.findall(r'<span class="lane r-(\w+)">', qa_rows) == ["qa"] * 2  # its two reviews


def test_an_exchange_page_shows_the_prompt_answer_tokens_cost_and_latency(inspector_url, inspector_store):
    with open_store(str(inspector_store)) as s:
        events = s.read(REJECTED)
    rec = next(r for r in events if isinstance(r.event, ev.LLMExchanged) and r.event.purpose == "review_patch")
    body = page(f"{inspector_url}runs/{REJECTED}/exchanges/{rec.version}")
    text = " ".join(parsed(body).text)
    x = rec.event
    assert x.messages[1].content in text and json.loads(x.answer)["comment"] in text
    assert f"{x.prompt_tokens:,} prompt + {x.completion_tokens:,} completion" in text
    assert f"${x.cost_usd:,.4f}" in text and f"{x.latency_s:.2f} s" in text and x.model in text
    assert "Led to:" in text and "attempt 1: sent back" in text  # the decision it led to
    assert get(f"{inspector_url}runs/{REJECTED}/exchanges/1")[0] == 404  # RunStarted is no exchange
    assert get(f"{inspector_url}runs/nosuchrun")[0] == 404


def test_compare_marks_the_first_divergence_as_the_replay_journal_finds_it(inspector_url, inspector_store):
    with open_store(str(inspector_store)) as s:
        left, right = s.read(REJECTED), s.read(FIXED)
    # replay's own mechanism: the second run's events, in order, against the first run's lanes
    journals = {lane: Journal(lane, None, events) for lane, events in lanes_of(
        [r for r in effective(left) if not isinstance(r.event, ev.RunStarted)]).items()}
    with pytest.raises(Divergence) as caught:
        for rec in (r for r in effective(right) if not isinstance(r.event, ev.RunStarted)):
            journal = journals.setdefault(rec.actor, Journal(rec.actor, None, []))
            if isinstance(rec.event, ev.LLMExchanged):
                journal.recorded_exchange(rec.event)
            else:
                journal.emit(rec.event)
    found = compare(left, right)
    row = found.divergence
    assert (row.lane, row.left, row.right.event) == (caught.value.lane, caught.value.expected, caught.value.got)
    assert row.lane == "developer:T2" and row.step == 4
    body = page(f"{inspector_url}compare?a={REJECTED}&b={FIXED}")
    marked = body.split('id="first-divergence"')[1].split("</tr>")[0]
    assert "developer:T2" in marked and "first divergence" in marked and body.count('id="first-divergence"') == 1
    text = " ".join(parsed(body).text)
    assert describe_side(caught.value.expected.event)[:100] in text and describe_side(caught.value.got)[:100] in text
    assert "settings.model" in text and "settings.batch" in text  # their RunStarted differ there
    same = page(f"{inspector_url}compare?a={REJECTED}&b={REJECTED}")
    assert 'id="first-divergence"' not in same and "No divergence" in same
    with open_store(str(inspector_store)) as store:
        events = len(effective(store.read(REJECTED)))
    assert f"reproduces all of A's {events} events" in " ".join(parsed(same).text)
    # the empty page offers the store's runs to pick from
    empty = page(f"{inspector_url}compare")
    assert f"/compare?a={REJECTED}&amp;b=" in empty and f"/compare?a=&amp;b={FIXED}" in empty


def test_search_finds_a_rejecting_review_across_runs(inspector_url):
    body = page(f"{inspector_url}search?q=rejected&type=ReviewIssued")
    results = re.findall(r'<li class="result" data-type="(\w+)">', body)
    assert results == ["ReviewIssued"] * 3  # T1's first review, in each run (approvals are not found)
    assert re.findall(r'run <span class="mono">(\w+)</span>', body) == [RESUMED, FIXED, REJECTED]  # newest first
    assert "<mark>rejected</mark>" in body and "The mean must divide the total" in body
    assert re.findall(r'<li class="result"', page(f"{inspector_url}search?q=%22the+mean+must+divide%22")) != []
    assert "no results" in page(f"{inspector_url}search?q=zzzznothing")


# --- safety ----------------------------------------------------------------------------------------

SCRIPT = '<script>document.title="pwned"</script>'
IMG = "<img src=x onerror=alert(1)>"
CONTROL = "\x1b[2J\x00\x07"  # a terminal's clear-screen, a NUL, a bell


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory) -> tuple[Path, str]:
    """A real run (in-process team, real gateway, the scripted server over HTTP) whose issue and
    model answers carry markup and control characters, with test_hostile.py's bad answers too."""
    from scenarios import MEAN_FIX, calc_issue, make_calc_repo

    from magis_ray.actors.model.gateway import Gateway, GatewayConfig
    from magis_ray.actors.model.scripted_server import Rule, ScriptedServer
    from magis_ray.actors.model.scripted_team import ScriptedTeam
    from magis_ray.actors.runtime.inprocess import LocalLLM, run_in_process

    root = tmp_path_factory.mktemp("hostile")
    repo = root / "calc"
    _, base = make_calc_repo(repo)
    rules = [
        Rule(purpose="summarize_file", json={"summary": f"A module {SCRIPT} {IMG} {CONTROL}"}),
        Rule(purpose="meeting_open", json={"text": f"Let us begin {IMG}"}),
        Rule(purpose="locate_lines", reply=f"I would change the division {SCRIPT}", times=1),  # not JSON: sent back
        Rule(purpose="define_task", json={"needed": True, "task": f"t {IMG}", "new_files": [{"path": "calc/bell\x07.py", "task": "x"}]}, times=1),
        ScriptedTeam({"calc/stats.py": [MEAN_FIX]}, review=lambda path, attempt: (attempt > 1, f"no {IMG} {SCRIPT} {CONTROL}")),
    ]
    issue = calc_issue(repo, base, text=f"mean() is wrong {SCRIPT} {CONTROL}")
    store = open_store(str(root / "store"), create=True)
    with ScriptedServer(rules) as server:
        llm = LocalLLM(Gateway(GatewayConfig(base_url=server.base_url, api_key="sk-hostile-key", model="m", max_retries=1)))
        end = run_in_process(store=store, issue=issue, settings=ev.RunSettings(tests=False, top_k=3, max_review_rounds=2, model="m"),
                             repo_path=str(repo), llm=llm, run_id="hostile1")
        llm.close()
    store.close()
    assert isinstance(end, ev.RunFinished) and end.outcome == "patched"
    return root / "store", "hostile1"


def test_every_model_written_text_is_shown_as_text(hostile_store):
    path, run_id = hostile_store
    with open_store(str(path)) as s:
        events = s.read(run_id)
    pages = ["", f"runs/{run_id}", f"compare?a={run_id}&b={run_id}", "search?q=pwned", "search?q=onerror",
             *(f"runs/{run_id}/exchanges/{r.version}" for r in events if isinstance(r.event, ev.LLMExchanged))]
    with serve(path, OPENAI_API_KEY="sk-hostile-key") as base:
        bodies = {p: page(base + p) for p in pages}
    seen = ""
    for name, body in bodies.items():
        tags = parsed(body)
        scripts = [a for tag, a in tags.tags if tag == "script"]
        assert scripts == [{"src": "/static/inspector.js", "defer": None}], name  # ours, and no other
        assert not [t for t, _ in tags.tags if t == "img"], name
        assert not [(t, k) for t, a in tags.tags for k in a if k.startswith("on")], name
        assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", body), name  # control characters shown as \xNN
        assert "sk-hostile-key" not in body, name
        seen += " ".join(tags.text)
    for hostile in (SCRIPT, IMG, "\\x1b[2J\\x00\\x07", "calc/bell\\x07.py"):
        assert hostile in seen, hostile  # visible, as the text it is
    assert 'document.title="pwned"' in " ".join(parsed(bodies[f"runs/{run_id}"]).text)  # the issue's script, as text


def test_there_is_no_write_endpoint_and_no_foreign_host(inspector_url, inspector_store):
    with open_store(str(inspector_store)) as s:
        before = s.read_all()
    for route in ("", f"runs/{REJECTED}", "compare", "search?q=x", "live", "static/inspector.js", "runs", "admin"):
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            status, _, _ = get(inspector_url + route, method=method)
            assert status in (404, 405), (method, route, status)
    status, headers, _ = get(inspector_url)
    assert "script-src 'self'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"
    # a page another site's script reaches through a rebound DNS name is refused
    assert get(inspector_url, headers={"Host": "attacker.example:80"})[0] == 400
    with open_store(str(inspector_store)) as s:
        assert s.read_all() == before


def test_it_listens_on_loopback_by_default(inspector_store):
    with serve(inspector_store) as base:
        host = re.match(r"http://([^:/]+):(\d+)/", base)
        assert host.group(1) == "127.0.0.1"
        assert page(base)  # and answers there


def test_live_events_name_the_runs_that_change(tmp_path):
    path = make_store(tmp_path)
    with serve(path) as base:
        response = urllib.request.urlopen(f"{base}live?run=late1", timeout=30)
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.readline() == b"retry: 2000\n"
        with open_store(str(path)) as s:
            s.append("other", 0, [new_event(ev.RunStarted(instance_id="x", repo="r", base_commit="c", problem_statement="p"), "cli")])
            s.append("late1", 0, [new_event(ev.RunStarted(instance_id="late", repo="r", base_commit="c", problem_statement="p"), "cli")])
        lines = []
        while not any(line.startswith(b"data:") for line in lines):
            lines.append(response.readline())
        assert b"event: change\n" in lines and lines[-1] == b'data: ["late1"]\n'  # "other" is not the run asked for
        response.close()
        assert 'data-run="late1"' in page(base)


def test_bad_input_is_one_line(tmp_path, inspector_store):
    def run(*args):
        result = magis(*args, without=("MAGIS_STORE",), timeout=60)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        [line] = result.stderr.splitlines()
        return line

    assert "no magis store" in run("serve", "--store", str(tmp_path / "nowhere"))
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    assert "cannot listen on 127.0.0.1:" in run("serve", "--store", str(inspector_store), "--port", str(taken.getsockname()[1]))
    taken.close()
    assert "unknown run: zzz" in run("watch", "zzz", "--store", str(inspector_store))
    assert "give a RUN or --batch NAME" in run("watch", "--store", str(inspector_store))
    assert "no batch nope" in run("watch", "--batch", "nope", "--store", str(inspector_store))


# --- the terminal -----------------------------------------------------------------------------------


class Clock:
    """A clock the watcher sleeps on: each sleep moves time and lets the test append what comes next."""

    def __init__(self, on_sleep):
        self.now, self.sleeps, self.on_sleep = 1_800_000_000.0, 0, on_sleep

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        self.on_sleep(self.sleeps)


def test_watch_follows_a_run_until_it_ends(tmp_path):
    repo, base = repo_for(tmp_path)
    events = fixed_new_events(constructed_run(repo, base))
    store = InMemoryStore()
    store.append("r1", 0, events[:5])
    chunks = [events[i:i + 10] for i in range(5, len(events), 10)]

    def more(n):
        if n <= len(chunks):
            store.append("r1", store.version("r1"), chunks[n - 1])

    clock, out = Clock(more), io.StringIO()
    code = Watcher(store, out, 1.0, now=lambda: clock.now, sleep=clock.sleep, redraw=False).watch_run("r1")
    text = out.getvalue()
    assert code == 0 and clock.sleeps == len(chunks)  # it saw the run grow, and stopped at its end
    assert "T1 attempt 1: sent back  [1 call, 970 tokens, $0.0002]" in text  # a decision, and what its exchange cost
    assert not re.search(r"\w\((s|ies|es)\)", text)  # plural words spelt out, as the pages have them
    assert "run r1  calc__calc-2  [finished] patched" in text and "T2 calc/texts.py: failed" in text
    assert "attempt 1: sent back (Still wrong" in text and "attempt 2: approved" in text
    assert "reviews: 1 approved, 1 sent back" in text


def test_watch_names_a_quiet_phase_again_with_how_long_it_has_lasted():
    store = InMemoryStore()
    started = ev.RunStarted(instance_id="i-1", repo="r", base_commit="c" * 40, problem_statement="x",
                            settings=ev.RunSettings(tests=True))
    store.append("env", 0, [new_event(started, "supervisor")])

    def finish_after_a_minute(n):
        if n == 7:
            store.append("env", 1, [new_event(ev.RunFinished(outcome="no_patch"), "supervisor")])

    clock, out = Clock(finish_after_a_minute), io.StringIO()
    assert Watcher(store, out, 10.0, now=lambda: clock.now, sleep=clock.sleep, redraw=False).watch_run("env") == 0
    lines = out.getvalue().splitlines()
    assert "  preparing the test environment" in lines
    assert "  preparing the test environment (30 s)" in lines and "  preparing the test environment (1 min 0 s)" in lines
    out = io.StringIO()
    store.append("live", 0, [new_event(started, "supervisor")])
    clock = Clock(lambda n: store.append("live", 1, [new_event(ev.RunFinished(outcome="no_patch"), "supervisor")]) if n == 4 else None)
    Watcher(store, out, 10.0, now=lambda: clock.now, sleep=clock.sleep, redraw=True).watch_run("live")
    assert "stage: preparing the test environment (30 s)" in out.getvalue()  # the redrawn view counts too


def test_watch_says_when_a_run_failed_or_lost_its_driver(tmp_path):
    store = InMemoryStore()
    started = ev.RunStarted(instance_id="i-1", repo="r", base_commit="c" * 40, problem_statement=f"x {CONTROL}")
    store.append("dead", 0, [new_event(started, "supervisor")])
    store.take_lease("dead", "driver-1", "host-a", 123, ttl_s=30, now=1_799_999_990.0)  # runs out at ...020
    clock, out = Clock(lambda n: None), io.StringIO()
    assert Watcher(store, out, 10.0, now=lambda: clock.now, sleep=clock.sleep, redraw=False).watch_run("dead") == 1
    assert clock.sleeps == 2  # live until its lease ran out (20 s later, unrenewed)
    assert "run dead stalled: no driver holds it any more; resume it with `magis-ray resume dead`" in out.getvalue()
    store.append("failed", 0, [new_event(started, "supervisor"), new_event(ev.RunFailed(reason=f"boom {CONTROL}"), "supervisor")])
    out = io.StringIO()
    assert Watcher(store, out, 1.0, redraw=True).watch_run("failed") == 1
    assert "failed: boom \\x1b[2J\\x00\\x07" in out.getvalue()  # the terminal gets the escape sequence as text
    assert "\x1b[2J\x00" not in out.getvalue().replace("\x1b[H\x1b[2J", "")  # only our own redraw


def test_watch_follows_a_batch_until_every_run_has_ended(tmp_path):
    from inspecting import with_settings

    repo, base = repo_for(tmp_path)
    store = InMemoryStore()
    runs = {f"b{i}": fixed_new_events(with_settings(constructed_run(repo, base, fix_texts=i == 2), batch="nightly"),
                                       start=1_700_000_000.0 + 1000 * i) for i in (1, 2)}
    store.append("b1", 0, runs["b1"][:20])
    store.append("elsewhere", 0, fixed_new_events(constructed_run(repo, base)))  # no run of the batch
    store.take_lease("batch:nightly:calc__calc-2", "driver", "h", 1, ttl_s=30, now=1_800_000_000.0)

    def more(n):
        if n == 1:
            store.append("b1", 20, runs["b1"][20:])
            store.append("b2", 0, runs["b2"])
        if n == 3:
            store.release_lease("batch:nightly:calc__calc-2", "driver")  # the driver is done

    clock, out = Clock(more), io.StringIO()
    code = Watcher(store, out, 1.0, now=lambda: clock.now, sleep=clock.sleep, redraw=False).watch_batch("nightly")
    text = out.getvalue()
    assert code == 0 and clock.sleeps >= 3  # it waited for the driver, then for the grace period
    assert "run b1 calc__calc-2: running" in text and "run b1 calc__calc-2: finished patched" in text
    assert "batch nightly: 2 of 2 runs ended, 0 running, 0 failed, 2 patched" in text
    assert not re.search(r"\w\((s|ies|es)\)", text)
    assert "elsewhere" not in text


def test_the_watch_command_on_a_finished_run(inspector_store):
    result = magis("watch", REJECTED[:8], "--store", inspector_store, without=("MAGIS_STORE",), timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"run {REJECTED}  calc__calc-2  [finished] patched" in result.stdout
    assert "T1 attempt 2: approved" in result.stdout


# --- the read models ---------------------------------------------------------------------------------


def test_a_diff_is_split_by_kind_counting_each_hunks_lines():
    from magis_ray.events.projections.inspection import diff_lines

    diff = ("diff --git a/q.sql b/q.sql\n--- a/q.sql\n+++ b/q.sql\n@@ -1,3 +1,3 @@\n select 1;\n--- an old comment\n"
            "+-- a new comment\n select 2;\n\\ No newline at end of file\n--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1 @@\n+new\n")
    assert [kind for kind, _ in diff_lines(diff)] == [
        "file", "file", "file", "hunk", "ctx", "del", "add", "ctx", "ctx", "file", "file", "hunk", "add"]


def test_the_catalog_folds_runs_batches_and_gradings_incrementally(tmp_path):
    from inspecting import grading_events, with_settings

    from magis_ray.events.projections.catalog import Catalog

    repo, base = repo_for(tmp_path)
    store = InMemoryStore()
    events = fixed_new_events(with_settings(constructed_run(repo, base), batch="b", model="m1"))
    store.append("r1", 0, events[:30])
    store.append("grading:g", 0, grading_events())
    catalog = Catalog()
    assert catalog.apply_all(store.read_all()) == {"r1", "grading:g"}
    run = catalog.runs["r1"]
    assert (run.status, run.batch, run.model, run.events) == ("running", "b", "m1", 30)
    assert catalog.batch("b").ended == 0 and catalog.gradings["g"].status == "finished"
    store.append("r1", 30, events[30:])
    assert catalog.apply_all(store.read_all(catalog.position)) == {"r1"}
    assert (run.status, run.outcome, run.stage, run.rejections, run.approvals) == ("finished", "patched", "finished", 1, 1)
    assert run.calls == sum(isinstance(e.event, ev.LLMExchanged) for e in events)
    assert run.tasks == {"T1": "approved", "T2": "failed"} and catalog.batch("b").patched == 1


# --- what a user reads ----------------------------------------------------------------------------------


def test_a_failed_task_says_it_failed_and_why(inspector_url):
    body = page(f"{inspector_url}runs/{REJECTED}")
    t2 = body.split('id="task-T2"')[1].split("</article>")[0]
    text = " ".join(parsed(t2).text)
    assert "No patch yet" not in text  # T2 failed: it is not waiting for one
    assert "Failed before any patch: attempt 1: locate_lines: no usable answer after 2 tries (no line range was given)" in text


def test_plural_words_are_spelt_out_and_no_exchange_row_is_left_bare(inspector_url, inspector_store):
    body = page(f"{inspector_url}runs/{REJECTED}")
    text = " ".join(parsed(body).text)
    assert not re.search(r"\w\((s|ies|es)\)", text), re.findall(r"\S+\((?:s|ies|es)\)", text)
    with open_store(str(inspector_store)) as s:
        calls = sum(isinstance(r.event, ev.LLMExchanged) for r in s.read(REJECTED))
    assert f"{calls} calls" in text
    timeline = body.split('id="timeline"')[1].split("</section>")[0]
    assert "LLMExchanged" not in timeline and "no decision yet" not in timeline
    # the Manager's per-file questions show as the task definitions they served
    defined = re.findall(r'<td class="small muted">TaskDefined</td>.*?</tr>', timeline, re.S)
    assert len(defined) == 2 and all(row.count("define_task</a>") == 2 for row in defined[:1])
    for name in ("", "compare", f"compare?a={REJECTED}&b={FIXED}", "search?q=rejected"):
        assert not re.search(r"\w\((s|ies|es)\)", " ".join(parsed(page(inspector_url + name)).text)), name


def test_the_baseline_is_no_attempt():
    from magis_ray.events.projections.audit import describe

    baseline = ev.TestsRan(purpose="baseline", command="pytest tests", outcome="passed", task_id="T1", passed=["t"])
    check = ev.TestsRan(purpose="check", command="pytest tests", outcome="passed", task_id="T1", attempt=2, passed=["t"])
    assert describe(baseline).startswith("T1: regression tests, baseline at the base commit passed")
    assert "attempt 0" not in describe(baseline)
    assert describe(check).startswith("T1 attempt 2: tests of the patch passed")


def test_the_runs_list_colours_each_outcome(tmp_path):
    path = make_store(tmp_path)
    with open_store(str(path)) as s:
        s.append("dead1", 0, [new_event(ev.RunStarted(instance_id="d", repo="r", base_commit="c", problem_statement="p"), "cli"),
                              new_event(ev.RunFailed(reason="the model endpoint refused the connection"), "supervisor")])
    with serve(path) as base:
        body = page(base)
    rows = dict(re.findall(r'<tr data-run="(\w+)">(.*?)</tr>', body, re.S))
    assert '<span class="badge oc-patched">patched</span>' in rows[FIXED]
    assert '<span class="badge oc-failed"' in rows["dead1"] and "the model endpoint refused the connection" in rows["dead1"]


def test_search_pages_through_more_than_fifty_results(tmp_path):
    path = make_store(tmp_path)
    with open_store(str(path)) as s:
        s.append("many1", 0, [new_event(ev.RunStarted(instance_id="m", repo="r", base_commit="c", problem_statement="p"), "cli"),
                              *(new_event(ev.StepFailed(purpose="locate_lines", reason=f"zebra number {i}"), "developer:T1")
                                for i in range(120))])
    with serve(path) as base:
        seen, link, pages = [], "search?q=zebra", []
        while link:
            body = page(base + ("search" + link if link.startswith("?") else link))
            pages.append(re.search(r'id="result-count">(.*?)</p>', body, re.S).group(1))
            seen += [int(n) for n in re.findall(r"zebra</mark> number (\d+)", body)]
            found = re.search(r'class="next-page" href="([^"]+)"', body)
            link = found.group(1).replace("&amp;", "&") if found else ""
    assert seen == list(range(119, -1, -1))  # every result once, newest first
    assert len(pages) == 3 and pages[0].startswith("results 1 to 50, more on the next page")
    assert pages[2].startswith("results 101 to 120 ·") and "newest results" in pages[2]


def test_a_live_run_says_what_it_is_doing_and_keeps_its_issue_as_written(tmp_path):
    from magis_ray.actors.runtime.issue import read_issue

    path = make_store(tmp_path)
    statement = read_issue(b"# mean() is wrong\n\nIt divides by n - 1.\n", "issue.md").problem_statement
    started = ev.RunStarted(instance_id="live", repo="r", base_commit="c" * 40, problem_statement=statement,
                            settings=ev.RunSettings(tests=True))
    with open_store(str(path)) as s:
        s.append("live1", 0, [new_event(started, "supervisor")])
    with serve(path) as base:
        body = page(f"{base}runs/live1")
        doing = " ".join(parsed(body.split('id="doing"')[1].split("</p>")[0]).text)
        assert "preparing the test environment" in doing and "run started for live" in doing
        assert "mean() is wrong\n\nIt divides by n - 1." in " ".join(parsed(body).text)
        with open_store(str(path)) as s:
            s.append("live1", 1, [new_event(ev.TestsRan(purpose="prepare", command="", outcome="passed", output="ready"), "qa")])
        wait_until(lambda: "custodian: ranking files" in page(f"{base}runs/live1").split('id="doing"')[1].split("</p>")[0],
                   "the header moves on once the environment is prepared")
        assert 'id="doing"' not in page(f"{base}runs/{REJECTED}")  # a finished run does nothing
