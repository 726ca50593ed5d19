"""The audit trail as one self-contained HTML page: header, issue, Custodian, Manager, meeting,
plan, each task's attempts and reviews, step failures, final diff, cost, timeline and LLM calls.

A pure renderer of a RunView (no network, no scripts). Every text that comes from the log is
escaped with html.escape, so model-written markup shows as text and never runs.
"""
from __future__ import annotations

import re
from functools import lru_cache
from html import escape
from importlib.resources import files
from string import Template

from magis_ray.events import schema as ev
from magis_ray.events.history import effective

from .audit import describe
from .diff import changed_files, final_diff
from .usage import metrics, role_of
from .state import RunView, TaskView

ROLES = ("supervisor", "custodian", "manager", "developer", "qa")
_SWIM_COLORS = {"supervisor": "#6e7781", "custodian": "#8250df", "manager": "#0969da", "developer": "#1a7f37", "qa": "#bc4c00"}
_STATUS_BADGE = {"approved": "b-ok", "unreviewed": "b-info", "unapproved": "b-warn", "failed": "b-bad", "unfinished": "b-plain"}


@lru_cache(maxsize=1)
def _template() -> Template:
    return Template(files(__package__).joinpath("audit.html").read_text(encoding="utf-8"))


# NUL and other control characters (tabs and line ends aside) from model text: shown as \xNN,
# never written raw into the page (a NUL there truncates or breaks it in browsers and tools)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def esc(text: object) -> str:
    return escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text)), quote=True)


def _badge(text: str, kind: str) -> str:
    return f'<span class="badge {kind}">{esc(text)}</span>'


def _lane(actor: str) -> str:
    role = role_of(actor)
    cls = f"r-{role}" if role in ROLES else ""
    return f'<span class="lane {cls}">{esc(actor)}</span>'


def _pre(text: str, cls: str = "text") -> str:
    return f'<pre class="{cls}">{esc(text)}</pre>' if text.strip() else '<p class="empty">(empty)</p>'


def _offset(seconds: float) -> str:
    if seconds < 60:
        return f"+{seconds:.2f} s"
    minutes, secs = divmod(seconds, 60)
    return f"+{int(minutes)}:{secs:05.2f}"


def superseded(view: RunView) -> set[int]:
    """Versions of the events a resumed run superseded (history, but not the run's state)."""
    return {r.version for r in view.timeline} - {r.version for r in effective(view.timeline, keep_markers=True)}


_OLD = '<span class="badge b-plain" title="superseded by a resumption">superseded</span>'


def render_diff(diff: str) -> str:
    """A unified diff with its lines classed as added, removed, hunk header or file header."""
    if not diff.strip():
        return '<p class="empty">(no change)</p>'
    lines = []
    for line in diff.rstrip("\n").split("\n"):
        if line.startswith(("+++", "---", "diff ", "index ", "new file", "deleted file", "similarity", "rename ")):
            cls = "meta"
        elif line.startswith("@@"):
            cls = "hunk"
        elif line.startswith("+"):
            cls = "add"
        elif line.startswith("-"):
            cls = "del"
        else:
            cls = "ctx"
        lines.append(f'<span class="l {cls}">{esc(line)}</span>')
    return f'<pre class="diff">{"".join(lines)}</pre>'


# --- sections -------------------------------------------------------------------------------


def _header(view: RunView, m: dict) -> str:
    s = view.started
    title = s.instance_id if s else (view.run_id or "empty run")
    status = view.status
    if view.finished:
        kind = "b-ok" if view.finished.outcome == "patched" else "b-warn"
        badge = _badge(f"{status}: {view.finished.outcome}", kind)
    else:
        badge = _badge(status, {"failed": "b-bad", "running": "b-info"}.get(status, "b-plain"))
    rows = [("run", f"<code>{esc(view.run_id or '-')}</code>")]
    if s:
        rows += [
            ("repository", f"{esc(s.repo)} @ <code>{esc(s.base_commit)}</code>"),
            ("model", esc(s.settings.model or "-")),
        ]
        st = s.settings
        settings = [
            _badge(f"QA {'on' if st.use_qa else 'off'}", "b-plain" if st.use_qa else "b-warn"),
            _badge(f"hints {'on' if st.use_hints else 'off'}", "b-plain" if st.use_hints else "b-warn"),
            _badge(f"memory {'on' if st.use_memory else 'off'}", "b-plain" if st.use_memory else "b-warn"),
            _badge(f"top-k {st.top_k}", "b-plain"),
            _badge(f"max files {st.max_files}", "b-plain"),
            _badge(f"max review rounds {st.max_review_rounds}", "b-plain"),
            _badge(f"token budget {st.token_budget or 'none'}", "b-plain"),
        ]
        rows.append(("settings", f'<div class="chips">{"".join(settings)}</div>'))
    rows.append(("status", badge))
    if view.finished and view.finished.summary:
        rows.append(("summary", esc(view.finished.summary)))
    if view.failed:
        kind = f" ({esc(view.failed.error_type)})" if view.failed.error_type else ""
        resumable = " — resumable" if view.failed.resumable else " — not resumable"
        rows.append(("failure", f'<span class="err">{esc(view.failed.reason)}</span>{kind}{resumable}'))
    resumptions = [r.event for r in view.timeline if isinstance(r.event, ev.RunResumed)]
    if resumptions:
        n_old = len(superseded(view))
        rows.append(("resumed", f"{len(resumptions)} time(s); {n_old} event(s) superseded (kept in the timeline, faded)"))
    files_changed = changed_files(view)
    if files_changed:
        rows.append(("files changed", ", ".join(f"<code>{esc(p)}</code>" for p in files_changed)))
    meta = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    t = m["total"]
    stats = [
        (f"{t['wall_seconds']:.1f} s", "wall time"),
        (str(t["events"]), "events"),
        (str(t["calls"]), f"LLM calls ({t['failed_calls']} failed)"),
        (f"{t['prompt_tokens'] + t['completion_tokens']:,}", "tokens"),
        (f"${t['cost_usd']:.4f}", "cost (USD)"),
        (str(len(view.tasks)), f"tasks ({sum(1 for t in view.tasks.values() if t.finished and t.finished.status == 'failed')} failed)"),
    ]
    stat_html = "".join(f'<div class="stat"><b>{v}</b><span>{k}</span></div>' for v, k in stats)
    return (
        f'<header class="run"><h1>{esc(title)}</h1><p class="sub">MAGIS audit of one run</p>'
        f'<dl class="meta">{meta}</dl><div class="stats">{stat_html}</div></header>'
    )


def _issue(view: RunView) -> str:
    s = view.started
    if s is None:
        return '<section id="issue"><h2>Issue</h2><p class="empty">The run has not started.</p></section>'
    hints = ""
    if s.hints_text.strip():
        hints = f'<details><summary>Hints</summary><div class="inner">{_pre(s.hints_text)}</div></details>'
    return f'<section id="issue"><h2>Issue</h2>{_pre(s.problem_statement)}{hints}</section>'


def _custodian(view: RunView) -> str:
    out = ['<section id="custodian"><h2>Repository Custodian</h2>']
    judged = {j.path: j for j in view.judgements}
    located = set(view.located.paths) if view.located else set()
    if view.ranked:
        out.append(f'<p class="sub">BM25 ranked {view.ranked.files_total} files; the top {len(view.ranked.candidates)} are candidates.</p>')
        rows = []
        for i, c in enumerate(view.ranked.candidates, 1):
            j = judged.get(c.path)
            verdict = "" if j is None else _badge("relevant", "b-ok") if j.relevant else _badge("not relevant", "b-plain")
            reason = f'<div class="small muted">{esc(j.reason)}</div>' if j and j.reason else ""
            loc = _badge("located", "b-info") if c.path in located else ""
            rows.append(
                f'<tr><td class="num">{i}</td><td><code>{esc(c.path)}</code> {loc}</td><td class="num">{c.score:.3f}</td>'
                f'<td><code class="small muted">{esc(c.blob_id[:10])}</code></td><td>{verdict}{reason}</td></tr>'
            )
        out.append(
            '<table><thead><tr><th class="num">#</th><th>candidate</th><th class="num">score</th><th>blob</th>'
            f'<th>judgement</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
        )
    else:
        out.append('<p class="empty">No ranking recorded.</p>')
    if view.summaries:
        out.append("<h4>Summaries</h4>")
        for s in view.summaries:
            extra = ""
            if s.source != "fresh" and (s.commit_message or s.earlier_blob_id):
                extra = (
                    f'<div class="small muted">from blob <code>{esc(s.earlier_blob_id[:10])}</code>'
                    f'{": " + esc(s.commit_message) if s.commit_message else ""}</div>'
                )
            out.append(
                f'<div class="quote"><code>{esc(s.path)}</code> {_badge(s.source, "b-plain")}'
                f"<div>{esc(s.summary)}</div>{extra}</div>"
            )
    # Judgements of files that were not candidates (should not happen, but show them).
    for j in view.judgements:
        if not view.ranked or all(c.path != j.path for c in view.ranked.candidates):
            out.append(f'<div class="quote"><code>{esc(j.path)}</code> judged {"relevant" if j.relevant else "not relevant"}: {esc(j.reason)}</div>')
    if view.located is not None:
        paths = ", ".join(f"<code>{esc(p)}</code>" for p in view.located.paths) or '<span class="empty">none</span>'
        out.append(f"<p><b>Located:</b> {paths}</p>")
    out.append("</section>")
    return "".join(out)


def _manager(view: RunView) -> str:
    out = ['<section id="manager"><h2>Manager: tasks and team</h2>']
    if view.tasks:
        rows = []
        for t in view.tasks.values():
            dev = f"<b>{esc(t.developer.name)}</b><div class='small muted'>{esc(t.developer.profile)}</div>" if t.developer else '<span class="empty">-</span>'
            qa = f"<b>{esc(t.qa.name)}</b><div class='small muted'>{esc(t.qa.profile)}</div>" if t.qa else '<span class="empty">-</span>'
            status = t.finished.status if t.finished else "unfinished"
            rows.append(
                f'<tr><td><a href="#task-{esc(t.task_id)}"><b>{esc(t.task_id)}</b></a></td><td><code>{esc(t.path)}</code>'
                f'{"" if t.base_blob_id else " " + _badge("new file", "b-info")}</td><td>{esc(t.description)}</td>'
                f"<td>{dev}</td><td>{qa}</td><td>{_badge(status, _STATUS_BADGE.get(status, 'b-plain'))}</td></tr>"
            )
        out.append(
            "<table><thead><tr><th>task</th><th>file</th><th>description</th><th>developer</th><th>QA engineer</th>"
            f'<th>status</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
        )
    else:
        out.append('<p class="empty">No tasks defined.</p>')
    out.append('<h3 id="meeting">Kick-off meeting</h3>')
    if view.meeting:
        turns = "".join(
            f'<div class="turn"><div class="who">{esc(u.speaker)}<small>turn {u.turn}</small></div>'
            f'<div class="said">{esc(u.text)}</div></div>'
            for u in view.meeting
        )
        out.append(f'<div class="transcript">{turns}</div>')
    else:
        out.append('<p class="empty">No meeting recorded.</p>')
    out.append('<h3 id="plan">Plan</h3>')
    if view.plan:
        stages = []
        for i, stage in enumerate(view.plan.stages, 1):
            chips = "".join(_badge(tid, "b-info") for tid in stage)
            stages.append(f'<div class="stage"><div class="small muted">stage {i}{" (parallel)" if len(stage) > 1 else ""}</div><div class="chips">{chips}</div></div>')
        arrow = '<div class="arrow">&rarr;</div>'
        out.append(f'<div class="stages">{arrow.join(stages)}</div>')
        if view.plan.rationale.strip():
            out.append(f'<p class="quote">{esc(view.plan.rationale)}</p>')
    else:
        out.append('<p class="empty">No plan recorded.</p>')
    out.append("</section>")
    return "".join(out)


def _task(t: TaskView) -> str:
    status = t.finished.status if t.finished else "unfinished"
    out = [
        f'<div class="task" id="task-{esc(t.task_id)}"><div class="head"><h3>Task {esc(t.task_id)}: <code>{esc(t.path)}</code></h3>'
        f"{_badge(status, _STATUS_BADGE.get(status, 'b-plain'))}</div>",
        f"<p>{esc(t.description)}</p>",
    ]
    team = []
    if t.developer:
        team.append(f"developer <b>{esc(t.developer.name)}</b>")
    if t.qa:
        team.append(f"QA engineer <b>{esc(t.qa.name)}</b>")
    if team:
        out.append(f'<p class="small muted">{"; ".join(team)}</p>')
    attempts = sorted({(p.candidate, p.attempt) for p in t.patches} | {(r.candidate, r.attempt) for r in t.reviews}
                      | {(loc.candidate, loc.attempt) for loc in t.locations})
    for baseline in (r for r in t.test_runs if r.purpose == "baseline"):
        out.append(f'<div class="small">{_test_run(baseline)}</div>')
    for key in attempts:
        candidate, n = key
        review = next((r for r in t.reviews if (r.candidate, r.attempt) == key), None)
        cls = "" if review is None else " ok" if review.approved else " bad"
        label = f"Candidate {candidate}, attempt {n}" if candidate else f"Attempt {n}"
        out.append(f'<div class="attempt{cls}"><b>{label}</b>')
        for loc in (x for x in t.locations if (x.candidate, x.attempt) == key):
            spans = ", ".join(f"{r.start}&ndash;{r.end}" for r in loc.ranges) or "none"
            out.append(f' <span class="small muted">lines {spans}</span>')
        for p in (x for x in t.patches if (x.candidate, x.attempt) == key):
            out.append(f'<div class="small muted">{len(p.edits)} edit(s) to <code>{esc(p.path)}</code></div>{render_diff(p.diff)}')
        for run in (x for x in t.test_runs if (x.candidate, x.attempt) == key and x.purpose == "check"):
            out.append(f'<div class="small">{_test_run(run)}</div>')
        if review is not None:
            verdict = _badge("approved", "b-ok") if review.approved else _badge("sent back", "b-bad")
            comment = f"<div>{esc(review.comment)}</div>" if review.comment.strip() else ""
            out.append(f'<div class="review{cls}">Review: {verdict}{comment}</div>')
        out.append("</div>")
    if t.chosen:
        out.append(f"<p><b>Chosen:</b> candidate {t.chosen.chosen} of {t.chosen.candidates}: {esc(t.chosen.reason)}</p>")
    if not attempts:
        out.append('<p class="empty">No attempt recorded.</p>')
    if t.finished:
        reason = f": {esc(t.finished.reason)}" if t.finished.reason else ""
        out.append(f"<p><b>Result:</b> {esc(t.finished.status)} after {t.finished.attempts} attempt(s){reason}</p>")
    out.append("</div>")
    return "".join(out)


def _test_run(run: ev.TestsRan) -> str:
    """One test run: what ran, its outcome and counts, and (when it did not pass) the end of its output."""
    badge = _badge(run.outcome, "b-ok" if run.outcome == "passed" else "b-bad")
    failed = f" failed: {esc(', '.join(run.failed[:10]))}" if run.failed else ""
    head = (f"Tests {badge} {len(run.passed)} passed, {len(run.failed)} failed, {run.duration_s:.1f} s "
            f"<code>{esc(run.command)}</code>{failed}")
    if run.outcome == "passed" or not run.output:
        return head
    return f"<details><summary>{head}</summary><pre>{esc(run.output[-2000:])}</pre></details>"


def _reproduction(view: RunView) -> str:
    if view.environment is None and not view.reproductions:
        return ""
    out = ['<section id="reproduction"><h2>Reproduction test</h2>']
    if view.environment is not None:
        out.append(f"<p>{esc(describe(view.environment))}</p>")
    for written in view.reproductions:
        out.append(f"<h3>Try {written.attempt}: <code>{esc(written.path)}</code></h3><pre>{esc(written.content)}</pre>")
        out += [f"<p>{_test_run(r)}</p>" for r in view.reproduction_runs if r.attempt == written.attempt]
    out.append("</section>")
    return "".join(out)


def _tasks(view: RunView) -> str:
    body = "".join(_task(t) for t in view.tasks.values()) or '<p class="empty">No tasks.</p>'
    return f'<section id="tasks"><h2>Developers and QA: attempts and reviews</h2>{body}</section>'


def _failures(view: RunView, start: float, old: set[int]) -> str:
    fails = [r for r in view.timeline if isinstance(r.event, (ev.StepFailed, ev.RunFailed))]
    fails += [r for r in view.exchanges if r.event.error]  # type: ignore[union-attr]
    # a task fails when its answers stay invalid after corrections: no call failed, yet the task did
    fails += [r for r in view.timeline if isinstance(r.event, ev.TaskFinished) and r.event.status == "failed"]
    fails.sort(key=lambda r: r.version)
    if not fails:
        return '<section id="failures"><h2>Failures</h2><p class="empty">No step failed.</p></section>'
    rows = []
    for r in fails:
        e = r.event
        if isinstance(e, ev.StepFailed):
            what, why, then = f"{esc(e.purpose)}{' / ' + esc(e.task_id) if e.task_id else ''}{' / <code>' + esc(e.path) + '</code>' if e.path else ''}", e.reason, e.fallback
        elif isinstance(e, ev.LLMExchanged):
            what, why, then = f"LLM call {esc(e.purpose)} (attempt {e.attempt})", e.error, ""
        elif isinstance(e, ev.TaskFinished):
            what, why, then = f"task {esc(e.task_id)}", e.reason or "failed", "no patch for this task"
        else:
            what, why, then = f"run failed{' (' + esc(e.error_type) + ')' if e.error_type else ''}", e.reason, ""  # type: ignore[union-attr]
        tr = '<tr class="superseded">' if r.version in old else "<tr>"
        rows.append(
            f'{tr}<td class="num">{_offset(r.time - start)}</td><td>{_lane(r.actor)}</td><td>{what}{" " + _OLD if r.version in old else ""}</td>'
            f'<td class="err">{esc(why)}</td><td>{esc(then)}</td></tr>'
        )
    return (
        '<section id="failures"><h2>Failures</h2><table><thead><tr><th class="num">time</th><th>lane</th><th>step</th>'
        f'<th>reason</th><th>fallback</th></tr></thead><tbody>{"".join(rows)}</tbody></table></section>'
    )


def _final(view: RunView) -> str:
    return f'<section id="diff"><h2>Final diff</h2>{render_diff(final_diff(view))}</section>'


def _cost_table(title: str, buckets: dict, total: dict | None) -> str:
    rows = [(k, b, "") for k, b in buckets.items()] + ([("total", total, ' class="total"')] if total else [])
    body = "".join(
        f"<tr{cls}><td>{esc(k)}</td><td class='num'>{b['calls']}</td><td class='num'>{b['failed_calls']}</td>"
        f"<td class='num'>{b['prompt_tokens']:,}</td><td class='num'>{b['completion_tokens']:,}</td>"
        f"<td class='num'>{b['cost_usd']:.4f}</td><td class='num'>{b['llm_seconds']:.2f}</td></tr>"
        for k, b, cls in rows
    )
    return (
        f"<table><thead><tr><th>{title}</th><th class='num'>calls</th><th class='num'>failed</th><th class='num'>prompt tokens</th>"
        "<th class='num'>completion tokens</th><th class='num'>cost (USD)</th><th class='num'>LLM seconds</th></tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def _by_role_model(m: dict) -> str:
    """Per role and model, when the roles asked more than one model (a settings file's [models])."""
    pairs = {f"{role} · {model}": b for role, models in m.get("by_role_model", {}).items() for model, b in models.items()}
    if len({key.split(" · ", 1)[1] for key in pairs}) < 2:
        return ""
    return f"<h4>By role and model</h4>{_cost_table('role · model', pairs, None)}"


def _costs(m: dict) -> str:
    t = m["total"]
    return (
        '<section id="cost"><h2>Tokens, cost and time</h2>'
        f"<h4>By role</h4>{_cost_table('role', m['by_role'], t)}"
        f"{_by_role_model(m)}"
        f"<h4>By step</h4>{_cost_table('step', m['by_step'], None)}"
        f'<p class="small muted">Wall time {t["wall_seconds"]:.1f} s over {t["events"]} events.</p></section>'
    )


def _swimlanes(view: RunView, start: float, span: float, old: set[int]) -> str:
    """An inline SVG: one row per role, a tick per event and a bar per LLM call's latency."""
    roles = [r for r in ROLES if any(role_of(x.actor) == r for x in view.timeline)]
    roles += sorted({role_of(x.actor) for x in view.timeline} - set(roles))
    if not roles:
        return ""
    left, width, row = 100, 1000, 26
    height = row * len(roles) + 24
    scale = width / (span or 1.0)
    parts = [f'<svg class="swim" viewBox="0 0 {left + width + 10} {height}" role="img" aria-label="events by role over time">']
    for i, role in enumerate(roles):
        y = i * row
        color = _SWIM_COLORS.get(role, "#57606a")
        parts.append(f'<rect x="{left}" y="{y + 3}" width="{width}" height="{row - 6}" fill="#f6f8fa"/>')
        parts.append(f'<text x="{left - 8}" y="{y + row / 2 + 4}" text-anchor="end">{esc(role)}</text>')
        for r in view.timeline:
            if role_of(r.actor) != role:
                continue
            x = left + (r.time - start) * scale
            e = r.event
            fade = ' opacity="0.3"' if r.version in old else ""
            if isinstance(e, ev.LLMExchanged) and e.latency_s > 0:
                x0 = max(x - e.latency_s * scale, left)  # a call began at most at the run's start
                w = max(x - x0, 2.0)
                parts.append(f'<rect x="{x0:.1f}" y="{y + 8}" width="{w:.1f}" height="{row - 16}" fill="{color}" opacity="{0.12 if fade else 0.35}"><title>{esc(describe(e))}</title></rect>')
            bad = isinstance(e, (ev.StepFailed, ev.RunFailed)) or (isinstance(e, ev.LLMExchanged) and e.error)
            parts.append(
                f'<rect x="{x - 1:.1f}" y="{y + 5}" width="3" height="{row - 10}" fill="{"#cf222e" if bad else color}"{fade}>'
                f"<title>{esc(r.actor)}: {esc(describe(e))}</title></rect>"
            )
    axis_y = row * len(roles) + 16
    for k in range(6):
        x = left + width * k / 5
        anchor = "start" if k == 0 else "end" if k == 5 else "middle"
        parts.append(f'<text x="{x:.1f}" y="{axis_y}" text-anchor="{anchor}">{esc(_offset(span * k / 5))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _timeline(view: RunView, start: float, old: set[int]) -> str:
    if not view.timeline:
        return '<section id="timeline"><h2>Timeline</h2><p class="empty">No events.</p></section>'
    span = max(r.time for r in view.timeline) - start
    note = (
        f'<p class="small muted">{len(old)} event(s) shown faded were superseded: they followed a failure that a '
        "resumed run retried, so they are history but no part of the run's result.</p>"
    ) if old else ""
    rows = []
    for r in view.timeline:
        e = r.event
        bad = isinstance(e, (ev.StepFailed, ev.RunFailed)) or (isinstance(e, ev.LLMExchanged) and bool(e.error))
        classes = " ".join(c for c, on in (("ev-fail", bad), ("superseded", r.version in old)) if on)
        tr = f'<tr class="{classes}">' if classes else "<tr>"
        rows.append(
            f'{tr}<td class="num">{r.version}</td><td class="num">{_offset(r.time - start)}</td>'
            f"<td>{_lane(r.actor)}</td><td class='small muted'>{esc(type(e).__name__)}</td>"
            f"<td>{esc(describe(e))}{' ' + _OLD if r.version in old else ''}</td></tr>"
        )
    return (
        '<section id="timeline"><h2>Timeline by role</h2>'
        f"{_swimlanes(view, start, span, old)}"
        '<table><thead><tr><th class="num">#</th><th class="num">time</th><th>lane</th><th>event</th><th>what happened</th></tr></thead>'
        f'<tbody>{"".join(rows)}</tbody></table>{note}</section>'
    )


def _exchange(rec: ev.Recorded, start: float, old: set[int]) -> str:
    x: ev.LLMExchanged = rec.event  # type: ignore[assignment]
    state = _badge("error", "b-bad") if x.error else _badge("ok", "b-ok")
    task = f" · {esc(x.task_id)}" if x.task_id else ""
    summary = (
        f"<summary>{state}{' ' + _OLD if rec.version in old else ''} <span class='mono small'>{_offset(rec.time - start)}</span> {_lane(rec.actor)} "
        f"<b>{esc(x.purpose)}</b>{task} <span class='small muted'>· {x.prompt_tokens:,}+{x.completion_tokens:,} tokens · "
        f"{x.latency_s:.2f} s · ${x.cost_usd:.5f}{' · attempt ' + str(x.attempt) if x.attempt > 1 else ''}</span></summary>"
    )
    msgs = "".join(f'<div class="msg"><div class="role">{esc(m.role)}</div><pre>{esc(m.content)}</pre></div>' for m in x.messages)
    details = [f'<p class="small muted">model <code>{esc(x.model)}</code>']
    if x.truncated_chars:
        details.append(f"; {x.truncated_chars:,} prompt characters cut to fit the context")
    details.append("</p>")
    if x.error:
        details.append(f'<div class="msg"><div class="role err">error</div><pre class="err">{esc(x.error)}</pre></div>')
    answer = f'<div class="msg"><div class="role">raw answer</div><pre>{esc(x.answer)}</pre></div>' if x.answer else ""
    return f'<details>{summary}<div class="inner">{"".join(details)}{msgs}{answer}</div></details>'


def _exchanges(view: RunView, start: float, old: set[int]) -> str:
    body = "".join(_exchange(r, start, old) for r in view.exchanges) or '<p class="empty">No model calls.</p>'
    return f'<section id="llm"><h2>LLM exchanges</h2><p class="sub">{len(view.exchanges)} call(s); open one to read its messages and raw answer.</p>{body}</section>'


_NAV = [
    ("issue", "Issue"), ("custodian", "Custodian"), ("manager", "Manager"), ("meeting", "Meeting"), ("plan", "Plan"),
    ("tasks", "Tasks"), ("failures", "Failures"), ("diff", "Final diff"), ("cost", "Cost"), ("timeline", "Timeline"), ("llm", "LLM exchanges"),
]


def audit_html(view: RunView) -> str:
    """One self-contained HTML page that tells the story of a run."""
    m = metrics(view)
    start = min((r.time for r in view.timeline), default=0.0)
    old = superseded(view)
    title = f"MAGIS audit: {view.started.instance_id}" if view.started else f"MAGIS audit: {view.run_id or 'empty run'}"
    nav = '<nav class="toc">' + "".join(f'<a href="#{a}">{t}</a>' for a, t in _NAV) + "</nav>"
    body = "".join([
        _issue(view), _custodian(view), _manager(view), _reproduction(view), _tasks(view), _failures(view, start, old),
        _final(view), _costs(m), _timeline(view, start, old), _exchanges(view, start, old),
    ])
    return _template().substitute(title=esc(title), header=_header(view, m), nav=nav, body=body, run_id=esc(view.run_id or "-"))
