"""The inspector (`magis-ray serve`, `magis-ray watch`) as a user meets it: a real server process
over a real SQLite store of constructed runs, read with plain HTTP; the compare page against the
replay journal itself; hostile model output from the scripted server; and the terminal watch.
(tests/test_inspector_browser.py drives the pages' JavaScript in a real Chromium.)"""
from __future__ import annotations

import io
import json
import re
import socket
import subprocess
import threading
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest
from inspecting import FIXED, MAGIS, REJECTED, RESUMED, env, get, grading_events, make_store, page, serve
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


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = make_store(tmp_path_factory.mktemp("inspector"))
    with open_store(str(path)) as s:
        s.append("grading:gold@calc", 0, grading_events())
    return path


@pytest.fixture(scope="module")
def url(store):
    with serve(store) as base:
        yield base


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


def test_the_runs_list_shows_runs_batches_and_gradings(url):
    body = page(url)
    for run in (REJECTED, FIXED, RESUMED):
        assert f'data-run="{run}"' in body
    assert "nightly" in body and "1 of 1 ended" in body  # the batch, with its progress
    assert "gold@calc" in body and "1 of 1 graded" in body and "1 of 1</td>" in body  # the grading: resolved 1 of 1
    assert "grading:gold@calc" not in re.findall(r'data-run="([^"]+)"', body)  # a grading is no run


def test_the_runs_list_filters_and_sorts(url):
    def runs(query: str) -> list[str]:
        return re.findall(r'data-run="([^"]+)"', page(url + query))

    assert runs("?model=gpt-4o") == [FIXED]
    assert runs("?batch=nightly") == [FIXED]
    assert runs("?status=finished&outcome=patched&instance=calc__calc") == [RESUMED, FIXED, REJECTED]  # newest first
    assert runs("?sort=time&order=asc") == [REJECTED, FIXED, RESUMED]
    assert runs("?status=running") == [] and runs("?outcome=no_patch") == []
    for key in ("cost", "tokens", "duration", "events"):
        assert sorted(runs(f"?sort={key}")) == sorted([REJECTED, FIXED, RESUMED])
    # the tokens column, sorted by tokens, falls
    tokens = [int(t.replace(",", "")) for t in re.findall(r'<td class="num">([\d,]+)</td>\s*<td class="num">\$', page(url + "?sort=tokens").split('id="runs"')[1])]
    assert len(tokens) == 3 and tokens == sorted(tokens, reverse=True) and len(set(tokens)) == 3
    assert runs("?sort=tokens&order=asc") == runs("?sort=tokens")[::-1]


def test_a_runs_page_shows_the_timeline_plan_tasks_diff_and_memory(url, store):
    body = page(f"{url}runs/{REJECTED[:6]}")  # a unique prefix names the run
    tags = parsed(body)
    text = " ".join(tags.text)
    assert re.search(r'id="status"[^>]*>finished<', body) and ">patched<" in body
    assert "stage 1: " in text and "T1" in text and "T2" in text  # the plan, each task's status beside it
    assert REVIEW_REJECTION in text and REVIEW_APPROVAL in text  # both reviews of T1, under their attempts
    assert body.count('class="badge bad review"') == 1 and body.count('class="badge ok review"') == 1
    assert '<span class="d-del">-    return total / (len(values) - 1)</span>' in body  # a diff rendered line by line
    assert '<span class="d-add">+    return total / len(values)</span>' in body
    assert "Nothing reused from memory; 3 summary(ies) written fresh." in text
    # every decision made with the model links to its exchanges, with tokens, cost and latency
    links = re.findall(rf'href="/runs/{REJECTED}/exchanges/(\d+)"', body)
    with open_store(str(store)) as s:
        events = s.read(REJECTED)
    exchanges = [r.version for r in events if isinstance(r.event, ev.LLMExchanged)]
    assert sorted(map(int, links)) == exchanges
    located = next(r for r in events if isinstance(r.event, ev.LinesLocated))
    row = body.split(f'id="v{located.version}"')[1].split("</tr>")[0]
    assert "locate_lines</a>" in row and "700+20 tok" in row and "0.90 s" in row
    # the role filter keeps one role's rows
    qa_only = page(f"{url}runs/{REJECTED}?role=qa")
    assert re.findall(r'<span class="lane r-(\w+)">', qa_only.split('id="timeline"')[1]) == ["qa"] * 2  # its two reviews


def test_an_exchange_page_shows_the_prompt_answer_tokens_cost_and_latency(url, store):
    with open_store(str(store)) as s:
        events = s.read(REJECTED)
    rec = next(r for r in events if isinstance(r.event, ev.LLMExchanged) and r.event.purpose == "review_patch")
    body = page(f"{url}runs/{REJECTED}/exchanges/{rec.version}")
    text = " ".join(parsed(body).text)
    x = rec.event
    assert x.messages[1].content in text and json.loads(x.answer)["comment"] in text
    assert f"{x.prompt_tokens:,} prompt + {x.completion_tokens:,} completion" in text
    assert f"${x.cost_usd:,.4f}" in text and f"{x.latency_s:.2f} s" in text and x.model in text
    assert "Led to:" in text and "attempt 1: sent back" in text  # the decision it led to
    assert get(f"{url}runs/{REJECTED}/exchanges/1")[0] == 404  # RunStarted is no exchange
    assert get(f"{url}runs/nosuchrun")[0] == 404


def test_compare_marks_the_first_divergence_as_the_replay_journal_finds_it(url, store):
    with open_store(str(store)) as s:
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
    body = page(f"{url}compare?a={REJECTED}&b={FIXED}")
    marked = body.split('id="first-divergence"')[1].split("</tr>")[0]
    assert "developer:T2" in marked and "first divergence" in marked and body.count('id="first-divergence"') == 1
    text = " ".join(parsed(body).text)
    assert describe_side(caught.value.expected.event)[:100] in text and describe_side(caught.value.got)[:100] in text
    assert "settings.model" in text and "settings.batch" in text  # their RunStarted differ there
    same = page(f"{url}compare?a={REJECTED}&b={REJECTED}")
    assert 'id="first-divergence"' not in same and "No divergence" in same


def test_search_finds_a_rejecting_review_across_runs(url):
    body = page(f"{url}search?q=rejected&type=ReviewIssued")
    results = re.findall(r'<li class="result" data-type="(\w+)">', body)
    assert results == ["ReviewIssued"] * 3  # T1's first review, in each run (approvals are not found)
    assert re.findall(r'run <span class="mono">(\w+)</span>', body) == [RESUMED, FIXED, REJECTED]  # newest first
    assert "<mark>rejected</mark>" in body and "The mean must divide the total" in body
    assert re.findall(r'<li class="result"', page(f"{url}search?q=%22the+mean+must+divide%22")) != []
    assert "0 result(s)" in page(f"{url}search?q=zzzznothing")
