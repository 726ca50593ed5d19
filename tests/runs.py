"""A realistic MAGIS run, constructed event by event against the real `calc` repository of
tests/scenarios.py, for tests of the projections, the CLI and anything else that reads a log.

    repo, base = make_calc_repo(tmp_path / "calc")
    pairs = constructed_run(tmp_path / "calc", base)       # [(actor, event), ...]
    recorded = store.append(RUN_ID, 0, fixed_new_events(pairs))

The run resolves BOTH_ISSUE: the Custodian ranks, describes and judges the files and locates
calc/stats.py and calc/texts.py; the Manager defines tasks T1 (stats.py) and T2 (texts.py),
recruits a Developer for each, holds the kick-off meeting (where T2's Developer fails to speak:
a StepFailed) and makes a one-stage plan. T1's first patch is sent back by its QA engineer,
the second is approved. T2 fails (its line location gets no usable answer: StepFailed, then
TaskFinished "failed") unless `fix_texts=True`, when it is patched and approved too. Every
model call is an LLMExchanged in the lane of the actor that made it, with tokens, latency and
cost. Patches are real: the base text is read from the repository at `base_commit`, the new
text made by actors.code.edits.apply_edits and the diff by actors.code.diffs.file_diff.

Actors (lanes) follow the real team: "supervisor", "custodian", "custodian:<path>",
"manager", "manager:<path>", "manager:T1", "developer:T1", "developer:T1:meeting", "qa:T1".
"""
from __future__ import annotations

import os
from pathlib import Path

import pygit2
from scenarios import BOTH_ISSUE, MEAN_FIX, SHOUT_FIX

from magis_ray.actors.code.diffs import file_diff
from magis_ray.actors.code.edits import apply_edits
from magis_ray.events import schema as ev
from magis_ray.events.schema import AnyEvent, Edit, LineRange, Message, NewEvent

MODEL = "gpt-4o-mini"
INSTANCE_ID = "calc__calc-2"
REPO_NAME = "calc/calc"
BASE_TIME = 1_700_000_000.0  # fixed, so logs built with fixed_new_events are byte-stable
TIME_STEP = 0.75

# T1's first attempt: still divides by one less than the count (for 4 values).
WRONG_MEAN_FIX = Edit(LineRange(9, 9), "    return total / max(len(values) - 1, 1)\n")
REVIEW_REJECTION = (
    "Still wrong: for [1, 2, 3, 4] this divides 10 by 3 and returns 3.33. "
    "The mean must divide the total by len(values)."
)
REVIEW_APPROVAL = "Correct: mean([1, 2, 3, 4]) is now 2.5 and the other helpers are untouched."
MEETING = [
    ("Manager", "We have two small bugs: T1 fixes mean() in calc/stats.py, T2 fixes shout() in calc/texts.py."),
    ("Ada Lovelace", "For T1 I will divide by len(values) in mean(); median() needs no change."),
    ("Manager", "Both tasks touch different files, so they can run in parallel."),
]

Pairs = list[tuple[str, AnyEvent]]


def read_base(repo_path: str | os.PathLike, base_commit: str) -> dict[str, tuple[str, str]]:
    """{path: (text, blob id)} of every file of the commit."""
    repo = pygit2.Repository(str(repo_path))
    tree = repo.get(base_commit).peel(pygit2.Tree)
    files: dict[str, tuple[str, str]] = {}

    def walk(t: pygit2.Tree, prefix: str) -> None:
        for entry in t:
            path = prefix + entry.name
            if entry.type_str == "tree":
                walk(repo.get(entry.id), path + "/")
            else:
                files[path] = (repo.get(entry.id).data.decode("utf-8"), str(entry.id))

    walk(tree, "")
    return files


def intended_files(repo_path: str | os.PathLike, base_commit: str, fix_texts: bool = False) -> dict[str, str]:
    """The new contents of the files the run's final diff changes (and only those)."""
    base = read_base(repo_path, base_commit)
    out = {"calc/stats.py": apply_edits(base["calc/stats.py"][0], [MEAN_FIX])}
    if fix_texts:
        out["calc/texts.py"] = apply_edits(base["calc/texts.py"][0], [SHOUT_FIX])
    return out


def _exchange(purpose: str, prompt: str, answer: str, tokens: tuple[int, int], latency: float, *,
              task_id: str = "", error: str = "", attempt: int = 1) -> ev.LLMExchanged:
    prompt_tokens, completion_tokens = tokens
    cost = round(prompt_tokens * 0.15e-6 + completion_tokens * 0.6e-6, 8)
    return ev.LLMExchanged(
        purpose=purpose, model=MODEL,
        messages=[Message("system", f"You are a member of a software team ({purpose})."), Message("user", prompt)],
        answer=answer, error=error, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
        latency_s=latency, cost_usd=cost if not error else 0.0, attempt=attempt, task_id=task_id,
    )


def _patch(task_id: str, attempt: int, path: str, base: dict[str, tuple[str, str]], edits: list[Edit]) -> ev.PatchProposed:
    text, blob_id = base[path]
    new_text = apply_edits(text, edits)
    return ev.PatchProposed(task_id=task_id, attempt=attempt, path=path, base_blob_id=blob_id, edits=edits,
                            new_text=new_text, diff=file_diff(path, text, new_text))


def constructed_run(repo_path: str | os.PathLike, base_commit: str, *, fix_texts: bool = False,
                    interrupted: bool = False) -> Pairs:
    """The (actor, event) pairs of a whole run, in log order (see the module docstring).

    fix_texts: T2 is patched and approved (the final diff changes two files) instead of failing.
    interrupted: after T1's first review the run dies while T1 retries (a LinesLocated and its
    exchange, then RunFailed), and is resumed: RunResumed(kept_version=v) supersedes those
    events, and the retry is recorded again. `v` counts from version 1, so such a run must be
    appended to an empty stream, all of it, in this order.
    """
    base = read_base(repo_path, base_commit)
    stats, texts = "calc/stats.py", "calc/texts.py"
    out: Pairs = []

    def add(actor: str, event: AnyEvent) -> None:
        out.append((actor, event))

    # --- Supervisor and Repository Custodian ------------------------------------------------
    add("supervisor", ev.RunStarted(
        instance_id=INSTANCE_ID, repo=REPO_NAME, base_commit=base_commit, problem_statement=BOTH_ISSUE,
        hints_text="", settings=ev.RunSettings(tests=False, top_k=3, model=MODEL),
    ))
    ranked = [(stats, 7.4312), (texts, 5.2087), ("tests/test_calc.py", 4.9921)]
    add("custodian", ev.FilesRanked(
        candidates=[ev.RankedFile(p, s, base[p][1]) for p, s in ranked], files_total=len(base),
    ))
    descriptions = {
        stats: "Statistics helpers: mean() sums the values and divides; median() sorts and picks the middle.",
        texts: "Text helpers: shout() upper-cases and appends a mark; whisper() lower-cases.",
        "tests/test_calc.py": "Unit tests of mean, median, shout and whisper.",
    }
    verdicts = {
        stats: (True, "mean() divides by len(values) - 1, the bug the issue reports."),
        texts: (True, "shout() appends '?' where the issue wants '!'."),
        "tests/test_calc.py": (False, "Tests already expect the right values; no change needed."),
    }
    for n, (path, _) in enumerate(ranked):
        lane = f"custodian:{path}"
        add(lane, _exchange("summarize_file", f"Summarize {path}:\n{base[path][0]}",
                            f'{{"summary": "{descriptions[path]}"}}', (310 + 40 * n, 45), 1.2 + 0.1 * n))
        add(lane, ev.FileSummarized(path=path, blob_id=base[path][1], summary=descriptions[path], source="fresh"))
        relevant, reason = verdicts[path]
        add(lane, _exchange("judge_relevance", f"Issue:\n{BOTH_ISSUE}\nFile {path}: {descriptions[path]}",
                            f'{{"relevant": {str(relevant).lower()}, "reason": "{reason}"}}', (260 + 10 * n, 30), 0.8))
        add(lane, ev.FileJudged(path=path, relevant=relevant, reason=reason))
    add("custodian", ev.FilesLocated(paths=[stats, texts]))

    # --- Manager ---------------------------------------------------------------------------
    tasks = {
        "T1": (stats, "Make mean() divide the total by the number of values, len(values)."),
        "T2": (texts, "Make shout() end the upper-cased text with '!' instead of '?'."),
    }
    for tid, (path, description) in tasks.items():
        add(f"manager:{path}", _exchange("define_task", f"Issue:\n{BOTH_ISSUE}\nFile {path}",
                                          f'{{"needed": true, "task": "{description}"}}', (420, 38), 1.1))
    for tid, (path, description) in tasks.items():
        add("manager", ev.TaskDefined(task_id=tid, path=path, description=description, base_blob_id=base[path][1]))
    developers = {"T1": ("Ada Lovelace", "A numerical Python developer."),
                  "T2": ("Grace Hopper", "A Python developer who cares about string handling.")}
    for tid, (name, profile) in developers.items():
        add(f"manager:{tid}", _exchange("design_developer", f"Design a developer for {tid}",
                                        f'{{"name": "{name}", "profile": "{profile}"}}', (350, 40), 0.9, task_id=tid))
        add(f"manager:{tid}", ev.DeveloperRecruited(task_id=tid, name=name, profile=profile))
    (s1, t1), (s2, t2), (s3, t3) = MEETING
    add("manager", _exchange("meeting_open", "Open the kick-off meeting.", f'{{"text": "{t1}"}}', (500, 60), 1.4))
    add("manager", ev.MeetingUtterance(turn=1, speaker=s1, text=t1))
    add("developer:T1:meeting", _exchange("meeting_speak", "Speak for T1.", f'{{"text": "{t2}"}}', (540, 52), 1.3, task_id="T1"))
    add("developer:T1:meeting", ev.MeetingUtterance(turn=2, speaker=s2, text=t2))
    add("developer:T2:meeting", _exchange("meeting_speak", "Speak for T2.", "", (0, 0), 60.0, task_id="T2",
                                          error="timeout: no answer within 60 s"))
    add("developer:T2:meeting", ev.StepFailed(purpose="meeting_speak", reason="timeout: no answer within 60 s",
                                              task_id="T2", fallback="stayed silent"))
    add("manager", _exchange("meeting_close", "Close the meeting.", f'{{"text": "{t3}"}}', (610, 41), 1.0))
    add("manager", ev.MeetingUtterance(turn=3, speaker=s3, text=t3))
    add("manager", _exchange("make_plan", "Plan T1 and T2.", '{"stages": [["T1", "T2"]]}', (480, 35), 0.7))
    add("manager", ev.PlanMade(stages=[["T1", "T2"]], rationale="T1 and T2 change different files."))

    # --- T1: rejected, then approved --------------------------------------------------------
    dev, qa = "developer:T1", "qa:T1"
    add(dev, _exchange("design_qa", "Design a QA engineer for T1.", '{"name": "Edsger", "profile": "..."}', (300, 30), 0.6, task_id="T1"))
    add(dev, ev.QAAssigned(task_id="T1", name="Edsger Dijkstra", profile="A reviewer who checks every boundary case."))
    add(dev, _exchange("locate_lines", "Which lines of calc/stats.py?", '{"ranges": [{"start": 9, "end": 9}]}', (700, 20), 0.9, task_id="T1"))
    add(dev, ev.LinesLocated(task_id="T1", attempt=1, ranges=[LineRange(9, 9)]))
    add(dev, _exchange("write_code", "Rewrite lines 9-9.", '{"edits": [...]}', (820, 64), 1.6, task_id="T1"))
    add(dev, _patch("T1", 1, stats, base, [WRONG_MEAN_FIX]))
    add(qa, _exchange("review_patch", "Review attempt 1.", f'{{"approved": false, "comment": "{REVIEW_REJECTION}"}}', (900, 70), 1.8, task_id="T1"))
    add(qa, ev.ReviewIssued(task_id="T1", attempt=1, approved=False, comment=REVIEW_REJECTION))
    if interrupted:
        kept_version = len(out)
        add(dev, _exchange("locate_lines", "Which lines of calc/stats.py? (attempt 2)", '{"ranges": [{"start": 8, "end": 9}]}',
                           (990, 22), 1.0, task_id="T1"))
        add(dev, ev.LinesLocated(task_id="T1", attempt=2, ranges=[LineRange(8, 9)]))
        add("supervisor", ev.RunFailed(reason="developer:T1 died: the node running it was lost",
                                       error_type="RayActorError", resumable=True))
        add("supervisor", ev.RunResumed(kept_version=kept_version, superseded=len(out) - kept_version))
    add(dev, _exchange("locate_lines", "Which lines of calc/stats.py? (attempt 2)", '{"ranges": [{"start": 9, "end": 9}]}',
                       (1010, 20), 0.9, task_id="T1"))
    add(dev, ev.LinesLocated(task_id="T1", attempt=2, ranges=[LineRange(9, 9)]))
    add(dev, _exchange("write_code", "Rewrite lines 9-9 (attempt 2).", '{"edits": [...]}', (1100, 48), 1.5, task_id="T1"))
    add(dev, _patch("T1", 2, stats, base, [MEAN_FIX]))
    add(qa, _exchange("review_patch", "Review attempt 2.", f'{{"approved": true, "comment": "{REVIEW_APPROVAL}"}}', (950, 40), 1.2, task_id="T1"))
    add(qa, ev.ReviewIssued(task_id="T1", attempt=2, approved=True, comment=REVIEW_APPROVAL))
    add(dev, ev.TaskFinished(task_id="T1", status="approved", attempts=2))

    # --- T2: fails, or with fix_texts is approved at once -------------------------------------
    dev, qa = "developer:T2", "qa:T2"
    add(dev, _exchange("design_qa", "Design a QA engineer for T2.", '{"name": "Barbara", "profile": "..."}', (290, 28), 0.5, task_id="T2"))
    add(dev, ev.QAAssigned(task_id="T2", name="Barbara Liskov", profile="A reviewer of interfaces and behaviour."))
    if fix_texts:
        add(dev, _exchange("locate_lines", "Which lines of calc/texts.py?", '{"ranges": [{"start": 6, "end": 6}]}', (640, 20), 0.8, task_id="T2"))
        add(dev, ev.LinesLocated(task_id="T2", attempt=1, ranges=[LineRange(6, 6)]))
        add(dev, _exchange("write_code", "Rewrite lines 6-6.", '{"edits": [...]}', (720, 40), 1.1, task_id="T2"))
        add(dev, _patch("T2", 1, texts, base, [SHOUT_FIX]))
        add(qa, _exchange("review_patch", "Review attempt 1.", '{"approved": true, "comment": "Right."}', (800, 25), 0.9, task_id="T2"))
        add(qa, ev.ReviewIssued(task_id="T2", attempt=1, approved=True, comment="Right: shout('hi') is 'HI!'."))
        add(dev, ev.TaskFinished(task_id="T2", status="approved", attempts=1))
    else:
        for retry in (1, 2):
            add(dev, _exchange("locate_lines", "Which lines of calc/texts.py?", "the lines around shout",
                               (640, 12), 0.7, task_id="T2", attempt=retry,
                               error="answer is not the JSON asked for" if retry == 1 else ""))
        reason = "locate_lines: no usable answer after 2 tries (no line range was given)"
        add(dev, ev.StepFailed(purpose="locate_lines", reason=reason, task_id="T2", path=texts, fallback="task failed"))
        add(dev, ev.TaskFinished(task_id="T2", status="failed", attempts=0, reason=f"attempt 1: {reason}"))

    changed = [stats, texts] if fix_texts else [stats]
    add("supervisor", ev.RunFinished(outcome="patched", files_changed=changed,
                                     summary=f"{len(changed)} of 2 tasks patched; T1 approved after 2 attempts."))
    return out


def fixed_new_events(pairs: Pairs, start: float = BASE_TIME, step: float = TIME_STEP, id_prefix: str = "") -> list[NewEvent]:
    """The pairs as NewEvents with fixed times (start, start + step, ...) and fixed event ids
    (`id_prefix` then the 1-based index in hex, 32 characters in all), for byte-stable logs."""
    return [
        NewEvent(event=event, actor=actor, event_id=id_prefix + f"{i:0{32 - len(id_prefix)}x}", time=start + step * (i - 1))
        for i, (actor, event) in enumerate(pairs, 1)
    ]


def repo_for(tmp_path: Path) -> tuple[Path, str]:
    """The calc repository under tmp_path and its base commit id."""
    from scenarios import make_calc_repo

    path = Path(tmp_path) / "calc"
    _, base = make_calc_repo(path)
    return path, base
