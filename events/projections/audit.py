"""The audit trail: who decided what, when, why and at what cost, as Markdown and as JSON. The
JSON is the one document every page of a run is rendered from (cli/pages/): the audit
page, the inspector's run page."""
from __future__ import annotations

from magis_ray.events import schema as ev
from magis_ray.events.codec import to_builtins
from magis_ray.events.history import effective

from .diff import changed_files, final_diff
from .inspection import steps
from .state import RunView
from .tests import counts, kind, tests_decision, verdict, view_tally
from .usage import metrics, role_of


def describe(e: ev.AnyEvent) -> str:
    """One line saying what an event decided, for timelines."""
    match e:
        case ev.RunStarted():
            return f"run started for {e.instance_id} ({e.repo} @ {e.base_commit[:10]})"
        case ev.FilesRanked():
            return f"BM25 ranked {e.files_total} files; top {len(e.candidates)} kept as candidates"
        case ev.FileSummarized():
            return f"described {e.path} ({e.source})"
        case ev.FileJudged():
            return f"{e.path}: {'relevant' if e.relevant else 'not relevant'}" + (f" ({e.reason})" if e.reason else "")
        case ev.FilesLocated():
            return f"located {len(e.paths)} file{'' if len(e.paths) == 1 else 's'}: {', '.join(e.paths) or '-'}"
        case ev.TaskDefined():
            return f"task {e.task_id} on {e.path}"
        case ev.DeveloperRecruited():
            return f"recruited {e.name} for {e.task_id}"
        case ev.MeetingUtterance():
            return f"{e.speaker} spoke (turn {e.turn})"
        case ev.PlanMade():
            return "plan: " + " then ".join("[" + ", ".join(s) + "]" for s in e.stages)
        case ev.QAAssigned():
            return f"QA engineer {e.name} assigned to {e.task_id}"
        case ev.LinesLocated():
            spans = ", ".join(f"{r.start}-{r.end}" for r in e.ranges)
            return f"{e.task_id} attempt {e.attempt}: lines {spans or 'none'}"
        case ev.PatchProposed():
            return f"{e.task_id} attempt {e.attempt}: patch for {e.path} ({e.diff.count(chr(10))} diff lines)"
        case ev.ReviewIssued():
            return f"{e.task_id} attempt {e.attempt}: {'approved' if e.approved else 'sent back'}"
        case ev.TaskFinished():
            return f"{e.task_id} finished: {e.status}" + (f" ({e.reason})" if e.reason else "")
        case ev.LLMExchanged():
            status = f"error {e.error}" if e.error else f"{e.prompt_tokens}+{e.completion_tokens} tokens"
            return f"LLM {e.purpose}: {status}, {e.latency_s:.2f}s"
        case ev.StepFailed():
            return f"{e.purpose} failed: {e.reason}" + (f"; {e.fallback}" if e.fallback else "")
        case ev.ReproductionWritten():
            return f"reproduction test written (try {e.attempt})"
        case ev.TestsRan() if e.purpose == "prepare":
            return f"tests {tests_decision(True, e)}"  # a preparation: tests are on by the settings
        case ev.TestsRan():
            # a baseline runs before any attempt, on the base commit: it belongs to no attempt
            who = "" if not e.task_id else f"{e.task_id}: " if e.purpose == "baseline" else f"{e.task_id} attempt {e.attempt}: "
            limits = f"; {'; '.join(e.limits)}" if e.limits else ""
            memory = f"; memory: {e.memory_control}, peak {e.peak_memory_mb} MiB" if e.memory_control else ""
            return f"{who}{TEST_PURPOSES.get(e.purpose, e.purpose)} {verdict(e)} ({counts(e)}, {e.duration_s:.1f}s{limits}{memory})"
        case ev.CandidateChosen():
            return f"{e.task_id}: candidate {e.chosen} of {e.candidates} chosen ({e.reason})"
        case ev.RunResumed():
            return f"run resumed from version {e.kept_version} ({e.superseded} events superseded)"
        case ev.RunFinished():
            return f"run finished: {e.outcome}"
        case ev.RunFailed():
            return f"run failed: {e.reason}"
    return type(e).__name__


TEST_PURPOSES = {"reproduce": "reproduction test on the base commit", "baseline": "regression tests, baseline at the base commit",
                 "check": "tests of the patch"}


def test_run_json(run: ev.TestsRan) -> dict:
    return {**{k: v for k, v in to_builtins(run).items() if k != "type"},
            "verdict": verdict(run), "kind": kind(run), "counts": counts(run)}


def test_run_markdown(run: ev.TestsRan) -> list[str]:
    lines = [f"Tests: {describe(run)}, `{run.command}`"]
    if run.failed:
        lines.append("Failed: " + ", ".join(f"`{t}`" for t in run.failed[:20]))
    if run.outcome != "passed" and run.output:
        lines.append(_fence(run.output[-1500:]))
    return lines + [""]


def superseded(view: RunView) -> set[int]:
    """Versions of the events a resumed run superseded (history, but not the run's state)."""
    return {r.version for r in view.timeline} - {r.version for r in effective(view.timeline, keep_markers=True)}


def _failed(e: ev.AnyEvent) -> bool:
    return isinstance(e, (ev.StepFailed, ev.RunFailed)) or (isinstance(e, ev.LLMExchanged) and bool(e.error))


def _where(r: ev.Recorded, old: set[int]) -> dict:
    return {"version": r.version, "time": r.time, "actor": r.actor, "role": role_of(r.actor), "superseded": r.version in old}


def _exchange_json(r: ev.Recorded, old: set[int]) -> dict:
    x: ev.LLMExchanged = r.event  # type: ignore[assignment]
    return {**_where(r, old), **{k: v for k, v in to_builtins(x).items() if k != "type"}, "what": describe(x)}


def _failures(view: RunView, old: set[int]) -> list[dict]:
    """What went wrong, in order: failed steps and calls, failed tasks (their answers stayed
    invalid after corrections: no call failed, yet the task did), and the run's own failure."""
    out = []
    for r in view.timeline:
        e = r.event
        if isinstance(e, ev.StepFailed):
            what = e.purpose + (f" / {e.task_id}" if e.task_id else "") + (f" / {e.path}" if e.path else "")
            out.append({**_where(r, old), "what": what, "why": e.reason, "then": e.fallback})
        elif isinstance(e, ev.LLMExchanged) and e.error:
            out.append({**_where(r, old), "what": f"LLM call {e.purpose} (attempt {e.attempt})", "why": e.error, "then": ""})
        elif isinstance(e, ev.TaskFinished) and e.status == "failed":
            out.append({**_where(r, old), "what": f"task {e.task_id}", "why": e.reason or "failed", "then": "no patch for this task"})
        elif isinstance(e, ev.RunFailed):
            what = "run failed" + (f" ({e.error_type})" if e.error_type else "")
            out.append({**_where(r, old), "what": what, "why": e.reason, "then": "resumable" if e.resumable else "not resumable"})
    return out


def audit_json(view: RunView) -> dict:
    started = view.started
    old = superseded(view)
    return {
        "run_id": view.run_id,
        "status": view.status,
        "instance": to_builtins(started) if started else None,
        "outcome": view.finished.outcome if view.finished else None,
        "failure": view.failed.reason if view.failed else None,
        "located_files": view.located.paths if view.located else [],
        "summaries": [to_builtins(s) for s in view.summaries],
        "judgements": [to_builtins(j) for j in view.judgements],
        "meeting": [to_builtins(u) for u in view.meeting],
        "step_failures": [to_builtins(r.event) for r in view.timeline if isinstance(r.event, ev.StepFailed)],
        "plan": to_builtins(view.plan) if view.plan else None,
        "environment": test_run_json(view.environment) if view.environment else None,
        "reproduction": {
            "tries": [to_builtins(r) for r in view.reproductions],
            "runs": [test_run_json(r) for r in view.reproduction_runs],
        },
        "tasks": [
            {
                "task_id": t.task_id,
                "path": t.path,
                "description": t.description,
                "developer": to_builtins(t.developer) if t.developer else None,
                "qa": to_builtins(t.qa) if t.qa else None,
                "attempts": [
                    {
                        "attempt": p.attempt,
                        "diff": p.diff,
                        "candidate": p.candidate,
                        "review": next((to_builtins(r) for r in t.reviews if (r.candidate, r.attempt) == (p.candidate, p.attempt)), None),
                        "tests": [test_run_json(r) for r in t.test_runs if (r.candidate, r.attempt) == (p.candidate, p.attempt)],
                    }
                    for p in t.patches
                ],
                "chosen": to_builtins(t.chosen) if t.chosen else None,
                "regression_baseline": next((test_run_json(r) for r in t.test_runs if r.purpose == "baseline"), None),
                "status": t.finished.status if t.finished else "unfinished",
                "reason": t.finished.reason if t.finished else "",
            }
            for t in view.tasks.values()
        ],
        "timeline": [
            {"version": r.version, "time": r.time, "actor": r.actor, "type": type(r.event).__name__, "what": describe(r.event)}
            for r in view.timeline
        ],
        "metrics": metrics(view),
        "tests": view_tally(view).as_json(),
        # whether the run's tests run, and if not why: decided before any role acts
        "tests_decision": tests_decision(started.settings.tests, view.environment) if started else "",
        "files_changed": changed_files(view),
        "diff": final_diff(view),
        # what the pages show beside the above: the ranking, each decision with the model
        # exchanges that led to it, every exchange whole, what failed, and what a resume superseded
        "ranked": to_builtins(view.ranked) if view.ranked else None,
        "steps": [
            {**_where(st.record, old), "type": type(st.record.event).__name__, "what": describe(st.record.event),
             "failed": _failed(st.record.event), "exchanges": [{k: v for k, v in _exchange_json(x, old).items() if k not in ("messages", "answer")}
                                                             for x in st.exchanges]}
            for st in steps(view)
        ],
        "exchanges": [_exchange_json(r, old) for r in view.exchanges],
        "failures": _failures(view, old),
        "superseded": sorted(old),
        "resumptions": sum(isinstance(r.event, ev.RunResumed) for r in view.timeline),
        "summary": view.finished.summary if view.finished else "",
        "failure_type": view.failed.error_type if view.failed else "",
        "resumable": view.failed.resumable if view.failed else None,
    }


def cost_table(m: dict) -> list[str]:
    """Markdown rows of tokens, cost and time per role and the model that answered it."""
    rows = ["| role | model | calls | prompt tokens | completion tokens | cost (USD) | LLM seconds |",
            "|---|---|---:|---:|---:|---:|---:|"]
    lines = [(role, model, b) for role, models in m["by_role_model"].items() for model, b in models.items()]
    for role, model, b in [*lines, ("total", "", m["total"])]:
        rows.append(f"| {role} | {model} | {b['calls']} | {b['prompt_tokens']} | {b['completion_tokens']} | "
                    f"{b['cost_usd']:.4f} | {b['llm_seconds']:.2f} |")
    return rows


def _fence(text: str, lang: str = "") -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}\n"


def audit_markdown(view: RunView) -> str:
    started = view.started
    out: list[str] = []
    title = started.instance_id if started else view.run_id
    out.append(f"# Audit of run {view.run_id}: {title}\n")
    if started:
        out.append(f"- repository: {started.repo} @ `{started.base_commit}`")
        out.append(f"- model: {started.settings.model or '-'}; QA: {started.settings.use_qa}; hints: {started.settings.use_hints}; memory: {started.settings.use_memory}")
        if started.settings.endpoint.models:
            out.append("- models per role: " + ", ".join(f"{r.role}: {r.model}" for r in started.settings.endpoint.models))
    out.append(f"- status: {view.status}" + (f" ({view.finished.outcome})" if view.finished else ""))
    if view.failed:
        out.append(f"- failure: {view.failed.reason}")
    out.append("")
    if started:
        out += ["## Issue", "", _fence(started.problem_statement)]
    out += ["## Repository Custodian", ""]
    if view.ranked:
        out.append("BM25 candidates: " + ", ".join(f"`{c.path}` ({c.score:.2f})" for c in view.ranked.candidates))
        out.append("")
    for s in view.summaries:
        out.append(f"- `{s.path}` ({s.source}): {s.summary.strip()}")
    for j in view.judgements:
        out.append(f"- `{j.path}` judged {'relevant' if j.relevant else 'not relevant'}: {j.reason.strip()}")
    if view.located:
        out.append(f"\nLocated: {', '.join(f'`{p}`' for p in view.located.paths) or 'none'}\n")
    out += ["## Manager", ""]
    for t in view.tasks.values():
        dev = f" — {t.developer.name}" if t.developer else ""
        out.append(f"- **{t.task_id}** `{t.path}`{dev}: {t.description.strip()}")
    if view.meeting:
        out += ["", "### Kick-off meeting", ""]
        out += [f"**{u.speaker}:** {u.text.strip()}\n" for u in view.meeting]
    if view.plan:
        out.append("Plan: " + " → ".join("[" + ", ".join(s) + "]" for s in view.plan.stages) + "\n")
    if view.environment or view.reproductions:
        out += ["## Reproduction", ""]
        if view.environment:
            out.append(describe(view.environment) + "\n")
        for written in view.reproductions:
            out.append(f"### Try {written.attempt}: `{written.path}`\n")
            out.append(_fence(written.content, "python"))
            out += [line for run in view.reproduction_runs if run.attempt == written.attempt for line in test_run_markdown(run)]
    for t in view.tasks.values():
        out += [f"## Task {t.task_id}: `{t.path}`", ""]
        if t.qa:
            out.append(f"QA engineer: {t.qa.name}\n")
        for run in t.test_runs:
            if run.purpose == "baseline":
                out += test_run_markdown(run)
        for p in t.patches:
            out.append(f"### Candidate {p.candidate}, attempt {p.attempt}\n" if p.candidate else f"### Attempt {p.attempt}\n")
            out.append(_fence(p.diff or "(no change)", "diff"))
            for run in t.test_runs:
                if (run.candidate, run.attempt) == (p.candidate, p.attempt) and run.purpose == "check":
                    out += test_run_markdown(run)
            review = next((r for r in t.reviews if (r.candidate, r.attempt) == (p.candidate, p.attempt)), None)
            if review:
                out.append(f"Review: **{'approved' if review.approved else 'sent back'}** — {review.comment.strip()}\n")
        if t.chosen:
            out.append(f"Chosen: candidate {t.chosen.chosen} of {t.chosen.candidates} ({t.chosen.reason})\n")
        if t.finished:
            out.append(f"Result: {t.finished.status}" + (f" ({t.finished.reason})" if t.finished.reason else "") + "\n")
    failures = [r for r in view.timeline if isinstance(r.event, ev.StepFailed)]
    if failures:
        out += ["## Step failures", ""]
        out += [f"- `{r.actor}` {describe(r.event)}" for r in failures]
        out.append("")
    out += ["## Final diff", "", _fence(final_diff(view) or "(empty)", "diff")]
    m = metrics(view)
    out += ["## Cost", "", *cost_table(m)]
    tests = view_tally(view)
    if tests.runs:
        out.append(f"\nTests: {tests.words()}; {tests.seconds:.1f} s in the sandbox.")
    out.append(f"\nWall time: {m['total']['wall_seconds']:.1f} s over {m['total']['events']} events.\n")
    out += ["## Timeline", ""]
    out += [f"{r.version}. `{r.actor}` {describe(r.event)}" for r in view.timeline]
    return "\n".join(out) + "\n"
