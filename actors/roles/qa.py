"""QA Engineer: reviews each diff of its Developer, approving it or sending it back with a comment.
With tests on, the QA side also writes the issue's reproduction test before the Developers start,
and each review sees what the tests said of the patch."""
from __future__ import annotations

from magis_ray.events.schema import PatchProposed, QAAssigned, ReproductionWritten, ReviewIssued
from magis_ray.events.schema import StepFailed as StepFailedEvent

from magis_ray.actors.code.suites import ReproductionPlace, TestSuite
from magis_ray.actors.model.answers import ReproductionAnswer, ReviewAnswer
from magis_ray.actors.model.asking import Asker, NoUsableAnswer
from magis_ray.actors.model.prompting import render
from magis_ray.actors.roles.testing import Evidence, Reproduction, Tester, TestRequest, reproduces


class QAEngineer:
    def __init__(self, asker: Asker, issue_text: str, task_description: str):
        self._asker = asker
        self._issue = issue_text
        self._task = task_description

    def review(self, qa: QAAssigned, patch: PatchProposed, evidence: Evidence | None = None) -> ReviewIssued | None:
        values = dict(task_id=patch.task_id, name=qa.name, profile=qa.profile, issue=self._issue, path=patch.path,
                      task=self._task, diff=patch.diff)
        try:
            if evidence is None:
                answer = self._asker.ask("review_patch", ReviewAnswer, **values)
            else:
                answer = self._asker.ask("review_patch_tested", ReviewAnswer, evidence=evidence.summary(), **values)
        except NoUsableAnswer as exc:
            self._asker.journal.emit(StepFailedEvent(purpose="review_patch", reason=str(exc), task_id=patch.task_id, fallback="no review"))
            return None
        approved, comment = answer.approved, answer.comment
        if approved and evidence is not None and evidence.blocks_approval:
            # The tests have the last word: a patch they reject is sent back whatever the review says.
            approved = False
            comment = f"The tests reject this patch.\n{evidence.summary()}\n(The reviewer had said: {comment.strip() or 'approved'})"
        review = ReviewIssued(task_id=patch.task_id, attempt=patch.attempt, approved=approved, comment=comment,
                              candidate=patch.candidate)
        self._asker.journal.emit(review)
        return review


def write_reproduction(asker: Asker, tester: Tester, issue_text: str, files: str, max_tries: int, suite: TestSuite,
                       place: ReproductionPlace) -> Reproduction | None:
    """The QA side's reproduction test, in the repository's own framework and place (`suite`,
    `place`): written from the issue, run on the base commit, and sent back while it does not fail
    there. None (and the log says so) when no try reproduces."""
    guide = render(f"reproduction_{suite.name}", path=place.path, target=place.target, folder=place.folder)[0].content
    feedback = ""
    for attempt in range(1, max_tries + 1):
        try:
            # `path` too: a user's own template (MAGIS_PROMPTS_DIR) may name it, as the pytest guide does
            answer = asker.ask("write_reproduction", ReproductionAnswer, issue=issue_text, files=files, guide=guide,
                               path=place.path, feedback=feedback)
        except NoUsableAnswer as exc:
            asker.journal.emit(StepFailedEvent(purpose="write_reproduction", reason=str(exc), fallback="no reproduction test"))
            return None
        asker.journal.emit(ReproductionWritten(path=place.path, content=answer.content, attempt=attempt))
        run = tester.run(TestRequest("reproduce", (place.target,), files=((place.path, answer.content),)), attempt=attempt)
        why_not, tests = reproduces(run, place.target, suite)
        if not why_not:
            return Reproduction(place.path, answer.content, place.target, tests)
        feedback = (f"\nYour earlier test was run on the unfixed code:\n```python\n{answer.content}\n```\n"
                    f"It cannot be the reproduction test: {why_not}\nWrite a test that fails on the unfixed code because of the bug.\n")
    asker.journal.emit(StepFailedEvent(
        purpose="write_reproduction", reason=f"no test failed on the base commit in {max_tries} tries",
        fallback="the run goes on without a reproduction test",
    ))
    return None
