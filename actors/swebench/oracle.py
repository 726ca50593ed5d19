"""The `oracle` answer source: a scripted team that answers every step of a run from an
instance's gold patch, to evaluate the framework itself. If the pipeline is sound, a run
driven by the oracle reproduces the gold patch's effect byte for byte.

It judges relevant exactly the gold files among the BM25 candidates (when there are none, the
top candidate, so the Manager is still asked); every define_task answer lists the other gold
files as `new_files`, so each gold file gets one task whatever BM25 found (the Manager turns
an existing path into an ordinary task); each task's lines and code are the gold hunks
(edits_from_texts of the base and gold texts), and every review approves.

What the pipeline cannot express (see `Oracle.limits`): deleting a file; removing a file's
final newline, or creating a file without one (apply_edits adds it); creating an empty file;
bytes that are not UTF-8 (files are read as text); "\\n"-only lines added to an all-"\\r\\n"
file (apply_edits converts them); an issue in which BM25 finds no candidate at all.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import msgspec

from magis_ray.events.schema import Edit, RunFailed, RunFinished, RunSettings
from magis_ray.events.settings import EndpointSettings

from magis_ray.actors.code.edits import apply_edits, edits_from_texts
from magis_ray.actors.code.ranking import localize_files, ranking_settings, select_documents
from magis_ray.actors.code.repository import RepoSnapshot
from magis_ray.actors.model.scripted_server import ScriptedRequest, ScriptedServer
from magis_ray.actors.model.scripted_team import ScriptedTeam
from magis_ray.actors.swebench.instances import Instance, ScratchIndex, gold_files

# The template line that names the step's file, matched as a whole line, so that a path quoted
# in the issue text (which comes first) is not taken for it.
_FILE_LINE = {
    "judge_relevance": r"^Candidate file `([^`\n]+)`, described as:$",
    "define_task": r"^File `([^`\n]+)`, described as:$",
    "locate_lines": r"^The file `([^`\n]+)` \(\d+ lines\), with line numbers:$",
    "write_code": r"^In the file `([^`\n]+)`, these parts are to be replaced:$",
}


def file_of(request: ScriptedRequest) -> str:
    pattern = _FILE_LINE[request.purpose]
    match = re.search(pattern, request.text, re.MULTILINE)
    return match.group(1) if match else ""


@dataclass
class OracleTeam(ScriptedTeam):
    """A ScriptedTeam whose fixes are the gold edits; `relevant`: the candidates it judges relevant."""

    relevant: frozenset[str] = frozenset()
    gold: tuple[str, ...] = ()

    def answer(self, request: ScriptedRequest) -> dict | None:
        if request.purpose not in _FILE_LINE:
            return super().answer(request)
        path = file_of(request)
        match request.purpose:
            case "judge_relevance":
                return {"relevant": path in self.relevant, "reason": "oracle: the gold patch changes it" if path in self.gold else "oracle"}
            case "define_task":
                others = [{"path": g, "task": _task(g)} for g in self.gold if g != path]
                return {"needed": path in self.fixes, "task": _task(path), "new_files": others}
            case "locate_lines":
                return {"ranges": [{"start": e.range.start, "end": e.range.end} for e in self.fixes.get(path, [])], "reason": "oracle"}
            case _:  # write_code
                return {"edits": [{"start": e.range.start, "end": e.range.end, "new_code": e.new_code} for e in self.fixes.get(path, [])]}


def _task(path: str) -> str:
    return f"Make the reference change to {path}."


@dataclass
class Oracle:
    team: OracleTeam
    candidates: list[str]  # the BM25 candidates the Custodian will see, best first
    limits: dict[str, str] = field(default_factory=dict)  # gold file -> why the pipeline cannot reproduce it


def gold_edits(base_text: str, new_text: str) -> tuple[list[Edit], str]:
    """The edits turning base into gold, and "" or the reason apply_edits cannot reproduce it."""
    edits = edits_from_texts(base_text, new_text)
    if apply_edits(base_text, edits) == new_text:
        return edits, ""
    if not new_text.endswith("\n") and (base_text.endswith("\n") or not base_text):
        return edits, "ends without the final newline apply_edits gives it"
    return edits, "line endings apply_edits normalizes (\\n lines in a \\r\\n file)"


# The oracle answers every step from the gold patch and runs no test; it ranks as a run does.
ORACLE_SETTINGS = RunSettings(tests=False)


def build_oracle(instance: Instance, repo_path: str, settings: RunSettings = ORACLE_SETTINGS) -> Oracle:
    """The oracle for one instance, its repository at `repo_path`.

    Raises RepoError (repository or commit missing) or PatchError (the gold patch does not apply).
    """
    snapshot = RepoSnapshot.open(repo_path, instance.base_commit)
    with ScratchIndex(repo_path, instance.base_commit) as scratch:
        gold_after = scratch.apply(instance.patch)
    gold = gold_files(instance.patch)
    fixes: dict[str, list[Edit]] = {}
    limits: dict[str, str] = {}
    for path in gold:
        after = gold_after.get(path)
        if after is None:
            limits[path] = "deletes the file" if path in gold_after else "the patch leaves it unchanged"
            continue
        try:
            new_text = after.decode("utf-8")
        except UnicodeDecodeError:
            limits[path] = "not UTF-8 text"
            continue
        if not new_text:
            limits[path] = "creates an empty file"
            continue
        base_text = snapshot.read_text(path) if snapshot.blob_id(path) else ""
        fixes[path], why = gold_edits(base_text, new_text)
        if why:
            limits[path] = why
    # The same ranking the Custodian computes from the same inputs, so the oracle knows its candidates.
    ranking = ranking_settings(settings.ranking)
    ranked = localize_files(select_documents(snapshot, settings=ranking), instance.issue().brief(settings.use_hints),
                            k=settings.top_k, settings=ranking)
    candidates = [path for path, _ in ranked]
    if not candidates:
        limits["(ranking)"] = "BM25 finds no candidate, so no file is located and the Manager is never asked"
    relevant = frozenset(c for c in candidates if c in fixes) or frozenset(candidates[:1])
    team = OracleTeam(fixes=fixes, relevant=relevant, gold=tuple(p for p in gold if p in fixes))
    return Oracle(team=team, candidates=candidates, limits=limits)


def run_oracle(instance: Instance, repo_path: str, store, run_id: str, settings: RunSettings = ORACLE_SETTINGS,
               oracle: Oracle | None = None) -> RunFinished | RunFailed:
    """One whole run of `instance` in this process (real gateway over HTTP, the given store),
    the model being the oracle. Returns the run's terminal event."""
    from magis_ray.actors.model.gateway import Gateway, GatewayConfig
    from magis_ray.actors.runtime.inprocess import LocalLLM, run_in_process

    oracle = oracle or build_oracle(instance, repo_path, settings)
    issue = msgspec.structs.replace(instance.issue(), repo_path=str(repo_path))  # the run records where it was
    with ScriptedServer(oracle.team) as server:
        # The oracle writes whole gold files at once: no answer-length cap of a real model applies.
        config = GatewayConfig(base_url=server.base_url, api_key="oracle", model="oracle", endpoint=EndpointSettings(timeout=60.0),
                               max_retries=1, backoff_base_s=0.01, max_tokens=10_000_000)
        llm = LocalLLM(Gateway(config))
        try:
            return run_in_process(store=store, issue=issue, settings=settings, repo_path=str(repo_path), llm=llm, run_id=run_id)
        finally:
            llm.close()


@dataclass(frozen=True)
class GoldComparison:
    applies: bool
    identical: bool  # every file the gold patch touches is byte-identical to the gold result
    differing: tuple[str, ...] = ()
    reason: str = ""


def compare_with_gold(repo_path: str, instance: Instance, diff: str) -> GoldComparison:
    """Does `diff` apply to the base commit, and leave every gold file exactly as the gold patch does?"""
    with ScratchIndex(repo_path, instance.base_commit) as scratch:
        gold_after = scratch.apply(instance.patch)
        problem = scratch.check(diff)
        if problem is not None:
            return GoldComparison(False, False, tuple(gold_after), problem)
        run_after = scratch.apply(diff)
    unchanged = object()
    touched = sorted(set(gold_after) | set(run_after))
    differing = tuple(p for p in touched if gold_after.get(p, unchanged) != run_after.get(p, unchanged))
    return GoldComparison(True, not differing, differing, f"differs in {', '.join(differing)}" if differing else "")
