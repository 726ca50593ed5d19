"""Manager (Algorithm 2): file-level tasks, one Developer per task, the kick-off meeting as a
round table, and the plan: stages of tasks that run in parallel, stages in order."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from magis_ray.events.schema import DeveloperRecruited, MeetingUtterance, PlanMade, StepFailed as StepFailedEvent, TaskDefined

from magis_ray.actors.model.answers import PersonaAnswer, PlanAnswer, TaskAnswer, UtteranceAnswer
from magis_ray.actors.model.asking import Asker, NoUsableAnswer
from magis_ray.actors.code.repository import UnsafePath, safe_repo_path
from magis_ray.actors.roles.custodian import LocatedFile, clip

EXCERPT_CHARS = 3_000


def parallel(items: list, work: Callable) -> list:
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(work, items))


def normalize_stages(stages: list[list[str]], task_ids: list[str]) -> list[list[str]]:
    """Every task exactly once: unknown ids and repeats dropped, forgotten tasks in a last stage."""
    seen: set[str] = set()
    clean = []
    for stage in stages:
        kept = [t for t in dict.fromkeys(stage) if t in task_ids and t not in seen]
        seen.update(kept)
        if kept:
            clean.append(kept)
    missing = [t for t in task_ids if t not in seen]
    return clean + [missing] if missing else clean


def _paths_stay_inside(answer: TaskAnswer) -> None:
    for new in answer.new_files:
        try:
            safe_repo_path(new.path)
        except UnsafePath as exc:
            raise ValueError(f"new file path {new.path!r} is not allowed: {exc}") from None


class Manager:
    def __init__(self, asker_for: Callable[[str], Asker], issue_text: str, read_text: Callable[[str], str],
                 blob_id: Callable[[str], str | None]):
        self._asker_for = asker_for
        self._issue = issue_text
        self._read_text = read_text
        self._blob_id = blob_id
        self._asker = asker_for("manager")

    def define_tasks(self, files: list[LocatedFile]) -> list[TaskDefined]:
        """One task per located file that needs a change, plus any file the fix must create."""

        def define(f: LocatedFile) -> TaskAnswer | None:
            asker = self._asker_for(f"manager:{f.path}")
            try:
                return asker.ask(
                    "define_task", TaskAnswer, check=_paths_stay_inside, issue=self._issue, path=f.path,
                    description=f.description, excerpt=clip(self._read_text(f.path), EXCERPT_CHARS),
                )
            except NoUsableAnswer as exc:
                asker.journal.emit(StepFailedEvent(purpose="define_task", reason=str(exc), path=f.path, fallback="no task for this file"))
                return None

        wanted: dict[str, tuple[str, str]] = {}  # path -> (task, base blob id); first definition wins
        for f, answer in zip(files, parallel(files, define)):
            if answer is None:
                continue
            if answer.needed and answer.task.strip():
                wanted.setdefault(f.path, (answer.task.strip(), f.blob_id))
            for new in answer.new_files:
                path = safe_repo_path(new.path)
                wanted.setdefault(path, (new.task.strip() or f"Create {path}.", self._blob_id(path) or ""))
        tasks = []
        for path, (description, blob_id) in wanted.items():
            task = TaskDefined(task_id=f"T{len(tasks) + 1}", path=path, description=description, base_blob_id=blob_id)
            self._asker.journal.emit(task)
            tasks.append(task)
        return tasks

    def recruit(self, tasks: list[TaskDefined]) -> list[DeveloperRecruited]:
        def design(task: TaskDefined) -> DeveloperRecruited:
            asker = self._asker_for(f"manager:{task.task_id}")
            try:
                persona = asker.ask(
                    "design_developer", PersonaAnswer, issue=self._issue, task_id=task.task_id, path=task.path, task=task.description
                )
                recruit = DeveloperRecruited(task_id=task.task_id, name=persona.name.strip() or f"Developer {task.task_id}", profile=persona.profile)
            except NoUsableAnswer as exc:
                recruit = DeveloperRecruited(task_id=task.task_id, name=f"Developer {task.task_id}", profile="A careful Python developer.")
                asker.journal.emit(StepFailedEvent(purpose="design_developer", reason=str(exc), task_id=task.task_id, fallback="a generic developer"))
            asker.journal.emit(recruit)
            return recruit

        return parallel(tasks, design)

    def hold_meeting(self, tasks: list[TaskDefined], team: list[DeveloperRecruited]) -> list[MeetingUtterance]:
        """The round table: the Manager opens, each Developer speaks in turn, the Manager sums up."""
        roster = "\n".join(f"- {t.task_id} on `{t.path}` ({d.name}): {t.description}" for t, d in zip(tasks, team))
        transcript: list[MeetingUtterance] = []

        def speak(asker: Asker, speaker: str, template: str, **values) -> None:
            try:
                text = asker.ask(template, UtteranceAnswer, issue=self._issue, **values).text.strip()
            except NoUsableAnswer as exc:
                asker.journal.emit(StepFailedEvent(purpose=template, reason=str(exc), task_id=values.get("task_id", ""), fallback="stayed silent"))
                return
            utterance = MeetingUtterance(turn=len(transcript) + 1, speaker=speaker, text=text)
            asker.journal.emit(utterance)
            transcript.append(utterance)

        speak(self._asker, "Manager", "meeting_open", tasks=roster)
        for task, dev in zip(tasks, team):
            speak(
                self._asker_for(f"developer:{task.task_id}:meeting"), dev.name, "meeting_speak",
                name=dev.name, profile=dev.profile, task_id=task.task_id, path=task.path, task=task.description,
                transcript=self.transcript_text(transcript),
            )
        speak(self._asker, "Manager", "meeting_close", transcript=self.transcript_text(transcript))
        return transcript

    @staticmethod
    def transcript_text(transcript: list[MeetingUtterance]) -> str:
        return "\n".join(f"{u.speaker}: {u.text}" for u in transcript) or "(nothing said yet)"

    def make_plan(self, tasks: list[TaskDefined], transcript: list[MeetingUtterance]) -> PlanMade:
        task_ids = [t.task_id for t in tasks]
        listing = "\n".join(f"- {t.task_id} on `{t.path}`: {t.description}" for t in tasks)
        try:
            answer = self._asker.ask("make_plan", PlanAnswer, tasks=listing, transcript=self.transcript_text(transcript))
            plan = PlanMade(stages=normalize_stages(answer.stages, task_ids), rationale=answer.rationale)
        except NoUsableAnswer as exc:
            plan = PlanMade(stages=[task_ids], rationale="fallback: all tasks in parallel")
            self._asker.journal.emit(StepFailedEvent(purpose="make_plan", reason=str(exc), fallback="all tasks in one stage"))
        self._asker.journal.emit(plan)
        return plan
