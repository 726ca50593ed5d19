"""Choosing among a task's candidate patches (`--candidates N`): the tests filter, a majority of
equivalent patches decides, and the QA Engineer breaks a tie.

1. Keep the candidates that ended with a patch; of those, the ones the tests accept (the
   reproduction test passes, no regression test that passed before fails). When none passes,
   all patched candidates stay in, and the reason says so.
2. Group them by their normalized diff (only the changed lines count: not hunk positions, not
   whitespace at line ends, not blank lines) and take the largest group.
3. Between groups of equal size the QA Engineer chooses, reading the diffs and what the tests
   said; an unusable answer falls back to the lowest-numbered candidate."""
from __future__ import annotations

from magis_ray.events.schema import CandidateChosen
from magis_ray.events.schema import StepFailed as StepFailedEvent

from magis_ray.actors.model.answers import ChoiceAnswer
from magis_ray.actors.model.asking import Asker, NoUsableAnswer
from magis_ray.actors.roles.developer import TaskResult


def normalized(diff: str) -> str:
    """The diff's changes alone: its removed and added lines, stripped of trailing whitespace,
    blank ones left out, per file; equal for patches that make the same change."""
    kept = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            kept.append(line.split("\t")[0].rstrip())
        elif line.startswith(("+", "-")) and line[1:].strip():
            kept.append(line[0] + line[1:].rstrip())
    return "\n".join(kept)


def accepted_by_tests(result: TaskResult) -> bool:
    return result.evidence is None or not result.evidence.blocks_approval


def choose(results: list[TaskResult], tie_breaker: Asker | None, issue_text: str) -> tuple[TaskResult, CandidateChosen] | None:
    """The chosen candidate and the event that says why; None when no candidate has a patch."""
    task_id = results[0].finished.task_id
    patched = [r for r in results if r.patch is not None]
    if not patched:
        return None
    passing = [r for r in patched if accepted_by_tests(r)]
    tested = any(r.evidence is not None for r in patched)
    pool = passing or patched
    filter_note = (f"{len(passing)} of {len(patched)} patched candidates pass the tests" if tested and passing
                   else f"none of the {len(patched)} patched candidates passes the tests" if tested
                   else f"{len(patched)} patched candidates, untested")
    groups: dict[str, list[TaskResult]] = {}
    for r in pool:
        groups.setdefault(normalized(r.patch.diff), []).append(r)
    largest = max(len(g) for g in groups.values())
    tied = [g for g in groups.values() if len(g) == largest]
    if len(tied) == 1:
        winner, why = tied[0][0], f"{filter_note}; {largest} of {len(pool)} make the same change"
    else:
        winner, why = _break_tie([g[0] for g in tied], tie_breaker, issue_text)
        why = f"{filter_note}; {len(tied)} different changes with {largest} vote(s) each; {why}"
    votes = len(groups[normalized(winner.patch.diff)])
    return winner, CandidateChosen(task_id=task_id, chosen=winner.finished.candidate, candidates=len(results), reason=why,
                                   votes=votes)


def _break_tie(options: list[TaskResult], asker: Asker | None, issue_text: str) -> tuple[TaskResult, str]:
    options = sorted(options, key=lambda r: r.finished.candidate)
    if asker is None:
        return options[0], "the lowest-numbered candidate taken"
    numbers = [r.finished.candidate for r in options]
    listing = "\n\n".join(
        f"Candidate {r.finished.candidate}:\n```diff\n{r.patch.diff}```\n"
        + (f"Tests: {r.evidence.summary()}" if r.evidence is not None else "Tests: none ran.")
        for r in options
    )

    def offered(answer: ChoiceAnswer) -> None:
        if answer.candidate not in numbers:
            raise ValueError(f"candidate must be one of {numbers}")

    try:
        answer = asker.ask("choose_candidate", ChoiceAnswer, task_id=options[0].finished.task_id, check=offered,
                           issue=issue_text, candidates=listing, numbers=", ".join(map(str, numbers)))
    except NoUsableAnswer as exc:
        asker.journal.emit(StepFailedEvent(purpose="choose_candidate", reason=str(exc), task_id=options[0].finished.task_id,
                                           fallback="the lowest-numbered candidate"))
        return options[0], "the QA engineer gave no usable choice; the lowest-numbered candidate taken"
    chosen = next(r for r in options if r.finished.candidate == answer.candidate)
    return chosen, f"the QA engineer chose it: {answer.reason.strip()}"
