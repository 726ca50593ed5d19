"""Every event of a MAGIS collaboration, as frozen msgspec Structs in one tagged union.

Evolution rules: add fields with defaults at the end; never change a field's meaning or a tag.
A field's default is what a run written now means by it. Where an older log meant something else
by leaving a field out, or wrote it under another name, place or type, bump SCHEMA_VERSION and add
an upcaster (events/upcasting.py) that rewrites the older records, as JSON data, before they are
typed; old logs keep decoding and replaying (tests/golden/).

Version 2: a run's settings default to tests on and the "symbols" ranking, and a failed model
exchange names its failure's kind (`LLMExchanged.failure`); version 1 records are upcast.
Version 3: a run's settings are the one settings model (events/settings.py): the model's settings
moved into `settings.endpoint` under the names the settings give them (`llm`, `timeout`, `rpm`,
`models`), where version 2 wrote `settings.llm` (`kind`, `timeout_s`, `requests_per_minute`) and
`settings.roles`; older records are upcast.
Version 4: a node is named by its Ray node id (`TestsRan.node`, `InstanceGraded.node`), its host
name beside it (`host`), where version 3 wrote the host name as `InstanceGraded.node`; older
records are upcast.
Version 5: `InstanceGraded` holds its parts as structs (tests_status, environment, testbed, run,
memory) where version 4 wrote 40 flat fields; `completed` and each part's `obtained` are always
written, where older records left them out (None, "") for a reader to work out; older records are
upcast.
"""
from __future__ import annotations

from typing import Literal, Union

import msgspec

from .settings import EndpointSettings, GradeSettings, RoleModel, RunSettings  # noqa: F401 - the settings a run records

SCHEMA_VERSION = 5


class Event(msgspec.Struct, frozen=True, tag_field="type", forbid_unknown_fields=False):
    """Base of every event payload; the tag is the class name, stated explicitly per class."""


# --- small value types ---------------------------------------------------------------------


class RankedFile(msgspec.Struct, frozen=True):
    path: str
    score: float
    blob_id: str


class LineRange(msgspec.Struct, frozen=True):
    """Lines start..end of the base file, 1-based and inclusive.

    An empty range (end == start - 1) is an insertion before line `start`;
    start == line_count + 1 inserts at the end of the file.
    """

    start: int
    end: int


class Edit(msgspec.Struct, frozen=True):
    """Replace the lines of `range` with `new_code` ("" deletes them)."""

    range: LineRange
    new_code: str


class Message(msgspec.Struct, frozen=True):
    role: str
    content: str


# --- the run's life -------------------------------------------------------------------------


class RunStarted(Event, frozen=True, tag="RunStarted"):
    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    hints_text: str = ""
    settings: RunSettings = RunSettings()
    schema_version: int = SCHEMA_VERSION
    repo_path: str = ""  # where the checkout was, so resume and replay find it again
    version: str = ""  # the SWE-bench version, which names the test environment's spec
    environment_setup_commit: str = ""
    issue_url: str = ""  # where the issue lives (a GitHub issue's url), when the input said


class RunFinished(Event, frozen=True, tag="RunFinished"):
    outcome: Literal["patched", "no_patch"]
    files_changed: list[str] = []
    summary: str = ""


class RunFailed(Event, frozen=True, tag="RunFailed"):
    reason: str
    error_type: str = ""
    resumable: bool = True


class RunResumed(Event, frozen=True, tag="RunResumed"):
    """The run goes on from its log. Events after `kept_version` and before this one are
    superseded (they followed a failure that the resumed run retries); none is deleted."""

    kept_version: int
    superseded: int = 0


# --- Repository Custodian (Algorithm 1) ------------------------------------------------------


class FilesRanked(Event, frozen=True, tag="FilesRanked"):
    candidates: list[RankedFile]
    files_total: int = 0


class FileSummarized(Event, frozen=True, tag="FileSummarized"):
    """A candidate's description: fresh (P2), or a remembered summary plus a commit message (P1)."""

    path: str
    blob_id: str
    summary: str
    source: Literal["fresh", "memory", "diff"] = "fresh"
    earlier_blob_id: str = ""
    commit_message: str = ""


class FileJudged(Event, frozen=True, tag="FileJudged"):
    path: str
    relevant: bool
    reason: str = ""


class FilesLocated(Event, frozen=True, tag="FilesLocated"):
    paths: list[str]


# --- Manager (Algorithm 2) --------------------------------------------------------------------


class TaskDefined(Event, frozen=True, tag="TaskDefined"):
    task_id: str
    path: str
    description: str
    base_blob_id: str = ""  # "" when the task creates the file


class DeveloperRecruited(Event, frozen=True, tag="DeveloperRecruited"):
    task_id: str
    name: str
    profile: str


class MeetingUtterance(Event, frozen=True, tag="MeetingUtterance"):
    turn: int
    speaker: str
    text: str


class PlanMade(Event, frozen=True, tag="PlanMade"):
    stages: list[list[str]]  # task ids; a stage runs in parallel, stages in order
    rationale: str = ""


# --- Developer and QA Engineer (Algorithm 3) --------------------------------------------------


class QAAssigned(Event, frozen=True, tag="QAAssigned"):
    task_id: str
    name: str
    profile: str
    candidate: int = 0  # which of the task's candidates (0: the task has one)


class LinesLocated(Event, frozen=True, tag="LinesLocated"):
    task_id: str
    attempt: int
    ranges: list[LineRange]
    candidate: int = 0  # which of the task's candidates (0: the task has one)


class PatchProposed(Event, frozen=True, tag="PatchProposed"):
    """One attempt's result for one file: the edits, the new content and its diff to the base."""

    task_id: str
    attempt: int
    path: str
    base_blob_id: str
    edits: list[Edit]
    new_text: str
    diff: str
    candidate: int = 0  # which of the task's candidates (0: the task has one)


class ReviewIssued(Event, frozen=True, tag="ReviewIssued"):
    task_id: str
    attempt: int
    approved: bool
    comment: str = ""
    candidate: int = 0  # which of the task's candidates (0: the task has one)


class TaskFinished(Event, frozen=True, tag="TaskFinished"):
    """status: approved; unreviewed (no QA); unapproved (review limit reached or review failed,
    last patch kept); failed (no patch)."""

    task_id: str
    status: Literal["approved", "unreviewed", "unapproved", "failed"]
    attempts: int = 0
    reason: str = ""
    candidate: int = 0  # which of the task's candidates (0: the task has one)


class StepFailed(Event, frozen=True, tag="StepFailed"):
    """A step got no usable answer; the role went on without it (what it did instead is in `fallback`)."""

    purpose: str
    reason: str
    task_id: str = ""
    path: str = ""
    fallback: str = ""


# --- execution: the team runs the code -------------------------------------------------------


class ReproductionWritten(Event, frozen=True, tag="ReproductionWritten"):
    """A test written from the issue that must fail on the base commit. It lives in a scratch
    folder of the workspace and never enters the final diff."""

    path: str
    content: str
    attempt: int = 1


class SourceRead(msgspec.Struct, frozen=True):
    """One place a project declares what its tests need, as its environment's preparation read it:
    `installed` what was taken from it ([] where it was read and passed over)."""

    name: str  # "pyproject.toml [dependency-groups] tests"
    installed: list[str] = []


class SuiteReport(msgspec.Struct, frozen=True):
    """A repository's suite as its test environment's preparation found it: where the environment
    came from, what the suite's collection found, and how it did when run once at the base."""

    python: str = ""  # the interpreter chosen ("3.12")
    date: str = ""  # what its packages resolved as of (ISO 8601; "": today's)
    sources: list[SourceRead] = []  # the places read, in order
    problems: list[str] = []  # what could not be read of them, a line each (a broken pyproject.toml)
    added: list[str] = []  # distributions added for modules the collection found missing
    options: list[str] = []  # pytest's options the preparation chose for every run ("--no-cov")
    collected: int = 0
    collection_errors: list[str] = []  # "FILE: why", a file (or conftest) pytest could not load
    ran: bool = False  # the suite ran at the base (not with collect-only, nor when nothing collected)
    timed_out: bool = False  # its run at the base ran out of time: the counts are of what finished
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    deselected: int = 0
    known_failures: list[str] = []  # failing at the base already: never held against a patch
    left_out: list[str] = []  # what could not run here, in words: "2 need the network"
    build_seconds: float = 0.0
    collect_seconds: float = 0.0
    run_seconds: float = 0.0


class TestsRan(Event, frozen=True, tag="TestsRan"):
    """One test command on a workspace: the base commit with `patches` applied (their digest names
    them), the outcome, the parsed per-test results and the output cut to a sane size.

    purpose: "prepare" (the environment made ready; `command` is the one the run's tests use, empty
    in logs written before it said: pytest's), "reproduce" (the reproduction test on the base
    commit), "baseline" (the regression candidates on the base commit), "check" (a patch, with the
    reproduction and regression tests)."""

    purpose: str
    command: str
    outcome: Literal["passed", "failed", "error", "timeout"]
    task_id: str = ""
    attempt: int = 0
    candidate: int = 0
    patch_digest: str = ""
    exit_code: int | None = None
    passed: list[str] = []
    failed: list[str] = []
    output: str = ""
    duration_s: float = 0.0
    limits: list[str] = []  # the sandbox's limits the run ran into, in words ("process limit reached (1024)")
    memory_control: str = ""  # what held the sandbox's memory budget: "cgroup v1", "cgroup v2", "watchdog"
    peak_memory_mb: int = 0  # the most memory the run held at once (what cannot be reclaimed)
    node: str = ""  # the Ray node id the tests ran on ("" outside Ray, and in logs written before)
    host: str = ""  # that node's host name
    suite: SuiteReport | None = None  # a preparation's: the suite as it found it (None for SWE-bench's specs)


class CandidateChosen(Event, frozen=True, tag="CandidateChosen"):
    """Which of a task's candidate patches became the task's patch, and why."""

    task_id: str
    chosen: int  # the candidate's number, 1-based
    candidates: int
    reason: str
    votes: int = 0  # how many candidates' normalized diffs equal the chosen one's


# --- the model -------------------------------------------------------------------------------


# How a model request ended without an answer. "timeout", "connection" and "api": the transport
# failed; "http": the server answered with an error status (`status`); "empty": the model answered
# nothing; "script": the scripted model has no rule for the request.
FailureKind = Literal["", "timeout", "connection", "api", "http", "empty", "script"]


class LLMExchanged(Event, frozen=True, tag="LLMExchanged"):
    """One request to the model and its raw answer (or the error it ended in)."""

    purpose: str  # the prompt template's name, e.g. "locate_lines"
    model: str
    messages: list[Message]
    answer: str = ""
    error: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    attempt: int = 1  # 1 + the number of corrective retries before it
    task_id: str = ""
    truncated_chars: int = 0  # prompt text cut to fit the model's context
    failure: FailureKind = ""  # why the request got no answer ("": it got one); `error` says it in words
    status: int = 0  # the HTTP status of an "http" failure



# --- grading (a grading is its own stream, "grading:NAME"; runs never hold these) -----------------


class GradingStarted(Event, frozen=True, tag="GradingStarted"):
    """A grading batch began (or began again: a rerun of the same command appends another)."""

    name: str
    dataset: str
    predictions: str  # the predictions file, or "gold" / "empty"
    instances: list[str] = []
    sandbox: str = "bwrap"
    workers: int = 1
    timeout_s: float = 0.0
    memory_mb: int = 0
    network: bool = False  # the tests had the network (--network)


class InstanceGradingStarted(Event, frozen=True, tag="InstanceGradingStarted"):
    """An instance's grading was handed to a worker (its tests will run once it has an environment)."""

    instance_id: str
    patch_sha: str  # sha256 of the graded patch ("" for a prediction without one)
    attempt: int = 1


# The harness's tests_status keys; InstanceGraded holds each as two lists, e.g. fail_to_pass_success.
class Outcomes(msgspec.Struct, frozen=True):
    """The tests of one of the harness's lists that passed (success) and that did not (failure)."""

    success: list[str] = []
    failure: list[str] = []


class TestsStatus(msgspec.Struct, frozen=True):
    """The harness's tests_status: each list of the instance's tests, by what became of them."""

    __test__ = False

    fail_to_pass: Outcomes = Outcomes()
    pass_to_pass: Outcomes = Outcomes()
    fail_to_fail: Outcomes = Outcomes()
    pass_to_fail: Outcomes = Outcomes()

    def as_harness(self) -> dict[str, dict[str, list[str]]]:
        """As the harness's report writes it: {"FAIL_TO_PASS": {"success": [...], "failure": [...]}, ...}."""
        return {name.upper(): msgspec.to_builtins(getattr(self, name)) for name in self.__struct_fields__}

    @classmethod
    def of_harness(cls, tests_status: dict) -> TestsStatus:
        """The harness's tests_status (keys it leaves out: empty lists)."""
        return msgspec.convert({name: tests_status.get(name.upper(), {}) for name in cls.__struct_fields__}, cls)


class PartUse(msgspec.Struct, frozen=True):
    """An instance's environment or testbed as the grading's node had it."""

    key: str = ""
    label: str = ""
    build_seconds: float = 0.0  # what building (or fetching) it cost this grading; 0 from the node's cache
    built_now: bool = False
    obtained: str = ""  # "built", "fetched" (from the cluster's artifact store) or "cached" (the node's own)


class MemoryUse(msgspec.Struct, frozen=True):
    """What held the test run's memory budget ("cgroup v1", "cgroup v2", "watchdog"; "": none),
    and the most the run held at once (what cannot be reclaimed)."""

    control: str = ""
    peak_mb: int = 0


class TestRunTiming(msgspec.Struct, frozen=True):
    """The instance's test run: how long it took, how it ended, how many tests it gave."""

    __test__ = False

    seconds: float = 0.0
    exit_code: int | None = None
    timed_out: bool = False
    tests_parsed: int = 0


class InstanceGraded(Event, frozen=True, tag="InstanceGraded"):
    """One instance graded: the official report's fields, and where the time went. The grader
    returns it and the grading's stream records it as it is."""

    instance_id: str
    patch_sha: str
    resolved: bool
    model: str = ""
    patch_is_None: bool = False
    patch_exists: bool = False
    patch_successfully_applied: bool = False
    tests_status: TestsStatus = TestsStatus()
    error_step: str = ""  # "" when every step ran; else spec / environment / checkout / patch / test_patch / tests
    error: str = ""
    environment: PartUse = PartUse()
    testbed: PartUse = PartUse()
    run: TestRunTiming = TestRunTiming()
    memory: MemoryUse = MemoryUse()
    output_tail: str = ""
    node: str = ""  # the Ray node id that graded it ("" without Ray)
    host: str = ""  # the host name of the node that graded it
    warnings: list[str] = []  # e.g. files of the base commit the repository lacks
    completed: bool = False  # whether the harness would have written the instance's report.json
    ran: bool = True  # False: an empty prediction, which the harness does not run
    needs_internet: bool = False  # its tests fail for want of the network (or its install fetches)
    limits: list[str] = []  # the sandbox's limits the run ran into, in words


# --- validation (a validation of candidate tasks is its own stream, "validation:NAME") ----------


class ValidationStarted(Event, frozen=True, tag="ValidationStarted"):
    """A validation of candidate tasks began (or began again: a rerun of the same command appends another)."""

    name: str
    records: str  # the records file
    candidates: list[str] = []  # their instance ids, in the file's order
    workers: int = 1  # at once: the grade section's, or fewer where the machine's memory holds fewer
    grade: GradeSettings = GradeSettings()  # how the tests ran: sandbox, limits, network, a user's own setup


class CandidateValidated(Event, frozen=True, tag="CandidateValidated"):
    """One candidate validated: its tests run with the test patch alone and with the gold patch
    too, each twice, and the lists they gave; kept, or dropped with its reason. The validator
    returns it and the validation's stream records it as it is."""

    instance_id: str
    record_sha: str  # sha256 of what was validated: the base commit, the gold patch and the test patch
    kept: bool
    fail_to_pass: list[str] = []  # failing (or absent) with the test patch alone, passing with the gold patch
    pass_to_pass: list[str] = []  # passing both ways
    flaky: list[str] = []  # tests whose status differed between two runs of the same patches, left out of the lists
    reason: str = ""  # why it was dropped, one of a few ("" when kept)
    detail: str = ""  # the reason's particulars, in one line (the build's, git's)
    seconds: float = 0.0  # what it took on its node: its builds (those it ran) and its test runs
    test_runs: int = 0  # the sandboxed runs of its eval script
    environment: PartUse = PartUse()
    testbed: PartUse = PartUse()
    node: str = ""  # the Ray node id that validated it ("" without Ray)
    host: str = ""  # the host name of that node


AnyEvent = Union[
    RunStarted,
    RunFinished,
    RunFailed,
    RunResumed,
    FilesRanked,
    FileSummarized,
    FileJudged,
    FilesLocated,
    TaskDefined,
    DeveloperRecruited,
    MeetingUtterance,
    PlanMade,
    QAAssigned,
    LinesLocated,
    PatchProposed,
    ReviewIssued,
    TaskFinished,
    StepFailed,
    LLMExchanged,
    GradingStarted,
    InstanceGradingStarted,
    InstanceGraded,
    ValidationStarted,
    CandidateValidated,
    ReproductionWritten,
    TestsRan,
    CandidateChosen,
]

TERMINAL_EVENTS = (RunFinished, RunFailed)


class NewEvent(msgspec.Struct, frozen=True):
    """An event on its way to the log: the store gives it a version and a global position."""

    event: AnyEvent
    actor: str
    event_id: str
    time: float
    caused_by: str = ""
    node: str = ""

    def recorded(self, run_id: str, version: int, position: int) -> "Recorded":
        return Recorded(
            run_id=run_id, version=version, position=position, time=self.time, actor=self.actor,
            event_id=self.event_id, event=self.event, caused_by=self.caused_by, node=self.node,
        )


class Recorded(msgspec.Struct, frozen=True):
    """An event as the log holds it: the envelope around the payload."""

    run_id: str
    version: int  # position in the run's stream, gap-free from 1
    position: int  # global position in the store, strictly increasing
    time: float  # unix seconds
    actor: str  # e.g. "custodian", "manager", "developer:T1", "qa:T1"
    event_id: str
    event: AnyEvent
    caused_by: str = ""
    schema_version: int = SCHEMA_VERSION
    node: str = ""  # the Ray node the emitting actor ran on ("" outside Ray)
