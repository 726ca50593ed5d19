"""The HTML audit page (`magis-ray audit RUN --format html`; cli/pages/ renders the
run's audit JSON with the inspector's templates in their standalone mode): one self-contained page
that escapes every model-written text, parses cleanly, shows each part of a run, and, opened in a
real headless Chromium, runs no injected script, logs no console error and renders a non-trivial
screenshot."""
from __future__ import annotations

import difflib
import re
import shutil
import struct
import subprocess
import sys
import tomllib
from html import escape as dom_escape
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path

import msgspec
import pytest
from markupsafe import escape as markup_escape

from magis_ray.events import schema as ev
from magis_ray.events.codec import decode_recorded
from magis_ray.cli.pages import audit_page
from magis_ray.events.projections import RunView, audit_json, final_diff, fold
from magis_ray.events.projections.audit import describe

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden" / "v1_run.jsonl"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
NO_CHROMIUM = "chromium not installed: apt-get install chromium"

# Hostile model output, spread over every kind of model-written text.
SCRIPT = '<script>document.title="pwned"</script>'
IMG = "<img src=x onerror=alert(1)>"
BOLD = "<b>bold</b>"
HOSTILE = (SCRIPT, IMG, BOLD)
T0 = 1_700_000_000.0
RUN_ID = "run-html-1"
TITLE = "MAGIS audit: web__page-7"

BASE_TEXT = '''def page(name):
    """The greeting page."""
    return "<p>Hello " + name + "</p>"


def footer():
    return "<footer>bye</footer>"
'''
WRONG_TEXT = BASE_TEXT.replace('"<p>Hello " + name + "</p>"', '"<p>Hello " + name.upper() + "</p>"')
FIXED_TEXT = BASE_TEXT.replace('return "<p>Hello " + name + "</p>"', 'return "<p>Hello " + html.escape(name) + "</p>"')
PATH = "web/page.py"


def unified(before: str, after: str, path: str = PATH) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}"))


def exchange(purpose: str, prompt: str, answer: str, *, task_id: str = "", error: str = "", tokens=(100, 20), latency=0.5, cost=0.0001):
    return ev.LLMExchanged(
        purpose=purpose, model="gpt-4o-mini",
        messages=[ev.Message("system", f"You are on a team ({purpose})."), ev.Message("user", prompt)],
        answer=answer, error=error, prompt_tokens=tokens[0], completion_tokens=tokens[1],
        latency_s=latency, cost_usd=cost, task_id=task_id,
    )


def hostile_events(finished: bool = True) -> list[ev.Recorded]:
    settings = ev.RunSettings(tests=False, top_k=2, use_memory=False, model="gpt-4o-mini")
    pairs: list[tuple[str, ev.AnyEvent]] = [
        ("supervisor", ev.RunStarted(
            instance_id="web__page-7", repo="web/page", base_commit="0123456789abcdef0123456789abcdef01234567",
            problem_statement=f"page() does not escape the name: a name like {SCRIPT} runs.",
            hints_text=f"hint: see {IMG}", settings=settings)),
        ("custodian", ev.FilesRanked(candidates=[ev.RankedFile(PATH, 3.25, "b" * 40), ev.RankedFile("README.md", 1.5, "c" * 40)], files_total=9)),
        (f"custodian:{PATH}", exchange("summarize_file", f"Summarize {PATH}:\n{BASE_TEXT}", f'{{"summary": "renders {BOLD}"}}', tokens=(300, 40), latency=1.25, cost=0.0002)),
        (f"custodian:{PATH}", ev.FileSummarized(path=PATH, blob_id="b" * 40, summary=f"Builds HTML pages {BOLD} {SCRIPT}")),
        (f"custodian:{PATH}", ev.FileJudged(path=PATH, relevant=True, reason=f"it concatenates {IMG} unescaped")),
        ("custodian:README.md", ev.FileJudged(path="README.md", relevant=False, reason="docs only")),
        ("custodian", ev.FilesLocated(paths=[PATH])),
        ("manager", ev.TaskDefined(task_id="T1", path=PATH, description=f"Escape the name in page(): {SCRIPT}", base_blob_id="b" * 40)),
        ("manager:T1", ev.DeveloperRecruited(task_id="T1", name="Ada <i>Lovelace</i>", profile=f"Careful web developer {BOLD}")),
        ("manager", ev.MeetingUtterance(turn=1, speaker="Manager", text="T1 escapes the name.")),
        ("developer:T1:meeting", ev.MeetingUtterance(turn=2, speaker="Ada <i>Lovelace</i>", text=f"I will not write {SCRIPT} nor {IMG} raw.")),
        ("manager", ev.PlanMade(stages=[["T1"]], rationale=f"one task {BOLD}")),
        ("developer:T1", ev.QAAssigned(task_id="T1", name="Edsger", profile="A strict reviewer")),
        ("developer:T1", exchange("locate_lines", f"Where? {SCRIPT}", '{"ranges": [[3, 3]]}', task_id="T1", tokens=(400, 10), latency=0.75, cost=0.0003)),
        ("developer:T1", ev.LinesLocated(task_id="T1", attempt=1, ranges=[ev.LineRange(3, 3)])),
        ("developer:T1", ev.PatchProposed(task_id="T1", attempt=1, path=PATH, base_blob_id="b" * 40,
                                          edits=[ev.Edit(ev.LineRange(3, 3), '    return "<p>Hello " + name.upper() + "</p>"\n')],
                                          new_text=WRONG_TEXT, diff=unified(BASE_TEXT, WRONG_TEXT))),
        ("qa:T1", exchange("review_patch", f"Review:\n{unified(BASE_TEXT, WRONG_TEXT)}", f'{{"approved": false, "comment": "{BOLD}"}}', task_id="T1", tokens=(500, 30), latency=1.5, cost=0.0004)),
        ("qa:T1", ev.ReviewIssued(task_id="T1", attempt=1, approved=False, comment=f"Upper-casing is no escaping: {BOLD} still renders bold.")),
        ("developer:T1", ev.LinesLocated(task_id="T1", attempt=2, ranges=[ev.LineRange(3, 3)])),
        ("developer:T1", exchange("write_code", f"Fix it {IMG}", "", task_id="T1", error=f"answer is not the JSON asked for: {SCRIPT}", tokens=(0, 0), latency=2.0, cost=0.0)),
        ("developer:T1", ev.StepFailed(purpose="write_code", reason=f"no usable answer: {SCRIPT}", task_id="T1", path=PATH, fallback=f"retried {BOLD}")),
        ("developer:T1", ev.PatchProposed(task_id="T1", attempt=2, path=PATH, base_blob_id="b" * 40,
                                          edits=[ev.Edit(ev.LineRange(3, 3), '    return "<p>Hello " + html.escape(name) + "</p>"\n')],
                                          new_text=FIXED_TEXT, diff=unified(BASE_TEXT, FIXED_TEXT))),
        ("qa:T1", ev.ReviewIssued(task_id="T1", attempt=2, approved=True, comment="Escaped now.")),
        ("developer:T1", ev.TaskFinished(task_id="T1", status="approved", attempts=2)),
    ]
    if finished:
        pairs.append(("supervisor", ev.RunFinished(outcome="patched", files_changed=[PATH], summary=f"T1 approved {IMG}")))
    else:
        pairs.append(("supervisor", ev.RunFailed(reason=f"model unreachable {SCRIPT}", error_type="APIConnectionError")))
    return [
        ev.Recorded(run_id=RUN_ID, version=i, position=i, time=T0 + 0.75 * (i - 1), actor=actor, event_id=f"e{i:04d}", event=event)
        for i, (actor, event) in enumerate(pairs, 1)
    ]


def escape(text: str) -> str:
    """As the page escapes: Jinja2's autoescape (markupsafe)."""
    return str(markup_escape(text))


def audit_html(view: RunView) -> str:
    return audit_page(audit_json(view))


@pytest.fixture(scope="module")
def view() -> RunView:
    return fold(hostile_events())


@pytest.fixture(scope="module")
def page(view) -> str:
    return audit_html(view)


# --- a strict parse of the page ---------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "main", "nav", "section", "article", "footer", "h1", "h2",
    "h3", "h4", "ol", "ul", "li",
    "p", "a", "b", "i", "small", "code", "pre", "span", "div", "dl", "dt", "dd", "table", "thead", "tbody", "tr",
    "th", "td", "details", "summary", "svg", "rect", "text", "title",
}


class Strict(HTMLParser):
    """Collects every tag and attribute and checks that elements nest and close properly."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'} at {self.getpos()}")
            return
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> Strict:
    parser = Strict()
    parser.feed(page)
    parser.close()
    return parser


def test_the_page_parses_with_balanced_known_tags_and_no_script_or_handler(page):
    p = parse(page)
    assert p.errors == []
    assert p.stack == [], f"unclosed elements: {p.stack}"
    assert set(p.tags) <= ALLOWED_TAGS, f"unexpected tags: {set(p.tags) - ALLOWED_TAGS}"
    assert "script" not in p.tags and "img" not in p.tags and "i" not in p.tags  # hostile markup stayed text
    assert [a for a in p.attrs if a[1].startswith("on") or a[1] in ("src", "srcset")] == []
    assert p.tags[:1] == ["html"] and page.startswith("<!DOCTYPE html>")
    # The visible text holds the hostile strings verbatim, as text.
    text = "".join(p.text)
    for s in HOSTILE:
        assert s in text


def test_the_page_is_self_contained(page):
    assert not re.search(r"""(src|href|action|xlink:href)\s*=\s*["']?\s*(https?:|//|ftp:)""", page, re.I)
    assert "@import" not in page and not re.search(r"url\(\s*['\"]?\s*(https?:|//)", page, re.I)
    assert "<link" not in page.lower() and "<script" not in page.lower()
    hrefs = [v for tag, k, v in parse(page).attrs if k == "href"]
    assert hrefs and all(v.startswith("#") for v in hrefs)  # only in-page anchors
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_every_model_written_text_is_escaped(page):
    for s in HOSTILE:
        assert escape(s) in page
    assert '<script>document.title' not in page and "<img src=x" not in page and "<b>bold</b>" not in page
    assert "Ada &lt;i&gt;Lovelace&lt;/i&gt;" in page
    # Escaped where it belongs: the issue, a summary, a judgement, the meeting, a review, a step
    # failure, an LLM message and its error, the run's summary.
    esc_script, esc_img, esc_bold = (escape(s) for s in HOSTILE)
    assert page.count(esc_script) >= 8 and page.count(esc_img) >= 5 and page.count(esc_bold) >= 5
    assert f"turn 2</span>: I will not write {esc_script} nor {esc_img} raw.</p>" in page
    assert f'<p class="review-comment"><b>review:</b> Upper-casing is no escaping: {esc_bold} still renders bold.</p>' in page
    assert f'<pre class="text">page() does not escape the name: a name like {esc_script} runs.</pre>' in page


def section(page: str, name: str) -> str:
    return page.split(f'id="{name}"', 1)[1].split("</section>", 1)[0]


def test_the_page_shows_each_part_of_the_run(view, page):
    title = re.search(r"<title>(.*?)</title>", page, re.S).group(1)
    assert title == TITLE
    # Header: repository @ base commit, model, outcome, ablation settings.
    assert "run run-html-1 · web/page @ 0123456789abcdef0123456789abcdef01234567" in page
    head = section(page, "head")
    assert "gpt-4o-mini" in head and '<span id="outcome" class="badge oc-patched">patched</span>' in head
    assert "memory off" in head and "QA on" in head and "tests off" in head and "1 (0 failed)" in head
    # Custodian: candidates with scores, summary and judgements; located file.
    custodian = section(page, "custodian")
    assert "3.250" in custodian and "not relevant" in custodian and "docs only" in custodian and ">located<" in custodian
    # Manager: task, team, meeting, plan stage.
    assert "Careful web developer" in page and "Edsger" in page and "stage 1" in page and "turn 2" in page
    # Both attempts with colored diff lines and their reviews.
    assert page.count('<pre class="diff">') == 3  # attempt 1, attempt 2, final diff
    assert '<span class="d-del">-    return &#34;&lt;p&gt;Hello &#34; + name + &#34;&lt;/p&gt;&#34;</span>' in page
    assert '<span class="d-add">+    return &#34;&lt;p&gt;Hello &#34; + html.escape(name) + &#34;&lt;/p&gt;&#34;</span>' in page
    assert '<span class="d-hunk">@@ -1,6 +1,6 @@</span>' in page and '<span class="d-file">--- a/web/page.py</span>' in page
    assert page.count('<span class="badge bad review">sent back</span>') == 1
    assert page.count('<span class="badge ok review">approved</span>') == 1
    # The final diff is the approved attempt's.
    final = section(page, "final")
    assert "html.escape(name)" in final and "name.upper()" not in final
    assert final_diff(view) == unified(BASE_TEXT, FIXED_TEXT)
    # The step failure with its reason and fallback, and the failed model call.
    failures = section(page, "failures")
    assert f"no usable answer: {escape(SCRIPT)}" in failures and f"retried {escape(BOLD)}" in failures
    assert "LLM call write_code" in failures
    # Cost per role and step, totals summed from the exchanges.
    cost = section(page, "cost")
    for role in ("custodian", "developer", "qa"):
        assert f"<tr><td>{role}</td>" in cost
    assert "<td>review_patch</td>" in cost and '<td class="num">1,200</td>' in cost  # 300+400+500+0 prompt tokens
    assert '<td class="num">$0.0009</td>' in cost
    # The timeline: each decision, its offset from the start, its lane, and the calls that led to it.
    timeline = section(page, "timeline")
    decisions = [r for r in view.timeline if not isinstance(r.event, ev.LLMExchanged)]
    assert timeline.count("<tr") == len(decisions) + 1 and "<svg" in timeline
    assert "+0.00 s" in timeline and f"+{0.75 * (len(view.timeline) - 1):.2f} s" in timeline
    assert '<span class="lane r-qa">qa:T1</span>' in timeline and 'class="fail"' in timeline
    step_failed = next(r.event for r in view.timeline if isinstance(r.event, ev.StepFailed))
    assert f"<td>{escape(describe(step_failed))}</td>" in timeline and "superseded" not in timeline
    calls = re.findall(r'<a class="xlink[^"]*" href="#x(\d+)"', timeline)
    assert sorted(map(int, calls)) == [r.version for r in view.exchanges]  # each call, beside its decision


def test_llm_exchanges_are_collapsed_with_their_messages_answer_and_error(view, page):
    llm = section(page, "llm")
    assert llm.count("<details ") == len(view.exchanges) == 4 and "<details open" not in page
    assert [f'id="x{r.version}"' in llm for r in view.exchanges] == [True] * 4  # the timeline's links land here
    assert f'<pre class="text">Where? {escape(SCRIPT)}</pre>' in llm
    assert escape('{"approved": false, "comment": "<b>bold</b>"}') in llm  # the raw answer
    assert f'<pre class="err">answer is not the JSON asked for: {escape(SCRIPT)}</pre>' in llm
    assert "300+40 tokens" in llm and "1.25 s" in llm and "$0.0002" in llm


def test_a_failed_run_shows_its_reason_escaped():
    page = audit_html(fold(hostile_events(finished=False)))
    assert f'<p class="failure">failed (APIConnectionError): model unreachable {escape(SCRIPT)} — resumable</p>' in page
    assert '<span id="status" class="badge st-failed">failed</span>' in page
    assert parse(page).errors == []


def test_the_tests_line_says_whether_tests_ran_and_why_not():
    """The head's tests line: the decision recorded before any role acted, beside the test runs."""
    off = section(audit_html(fold(hostile_events())), "head")
    assert '<dd id="tests">off (--tests off): the patches are judged from their diffs, as in the MAGIS paper</dd>' in off
    settings = ev.RunSettings(tests=True)
    why = f"the tests run in a sandbox, and none can be made here: bubblewrap (bwrap) is not installed {SCRIPT}"
    pairs = [(a, msgspec.structs.replace(e, settings=settings) if isinstance(e, ev.RunStarted) else e)
             for a, e in ((r.actor, r.event) for r in hostile_events())]
    pairs.insert(1, ("supervisor", ev.TestsRan(purpose="prepare", command="", outcome="error", output=why)))
    recs = [ev.Recorded(run_id=RUN_ID, version=i, position=i, time=T0 + i, actor=a, event_id=f"e{i}", event=e)
            for i, (a, e) in enumerate(pairs, 1)]
    page = audit_html(fold(recs))
    assert f'<dd id="tests">off for this run: {escape(why)}</dd>' in section(page, "head")
    assert "tests on," in section(page, "head")  # the setting, beside what became of it
    ready = ev.TestsRan(purpose="prepare", command="python -m pytest -rA", outcome="passed", output="environment calc: built in 3 s")
    ran = ev.TestsRan(purpose="check", command="python -m pytest -rA t.py", outcome="passed", passed=["t.py::t"])
    recs = [ev.Recorded(run_id=RUN_ID, version=i, position=i, time=T0 + i, actor=a, event_id=f"e{i}", event=e)
            for i, (a, e) in enumerate([pairs[0], ("supervisor", ready), ("qa:T1", ran)], 1)]
    on = section(audit_html(fold(recs)), "head")
    assert ('<dd id="tests">on: python -m pytest -rA (environment calc: built in 3 s) · 1 test run: 1 passed</dd>'
            in on), on


def test_control_characters_from_the_model_never_reach_the_page_raw():
    pairs = [(r.actor, r.event) for r in hostile_events()]
    noisy = "stop\x00here\x07\x1b[31mred\x7f\x85"
    pairs.insert(5, ("custodian", exchange("summarize_file", "prompt", noisy, tokens=(1, 1), latency=0.1, cost=0.0)))
    pairs.insert(6, ("custodian", ev.FileJudged(path=f"calc/{noisy}.py", relevant=False, reason=noisy)))
    recs = [ev.Recorded(run_id=RUN_ID, version=i, position=i, time=T0 + i, actor=a, event_id=f"e{i}", event=e)
            for i, (a, e) in enumerate(pairs, 1)]
    page = audit_html(fold(recs))
    assert not [c for c in page if (ord(c) < 32 and c not in "\n\t\r") or 0x7f <= ord(c) <= 0x9f]
    assert "stop\\x00here\\x07\\x1b[31mred\\x7f\\x85" in page and parse(page).errors == []


def test_failed_tasks_are_counted_and_listed_among_the_failures():
    """A task whose answers stayed invalid fails with no failed call and no StepFailed event."""
    pairs = [(r.actor, r.event) for r in hostile_events()]
    at = next(i for i, (_, e) in enumerate(pairs) if isinstance(e, ev.TaskFinished))
    t = pairs[at][1]
    pairs[at] = (pairs[at][0], ev.TaskFinished(task_id=t.task_id, status="failed", reason="attempt 1: no usable answer after 3 tries"))
    recs = [ev.Recorded(run_id=RUN_ID, version=i, position=i, time=T0 + i, actor=a, event_id=f"e{i}", event=e)
            for i, (a, e) in enumerate(pairs, 1)]
    page = audit_html(fold(recs))
    failures = section(page, "failures")
    assert "No step failed" not in failures and f"task {t.task_id}" in failures and "no usable answer after 3 tries" in failures
    assert "<dt>tasks</dt><dd>1 (1 failed)</dd>" in page


def resumed_events() -> list[ev.Recorded]:
    """The hostile run, interrupted after T1's first review and resumed: three events superseded."""
    pairs = [(r.actor, r.event) for r in hostile_events()]
    kept = 18  # ... ReviewIssued(T1, attempt 1, sent back)
    assert isinstance(pairs[kept - 1][1], ev.ReviewIssued)
    lost = [
        ("developer:T1", ev.LinesLocated(task_id="T1", attempt=2, ranges=[ev.LineRange(1, 1)])),
        ("developer:T1", exchange("write_code", "lost call", '{"edits": []}', task_id="T1", tokens=(700, 5), latency=0.25, cost=0.0005)),
        ("supervisor", ev.RunFailed(reason=f"worker died {IMG}", error_type="RayActorError")),
        ("supervisor", ev.RunResumed(kept_version=kept, superseded=3)),
    ]
    pairs = pairs[:kept] + lost + pairs[kept:]
    return [
        ev.Recorded(run_id=RUN_ID, version=i, position=i, time=T0 + 0.75 * (i - 1), actor=actor, event_id=f"e{i:04d}", event=event)
        for i, (actor, event) in enumerate(pairs, 1)
    ]


def test_a_resumed_run_shows_its_superseded_events_as_history():
    view = fold(resumed_events())
    page = audit_html(view)
    assert parse(page).errors == [] and view.status == "finished" and view.failed is None
    assert "1 time; 3 events superseded" in page
    timeline = section(page, "timeline")
    # the superseded LinesLocated and RunFailed rows (the lost call folds into the failure's row)
    assert timeline.count('class="superseded"') == 1 and timeline.count('class="fail superseded"') == 1
    assert escape(describe(ev.RunResumed(kept_version=18, superseded=3))) in timeline
    failures = section(page, "failures")
    assert f"worker died {escape(IMG)}" in failures and 'run failed (RayActorError) <span class="badge plain"' in failures
    llm = section(page, "llm")
    assert llm.count("<details ") == 5 and llm.count('<span class="badge plain">superseded</span>') == 1  # paid for, so listed
    # The superseded attempt leaves no trace in the task's attempts or the final diff.
    task = page.split('id="task-T1"', 1)[1].split("</article>", 1)[0]
    assert task.count("<h4>attempt ") == 2


def test_an_empty_and_a_running_view_render():
    empty = audit_html(RunView())
    assert "empty run" in empty and parse(empty).stack == []
    running = audit_html(fold(hostile_events()[:10]))  # no task finished, no plan yet
    assert "st-running" in running and "No plan recorded." in running and parse(running).errors == []


def test_the_golden_log_renders_every_event():
    recs = [decode_recorded(line) for line in GOLDEN.read_bytes().splitlines()]
    view = fold(recs)
    page = audit_html(view)
    p = parse(page)
    assert p.errors == [] and p.stack == []
    for r in view.timeline:
        if isinstance(r.event, ev.LLMExchanged):
            assert f'<details id="x{r.version}"' in page
        else:
            assert f'<tr id="v{r.version}"' in page and escape(describe(r.event)) in page
    for t in view.tasks.values():
        assert f'id="task-{t.task_id}"' in page
    assert escape(final_diff(view).splitlines()[-1]) in page


def test_the_audit_page_and_the_inspector_share_one_template_set():
    """One renderer: the audit page is the inspector's run sections in their standalone mode, and
    no HTML is built in events/."""
    templates = files("magis_ray.cli.pages").joinpath("templates")
    assert templates.joinpath("run_sections.html").is_file() and templates.joinpath("audit.html").is_file()
    assert '{% include "run_sections.html" %}' in templates.joinpath("run.html").read_text()
    assert '{% include "run_sections.html" %}' in templates.joinpath("audit.html").read_text()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "*.html" in config["tool"]["setuptools"]["package-data"]["magis_ray.cli.pages.templates"]
    events = ROOT / "events"
    assert not list(events.rglob("*.html"))
    assert not [p for p in events.rglob("*.py") if re.search(r"<(section|div|table|span)\b", p.read_text())]


# --- a real browser ------------------------------------------------------------------------------


def chromium(tmp: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
         f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr", "--v=0", *extra, url],
        capture_output=True, text=True, timeout=30,
    )


def page_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "Uncaught" in line or "CONSOLE(" in line or "net::ERR" in line]


needs_chromium = pytest.mark.skipif(CHROMIUM is None or not sys.platform.startswith("linux"), reason=NO_CHROMIUM)


@needs_chromium
def test_chromium_detects_a_script_that_runs(tmp_path):
    """The control: the checks below would see an injected script run and fail."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head><title>orig</title></head><body>'
                   '<script>document.title="pwned"; undefined_function();</script></body></html>')
    run = chromium(tmp_path, bad.as_uri(), "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "<title>pwned</title>" in run.stdout
    assert any("Uncaught" in line for line in page_errors(run.stderr)), run.stderr[-2000:]


@needs_chromium
def test_chromium_runs_no_injected_script_and_logs_no_error(tmp_path, page):
    target = tmp_path / "audit.html"
    target.write_text(page, encoding="utf-8")
    run = chromium(tmp_path, target.as_uri(), "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    assert f"<title>{TITLE}</title>" in dom and "pwned</title>" not in dom
    # a DOM dump escapes text's <, > and & only, not its quotes
    assert all(dom_escape(s, quote=False) in dom for s in (SCRIPT, IMG, BOLD))
    assert "<script" not in dom.lower() and "<img" not in dom.lower()
    assert page_errors(run.stderr) == []


@needs_chromium
def test_chromium_screenshot_is_a_real_page(tmp_path, page):
    target = tmp_path / "audit.html"
    target.write_text(page, encoding="utf-8")
    png = tmp_path / "audit.png"
    run = chromium(tmp_path, target.as_uri(), f"--screenshot={png}", "--window-size=1280,2000")
    assert run.returncode == 0, run.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2000)
    assert len(data) > 50_000  # a blank or tiny page compresses to a few kilobytes
    assert page_errors(run.stderr) == []
