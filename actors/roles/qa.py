"""QA Engineer: reviews each diff of its Developer, approving it or sending it back with a comment."""
from __future__ import annotations

from magis_ray.events.schema import PatchProposed, QAAssigned, ReviewIssued
from magis_ray.events.schema import StepFailed as StepFailedEvent

from magis_ray.actors.model.answers import ReviewAnswer
from magis_ray.actors.model.asking import Asker, StepFailed


class QAEngineer:
    def __init__(self, asker: Asker, issue_text: str, task_description: str):
        self._asker = asker
        self._issue = issue_text
        self._task = task_description

    def review(self, qa: QAAssigned, patch: PatchProposed) -> ReviewIssued | None:
        try:
            answer = self._asker.ask(
                "review_patch", ReviewAnswer, task_id=patch.task_id, name=qa.name, profile=qa.profile,
                issue=self._issue, path=patch.path, task=self._task, diff=patch.diff,
            )
        except StepFailed as exc:
            self._asker.journal.emit(StepFailedEvent(purpose="review_patch", reason=str(exc), task_id=patch.task_id, fallback="no review"))
            return None
        review = ReviewIssued(task_id=patch.task_id, attempt=patch.attempt, approved=answer.approved, comment=answer.comment)
        self._asker.journal.emit(review)
        return review
