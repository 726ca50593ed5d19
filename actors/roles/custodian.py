"""Repository Custodian (Algorithm 1): rank the files with BM25, describe the candidates through
the summary memory, and keep the ones the model judges relevant."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from magis_ray.events.schema import FileJudged, FilesLocated, FilesRanked, FileSummarized, RankedFile, RunSettings
from magis_ray.events.summaries import SummaryMemory

from magis_ray.actors.model.answers import CommitMessageAnswer, RelevanceAnswer, SummaryAnswer
from magis_ray.actors.model.asking import Asker, NoUsableAnswer
from magis_ray.actors.code.ranking import localize_files, ranking_settings, select_documents
from magis_ray.actors.code.repository import RepoSnapshot

# The model reads at most this much of a file to summarize it; the rest is cut with a marker.
SUMMARY_CHARS = 12_000


@dataclass(frozen=True)
class LocatedFile:
    path: str
    blob_id: str
    description: str


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters cut)"


class Custodian:
    def __init__(
        self,
        snapshot: RepoSnapshot,
        memory: SummaryMemory,
        asker_for: Callable[[str], Asker],
        repo: str,
        settings: RunSettings,
    ):
        self._snapshot = snapshot
        self._memory = memory
        self._asker_for = asker_for
        self._repo = repo
        self._settings = settings
        self._memory_before: int | None = None

    def locate(self, issue_text: str, memory_before: int | None = None) -> list[LocatedFile]:
        """`memory_before`: the run's start position; the memory is read as it was then, so a
        replay or a resume sees what the original run saw."""
        self._memory_before = memory_before
        journal = self._asker_for("custodian").journal
        ranking = ranking_settings(self._settings.ranking)
        documents = select_documents(self._snapshot, settings=ranking)
        ranked = localize_files(documents, issue_text, k=self._settings.top_k, settings=ranking)
        journal.emit(FilesRanked(
            candidates=[RankedFile(path, round(score, 4), self._snapshot.blob_id(path) or "") for path, score in ranked],
            files_total=len(documents),
        ))
        # Each candidate is its own lane, so the files are described and judged in parallel.
        with ThreadPoolExecutor(max_workers=max(1, len(ranked))) as pool:
            verdicts = list(pool.map(lambda item: self._examine(item[0], issue_text), ranked))
        located = [f for f in verdicts if f is not None][: self._settings.max_files]
        journal.emit(FilesLocated(paths=[f.path for f in located]))
        return located

    def _examine(self, path: str, issue_text: str) -> LocatedFile | None:
        asker = self._asker_for(f"custodian:{path}")
        blob_id = self._snapshot.blob_id(path) or ""
        try:
            description = self._describe(asker, path, blob_id)
            verdict = asker.ask("judge_relevance", RelevanceAnswer, issue=issue_text, path=path, description=description)
        except NoUsableAnswer as exc:
            asker.journal.emit(FileJudged(path=path, relevant=False, reason=f"no usable answer: {exc}"))
            return None
        asker.journal.emit(FileJudged(path=path, relevant=verdict.relevant, reason=verdict.reason))
        return LocatedFile(path, blob_id, description) if verdict.relevant else None

    def _describe(self, asker: Asker, path: str, blob_id: str) -> str:
        """The memory's summary when it has this version; an earlier version's summary plus a
        commit message of the diff when that is cheaper than the file; else a fresh summary."""
        text = self._snapshot.read_text(path)
        use_memory = self._settings.use_memory
        # a summary is only as good as the model that wrote it: reuse this run's model's, unless told otherwise
        by = None if self._settings.memory_any_model else self._settings.model_of("custodian")
        if use_memory:
            same = self._memory.get_summary(self._repo, path, blob_id, self._memory_before, by)
            if same is not None:
                asker.journal.emit(FileSummarized(path=path, blob_id=blob_id, summary=same.summary, source="memory"))
                return same.summary
            earlier = self._memory.latest_summary(self._repo, path, self._memory_before, by)
            if earlier is not None and len(earlier.summary) < len(text) and self._snapshot.has_blob(earlier.blob_id):
                diff = self._snapshot.diff_blobs(earlier.blob_id, blob_id, path)
                if len(diff) < len(text):
                    message = asker.ask("commit_message", CommitMessageAnswer, path=path, diff=diff).message
                    summary = f"{earlier.summary.strip()}\nChanged since: {message.strip()}"
                    asker.journal.emit(FileSummarized(
                        path=path, blob_id=blob_id, summary=summary, source="diff",
                        earlier_blob_id=earlier.blob_id, commit_message=message,
                    ))
                    self._memory.put_summary(self._repo, path, blob_id, summary, self._settings.model_of("custodian"))
                    return summary
        summary = asker.ask(
            "summarize_file", SummaryAnswer, path=path, repo=self._repo, content=clip(text, SUMMARY_CHARS)
        ).summary
        asker.journal.emit(FileSummarized(path=path, blob_id=blob_id, summary=summary, source="fresh"))
        if use_memory:
            self._memory.put_summary(self._repo, path, blob_id, summary, self._settings.model_of("custodian"))
        return summary
