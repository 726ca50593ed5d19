"""`magis-ray watch`: a run's (or a batch's) live view in the terminal, read from the store until
it ends. On a terminal the view is redrawn in place; into a pipe or file each decision is one line
as it is appended (with the tokens and cost of the exchanges that led to it), then the view once.
Model-written text never reaches the terminal raw: control characters (escape sequences too) are
shown as \\xNN."""
from __future__ import annotations

import re
import time
from typing import Callable, TextIO

from magis_ray.events import schema as ev
from magis_ray.events.projections import RunView
from magis_ray.events.projections.audit import describe
from magis_ray.events.projections.tests import verdict as test_verdict, view_tally
from magis_ray.events.projections.catalog import BatchSummary, Catalog, RunSummary
from magis_ray.store import Lease

from magis_ray.events.errors import BadInput
from ..progress import PhaseTicker
from ..source import RunsAndLeases, resolve_run_id
from ..wording import count, duration, money

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
GRACE_S = 2.0  # a batch counts as ended once nothing of it has run for this long (drivers pick instances up in turns)
CLEAR = "\x1b[H\x1b[2J"


def plain(text: object, limit: int = 200) -> str:
    """One line of text safe for a terminal: control characters shown as \\xNN, cut at `limit`."""
    line = _CONTROL.sub(lambda m: " " if m.group() in "\n\t\r" else f"\\x{ord(m.group()):02x}", str(text))
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def run_lines(summary: RunSummary, view: RunView, stalled: bool = False, lasted: str = "") -> list[str]:
    """The run's view: status, stage (and for how long, `lasted`), cost, then each task with its
    attempts, reviews and tests."""
    status = "stalled" if stalled else summary.status
    head = f"run {summary.run_id}  {plain(summary.instance_id)}  [{status}]"
    if summary.status == "finished":
        head += f" {summary.outcome}"
    lines = [head]
    if view.started:
        lines.append(f"  {plain(view.started.repo)} @ {view.started.base_commit[:12]}  model {plain(summary.model or '-')}"
                     + (f"  batch {plain(summary.batch)}" if summary.batch else ""))
    if summary.status == "failed":
        lines.append(f"  failed: {plain(summary.outcome)}")
    lines.append(f"  stage: {plain(summary.stage)}" + (f" ({lasted})" if lasted and not summary.ended else ""))
    lines.append(f"  tokens {summary.prompt_tokens:,} + {summary.completion_tokens:,}  cost {money(summary.cost_usd)}  "
                 f"calls {summary.calls}  time {summary.seconds:.1f} s  events {summary.events}")
    lines.append(f"  reviews: {summary.approvals} approved, {summary.rejections} sent back  "
                 f"{view_tally(view).words()}")
    for task in view.tasks.values():
        status = task.finished.status if task.finished else "working"
        lines.append(f"  {plain(task.task_id)} {plain(task.path)}: {status}")
        for patch in task.patches:
            review = next((r for r in task.reviews if (r.candidate, r.attempt) == (patch.candidate, patch.attempt)), None)
            tests = [t for t in task.test_runs if t.purpose == "check" and (t.candidate, t.attempt) == (patch.candidate, patch.attempt)]
            who = f"candidate {patch.candidate} " if patch.candidate else ""
            verdict = ("approved" if review.approved else "sent back") if review else "in review"
            line = f"    {who}attempt {patch.attempt}: {verdict}"
            if tests:
                line += "; tests " + ", ".join(test_verdict(t) for t in tests)
            if review and review.comment:
                line += f" ({plain(review.comment, 100)})"
            lines.append(line)
        if task.chosen:
            lines.append(f"    chosen: candidate {task.chosen.chosen} of {task.chosen.candidates} ({plain(task.chosen.reason, 100)})")
    return lines


def batch_lines(batch: BatchSummary, stalled: set[str]) -> list[str]:
    runs = sorted(batch.runs, key=lambda r: r.first_time)
    lines = [f"batch {plain(batch.name)}: {batch.ended} of {count(len(runs), 'run')} ended, {batch.count('running')} running, "
             f"{batch.count('failed')} failed, {batch.patched} patched; tokens {batch.tokens:,}, cost {money(batch.cost_usd)}"]
    for r in runs:
        status = "stalled" if r.run_id in stalled else r.status
        detail = plain(r.outcome, 80) if r.ended else plain(r.stage, 80)
        lines.append(f"  {r.run_id}  {plain(r.instance_id, 40):40}  {status:8}  {detail}  "
                     f"{count(r.tokens, 'token')}  {money(r.cost_usd)}")
    return lines


class Watcher:
    def __init__(self, store: RunsAndLeases, out: TextIO, interval: float = 1.0, now: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, redraw: bool | None = None) -> None:
        self.store, self.out, self.interval, self.now, self.sleep = store, out, interval, now, sleep
        self.redraw = out.isatty() if redraw is None else redraw

    def _print(self, lines: list[str]) -> None:
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()

    def _leases(self, prefix: str = "") -> dict[str, Lease]:
        return {lease.key: lease for lease in self.store.leases(prefix)}

    def watch_run(self, run: str) -> int:
        run_id = resolve_run_id(self.store, run)
        summary, view, ticker = RunSummary(run_id), RunView(), PhaseTicker()
        version, start = 0, None
        pending: dict[str, list[ev.LLMExchanged]] = {}
        shown: list[str] | None = None
        while True:
            for rec in self.store.read(run_id, version):
                version = rec.version
                summary.apply(rec)
                view.apply(rec)
                start = rec.time if start is None else start
                if not self.redraw:
                    self._decision_line(rec, pending, start)
            now = self.now()
            phase = ticker.tick(summary, now)  # a quiet phase (an environment, a slow model) is no hang
            if not self.redraw and phase:
                self._print(phase)
            lease = self._leases(run_id).get(run_id)
            stalled = not summary.ended and lease is not None and not lease.live(now)
            lines = run_lines(summary, view, stalled, duration(now - ticker.since) if ticker.stage else "")
            if self.redraw and lines != shown:
                self.out.write(CLEAR)
                self._print(lines)
                shown = lines
            if summary.ended or stalled:
                if not self.redraw:
                    self._print(["", *lines])
                if stalled:
                    self._print([f"magis-ray: run {run_id} stalled: no driver holds it any more; resume it with `magis-ray resume {run_id}`"])
                return 0 if summary.status == "finished" else 1
            self.sleep(self.interval)

    def _decision_line(self, rec: ev.Recorded, pending: dict[str, list[ev.LLMExchanged]], start: float) -> None:
        if isinstance(rec.event, ev.LLMExchanged):
            pending.setdefault(rec.actor, []).append(rec.event)
            return
        asked = pending.pop(rec.actor, [])
        cost = ""
        if asked:
            tokens = sum(x.prompt_tokens + x.completion_tokens for x in asked)
            cost = f"  [{count(len(asked), 'call')}, {count(tokens, 'token')}, {money(sum(x.cost_usd for x in asked))}]"
        self._print([f"+{rec.time - start:7.1f}s  {plain(rec.actor, 40):24} {plain(describe(rec.event))}{cost}"])

    def watch_batch(self, name: str) -> int:
        catalog, shown = Catalog(), None
        reported: dict[str, str] = {}
        quiet_since: float | None = None
        first = True
        while True:
            while True:
                events = self.store.read_all(catalog.position, limit=5000)
                catalog.apply_all(events)
                if len(events) < 5000:
                    break
            batch = catalog.batch(name)
            now = self.now()
            leases = self._leases()
            live = any(l.live(now) for k, l in leases.items() if k.startswith(f"batch:{name}:")) or any(
                leases[r.run_id].live(now) for r in batch.runs if r.run_id in leases)
            stalled = {r.run_id for r in batch.runs if not r.ended and r.run_id in leases and not leases[r.run_id].live(now)}
            if first and not batch.runs and not live:
                raise BadInput(f"no batch {name} in the store (its runs' settings name their batch)")
            first = False
            lines = batch_lines(batch, stalled)
            if self.redraw:
                if lines != shown:
                    self.out.write(CLEAR)
                    self._print(lines)
                    shown = lines
            else:
                for r in sorted(batch.runs, key=lambda r: r.first_time):
                    state = "stalled" if r.run_id in stalled else r.status
                    if reported.get(r.run_id) != state:
                        reported[r.run_id] = state
                        what = plain(r.outcome, 100) if r.ended else ""
                        self._print([f"run {r.run_id} {plain(r.instance_id, 60)}: {state}{' ' + what if what else ''}"
                                     f"  ({batch.ended} of {len(batch.runs)} ended, {money(batch.cost_usd)})"])
            done = bool(batch.runs) and not live and all(r.ended or r.run_id in stalled for r in batch.runs)
            quiet_since = (quiet_since or now) if done else None
            if done and now - quiet_since >= GRACE_S:
                if not self.redraw:
                    self._print(["", *lines])
                return 0 if all(r.status == "finished" for r in batch.runs) else 1
            self.sleep(self.interval)
