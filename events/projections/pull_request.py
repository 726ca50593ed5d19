"""What a run's change says of itself in git and on a forge, written from the log: the commit
message of `magis-ray apply` and the pull-request description of `magis-ray audit --format pr`."""
from __future__ import annotations

import re

from magis_ray.events import schema as ev

from .audit import TEST_PURPOSES, cost_table
from .usage import metrics
from .state import RunView, TaskView
from .tests import counts, verdict, view_tally

ISSUE_LINES = 40  # the issue quoted in a description: its start, where the report is
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*")


def issue_title(view: RunView) -> str:
    """The issue's title: the first line of its problem statement (heading marks dropped)."""
    started = view.started
    text = started.problem_statement if started else ""
    first = next((line for line in text.splitlines() if line.strip()), "")
    title = " ".join(_HEADING.sub("", first).split()).rstrip("#").strip()
    return title or (started.instance_id if started else view.run_id)


def closing_reference(url: str) -> str:
    """"owner/name#N" for a GitHub issue's url (a pull request's body that says "Closes" it links
    the two); "" for anything else."""
    match = re.match(r"^[a-z]+://[^/]+/([^/\s]+)/([^/\s]+)/issues/(\d+)", url.strip())
    return f"{match.group(1)}/{match.group(2)}#{match.group(3)}" if match else ""


def _final_tasks(view: RunView) -> list[TaskView]:
    """The tasks whose patch is in the final diff, by path."""
    return sorted((t for t in view.tasks.values() if (p := t.final_patch) is not None and p.diff), key=lambda t: t.path)


def _verdict(task: TaskView) -> str:
    status = task.finished.status if task.finished else "unfinished"
    patch = task.final_patch
    reviews = [r for r in task.reviews if patch is None or r.candidate == patch.candidate]
    words = {"approved": "approved by its QA engineer", "unreviewed": "not reviewed (no QA)",
             "unapproved": "not approved by its QA engineer", "failed": "failed"}
    said = words.get(status, status)
    if patch is not None and patch.attempt > 1:
        said += f" after {patch.attempt} attempts"
    if task.chosen:
        said += f"; candidate {task.chosen.chosen} of {task.chosen.candidates} chosen"
    last = reviews[-1].comment.strip() if reviews else ""
    return said + (f" (\"{' '.join(last.split())[:200]}\")" if last else "")


def _final_check(task: TaskView) -> ev.TestsRan | None:
    """The test run of the task's final patch, if tests ran."""
    patch = task.final_patch
    if patch is None:
        return None
    runs = [r for r in task.test_runs if r.purpose == "check" and (r.candidate, r.attempt) == (patch.candidate, patch.attempt)]
    return runs[-1] if runs else None


def commit_message(view: RunView) -> str:
    """The issue's title, then what changed per file and how it was checked, then the run."""
    started = view.started
    lines = [issue_title(view), "", f"Made by the magis-ray team (MAGIS) in run {view.run_id}."]
    tasks = _final_tasks(view)
    if tasks:
        lines += ["", "What changed:"]
        for task in tasks:
            lines.append(f"- {task.path}: {' '.join(task.description.split())} ({_verdict(task).split(' (')[0]})")
            check = _final_check(task)
            if check is not None:
                lines.append(f"  Tests: {verdict(check)} ({counts(check)}).")
    if started and started.issue_url:
        lines += ["", f"Issue: {started.issue_url}"]
    if started:
        lines += ["", f"magis-ray-run: {view.run_id}", f"magis-ray-instance: {started.instance_id}"]
    return "\n".join(lines) + "\n"


def _fence(text: str, lang: str = "") -> str:
    fence = "````" if "```" in text else "```"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def _tests_section(view: RunView) -> list[str]:
    started = view.started
    if started is not None and not started.settings.tests:
        return ["The team ran no tests (`--tests off`): the patch was judged from its diff, as in the MAGIS paper."]
    if view.environment is not None and view.environment.outcome != "passed":
        return [f"No test environment could be made ({' '.join(view.environment.output.split())[:300]}), so no test ran."]
    rows = ["| when | tests | outcome | passed | failed |", "|---|---|---|---:|---:|"]
    for run in view.reproduction_runs:
        rows.append(f"| before the change | reproduction test (must fail) | {verdict(run)} | {len(run.passed)} | {len(run.failed)} |")
    for task in _final_tasks(view):
        baseline = next((r for r in task.test_runs if r.purpose == "baseline"), None)
        if baseline is not None:
            rows.append(f"| before the change | `{task.path}`'s nearest tests | {verdict(baseline)} | {len(baseline.passed)} | "
                        f"{len(baseline.failed)} |")
        check = _final_check(task)
        if check is not None:
            rows.append(f"| with the change | {TEST_PURPOSES['check']}: `{check.command}` | {verdict(check)} | {len(check.passed)} | "
                        f"{len(check.failed)} |")
    if len(rows) == 2:
        return ["No test ran."]
    failed = sorted({t for task in _final_tasks(view) if (c := _final_check(task)) for t in c.failed})
    out = [f"{view_tally(view).words()}.", "", *rows]
    if failed:
        out += ["", "Still failing with the change: " + ", ".join(f"`{t}`" for t in failed[:20])]
    return out


def pr_description(view: RunView) -> str:
    """A pull request's description in Markdown: the issue, the plan, the changes per file, the
    tests run and their outcome, the cost, and the command that shows the full audit (a path on
    the machine that made the run would mean nothing on GitHub)."""
    started = view.started
    out = [f"## {issue_title(view)}", ""]
    if started is not None:
        ref = closing_reference(started.issue_url)
        out.append(f"Closes {ref}." if ref else f"Resolves `{started.instance_id}`" +
                   (f" ({started.issue_url})." if started.issue_url else "."))
        out.append("")
        # the title is the heading already; the blank lines between it and the body are no part of the quote
        issue_lines = _without_blank_ends(started.problem_statement.strip().splitlines()[1:])
        quoted = issue_lines[:ISSUE_LINES] + (["…"] if len(issue_lines) > ISSUE_LINES else [])
        if any(line.strip() for line in quoted):
            out += ["### The issue", "", *(f"> {line}".rstrip() for line in quoted), ""]
    if view.plan is not None or view.tasks:
        out += ["### The plan", ""]
        stages = view.plan.stages if view.plan is not None else [list(view.tasks)]
        for number, stage in enumerate(stages, 1):
            for tid in stage:
                task = view.tasks.get(tid)
                if task is None:
                    continue
                who = f" ({task.developer.name})" if task.developer else ""
                out.append(f"{number}. **{tid}** `{task.path}`{who}: {' '.join(task.description.split())}")
        if view.plan is not None and view.plan.rationale.strip():
            out += ["", f"_{' '.join(view.plan.rationale.split())}_"]
        out.append("")
    out += ["### Changes", ""]
    tasks = _final_tasks(view)
    if not tasks:
        out += ["No change: the run ended without a patch.", ""]
    for task in tasks:
        patch = task.final_patch
        out += [f"#### `{task.path}`", "", f"{' '.join(task.description.split())}", "", f"Review: {_verdict(task)}.", "",
                _fence(patch.diff, "diff"), ""]
    out += ["### Tests", "", *_tests_section(view), ""]
    m = metrics(view)
    total = m["total"]
    out += ["### Cost", "",
            f"{total['calls']} model calls, {total['prompt_tokens']} prompt + {total['completion_tokens']} completion tokens, "
            f"${total['cost_usd']:.4f}.", "", *cost_table(m), ""]
    where = f"`magis-ray audit {view.run_id}`"
    out += ["---", f"Made by magis-ray's team of agents ([MAGIS](https://arxiv.org/abs/2403.17927)) in run `{view.run_id}`. "
            f"The full audit (every decision, who made it, why and at what cost): {where}."]
    return "\n".join(out) + "\n"


def _without_blank_ends(lines: list[str]) -> list[str]:
    start = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    end = next((i for i in range(len(lines), start, -1) if lines[i - 1].strip()), start)
    return lines[start:end]
