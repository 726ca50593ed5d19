"""The tests a run finds on the repositories users bring: the old default environment against the
one the project declares, on popular Python projects at HEAD and at a commit about two years old.

For each repository and commit (benchmarks/own_repositories.json: repo, mirror, head, old), two
environments, each prepared as a run prepares it, in-process, in the sandbox with a run's default
limits (each test run bounded by the `test-timeout` setting, 600 s):

- **before**: the old default, `python -m pip install -e . pytest` on Python 3.11 with nothing
  dated (specs.custom_spec), then the suite collected and run once at the base
  (preparation.prepare_suite with no inference: nothing added for what it finds missing);
- **after**: what the project declares (inferred.inferred_spec: its Python, its date, its test
  requirements), prepared by prepare_suite with the inference (what the collection finds missing
  added, a bounded number of times).

Each is measured twice on one cache root (a fresh one per benchmark run, unless --cache names
one): cold, the first preparation (its environments and testbeds built; the installers' download
caches are the run's, so a package an earlier repository downloaded is not downloaded again), and
warm, a second preparation that only collects: its seconds outside collection are what a run pays
for an environment it already has.

Per repository and commit: the interpreter, the sources read, the cold and warm seconds, what was
collected, the collection errors (their count and the first one's reason), the counts at the base,
what was left out (the network, a server) and whether the run at the base ran out of time. The
results go to a JSON file (measurements of an earlier invocation are kept, the ones measured again
replaced, so parts can be re-run), each run's whole output to a folder beside it; then the tables:
per repository (before -> after), and the summary against issue 54's goals (the share of
repositories collecting with no error, the median pass rate of collected tests at the base, the
median cold and warm environment).

Usage: python benchmarks/own_repositories.py [--repos benchmarks/own_repositories.json] [--results FILE]
                                             [--only REPO ...] [--commits head|old|both]
                                             [--variants before|after|both] [--cache DIR] [--tables-only]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from magis_ray.events.settings import RunSettings, size_bytes

from magis_ray.actors.code.commit_packs import mirrors_beside
from magis_ray.actors.code.workspaces import CommitFiles
from magis_ray.actors.execution.environments import EnvironmentCache, default_cache_root
from magis_ray.actors.execution.inferred import inferred_spec
from magis_ray.actors.execution.preparation import Prepared, prepare_suite
from magis_ray.actors.execution.runner import TestRunner, limits_for_test_runs
from magis_ray.actors.execution.sandbox import open_sandbox
from magis_ray.actors.execution.specs import custom_spec
from magis_ray.actors.execution.testbeds import TestbedCache

REPOSITORIES = Path(__file__).with_name("own_repositories.json")
BEFORE_SETUP = "python -m pip install -e . pytest"  # the default setup before environments were inferred
BEFORE_PYTHON = "3.11"
VARIANTS = ("before", "after")
COMMITS = ("head", "old")
# issue 54's goals
COLLECT_GOAL = 0.90  # of repositories collecting with no error
PASS_GOAL = 0.95  # the median repository's share of its collected tests passing at the base
COLD_GOAL = 60.0  # seconds: the median environment built from nothing
# pytest's last line: "==== 1991 passed, 24 skipped, 1 xfailed in 23.26s ===="
SUMMARY_LINE = re.compile(r"^=+ (\d+ \w+.*) in [\d.]+s(?: \([\d:]+\))? =+$", re.M)
SUMMARY_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")


class LoggingRunner(TestRunner):
    """The run's test runner, keeping each run's whole output as a log in `logs` (collect-1.log,
    collect-2.log, base-3.log, in the order they ran)."""

    logs: Path | None = None
    _count = 0
    last_base_output = ""  # the output of the last run at the base

    def run(self, *args, name: str = "tests", logs_dir=None, **kwargs):
        if self.logs is not None and logs_dir is None:
            self._count += 1
            name, logs_dir = f"{name}-{self._count}", self.logs
        run = super().run(*args, name=name, logs_dir=logs_dir, **kwargs)
        if name.startswith("base"):
            self.last_base_output = run.output
        return run


def pytest_summary(output: str) -> dict[str, int]:
    """The counts of pytest's own last line ({} when it has none: killed at the time limit)."""
    lines = SUMMARY_LINE.findall(output)
    if not lines:
        return {}
    found = {word.rstrip("s") if word.startswith("error") else word: int(n) for n, word in SUMMARY_COUNT.findall(lines[-1])}
    return {name: found.get(name, 0) for name in ("passed", "failed", "error", "skipped", "xfailed", "xpassed")}


@dataclass
class Measurement:
    """One repository at one commit in one environment."""

    repo: str
    commit_kind: str  # head or old
    commit: str
    variant: str  # before or after
    date: str = ""  # the commit's (what "after" resolves as of)
    python: str = ""
    sources: list[str] = field(default_factory=list)  # "name: what was installed from it" ("name: read" when not taken)
    added: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)  # pytest's options the preparation chose ("--no-cov")
    cold_seconds: float | None = None  # the environment and testbed, built from nothing (every round's)
    built_cold: bool = False  # whether the cold preparation built anything (False: the cache had it)
    warm_seconds: float | None = None  # a second preparation's seconds outside collection
    collected: int = 0
    deselected: int = 0
    collection_errors: int = 0
    first_error: str = ""
    ran: bool = False
    passed: int = 0  # the preparation's report (its per-test verdicts)
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    summary: dict[str, int] = field(default_factory=dict)  # pytest's own last line ({}: none)
    left_out: list[str] = field(default_factory=list)
    timed_out: bool = False
    collect_seconds: float = 0.0
    run_seconds: float = 0.0
    failure: str = ""  # why there was no preparation at all (the build failed, no interpreter)
    testbed: str = ""  # the testbed's folder, for its logs
    logs: str = ""  # the folder of this measurement's runs' outputs
    measured_at: str = ""

    @property
    def clean(self) -> bool:
        """Collected at least one test and no collection error."""
        return self.collected > 0 and self.collection_errors == 0 and not self.failure

    @property
    def why(self) -> str:
        """What kept the suite from collecting cleanly: the failure, the first collection error the
        report names, else (nothing collected, no error read) the last line of the last collection."""
        if self.failure or self.first_error or self.collected:
            return self.failure or self.first_error
        logs = sorted(Path(self.logs, "cold").glob("collect-*.log"), key=lambda p: int(p.stem.split("-")[1]))
        lines = [line.strip() for line in logs[-1].read_text(errors="replace").splitlines() if line.strip()] if logs else []
        return f"(not read by the report) {lines[-1][:200]}" if lines else ""

    @property
    def counted(self) -> tuple[int, int, int, int]:
        """passed (xfailed among them, as the report counts them), failed, errors, skipped: pytest's
        own last line where it printed one, else the report's."""
        if self.summary:
            s = self.summary
            return s["passed"] + s["xfailed"], s["failed"], s["error"], s["skipped"]
        return self.passed, self.failed, self.errors, self.skipped

    @property
    def pass_rate(self) -> float:
        """passed / collected (0 when nothing was collected or it never ran)."""
        return min(self.counted[0] / self.collected, 1.0) if self.collected and self.ran else 0.0

    @property
    def pass_rate_ran(self) -> float:
        """passed / (collected - skipped): of the tests that were not skipped."""
        ran = self.collected - self.counted[3]
        return min(self.counted[0] / ran, 1.0) if ran > 0 and self.ran else 0.0


def record_of(entry: dict, kind: str) -> dict:
    return {"repo": entry["repo"], "base_commit": entry[kind], "instance_id": f"{entry['repo']}@{entry[kind][:12]}"}


def measure(entry: dict, kind: str, variant: str, testbeds: TestbedCache, runner: LoggingRunner, logs: Path) -> Measurement:
    """`entry`'s repository at its `kind` commit in the `variant` environment: prepared cold, then
    again warm (collection only)."""
    record = record_of(entry, kind)
    mirror = Path(entry["mirror"])
    found = Measurement(repo=entry["repo"], commit_kind=kind, commit=record["base_commit"], variant=variant,
                        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"))
    found.date = CommitFiles(mirror, record["base_commit"]).committed_at.strftime("%Y-%m-%d")
    found.logs = str(logs)
    try:
        if variant == "before":
            spec, inference = custom_spec(record, BEFORE_PYTHON, BEFORE_SETUP), None
        else:
            inference = inferred_spec(record, mirror)
            spec = inference.spec
        runner.logs, runner._count, runner.last_base_output = logs / "cold", 0, ""
        prepared = prepare_suite(spec, testbeds, runner, mirror, mirrors_beside(mirror), inference=inference)
    except Exception as exc:  # noqa: BLE001 - whatever stops a preparation is a result here, in one line
        found.failure = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
        (logs / "failure.txt").parent.mkdir(parents=True, exist_ok=True)
        (logs / "failure.txt").write_text(traceback.format_exc())
        return found
    fill(found, prepared, variant)
    found.summary = pytest_summary(runner.last_base_output) if prepared.report.ran else {}
    runner.logs, runner._count = logs / "warm", 0
    start = time.monotonic()
    try:
        again = prepare_suite(spec, testbeds, runner, mirror, mirrors_beside(mirror), collect_only=True, inference=inference)
    except Exception as exc:  # noqa: BLE001
        found.failure = f"warm: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
        return found
    found.warm_seconds = round(time.monotonic() - start - again.report.collect_seconds, 1)
    return found


def fill(found: Measurement, prepared: Prepared, variant: str) -> None:
    report = prepared.report
    found.python = report.python
    found.sources = ([f"{s.name}: {', '.join(s.installed)}" if s.installed else f"{s.name}: read" for s in report.sources]
                     if variant == "after" else [BEFORE_SETUP])
    found.added = list(report.added)
    found.options = list(report.options)
    found.cold_seconds = report.build_seconds
    found.built_cold = prepared.testbed.built_now or prepared.testbed.env.built_now or report.build_seconds > 0
    found.collected, found.deselected = report.collected, report.deselected
    found.collection_errors = len(report.collection_errors)
    found.first_error = report.collection_errors[0] if report.collection_errors else ""
    found.ran, found.timed_out = report.ran, report.timed_out
    found.passed, found.failed, found.errors, found.skipped = report.passed, report.failed, report.errors, report.skipped
    found.left_out = list(report.left_out)
    found.collect_seconds, found.run_seconds = report.collect_seconds, report.run_seconds
    found.testbed = prepared.testbed.path


def load_results(path: Path) -> list[Measurement]:
    if not path.is_file():
        return []
    return [Measurement(**item) for item in json.loads(path.read_text())]


def save_results(path: Path, results: list[Measurement]) -> None:
    """Written whole to a new file and moved over the old one: a run stopped midway loses nothing."""
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps([asdict(m) for m in results], indent=1))
    os.replace(partial, path)


def key(m: Measurement) -> tuple[str, str, str]:
    return m.repo, m.commit_kind, m.variant


# --- tables ---------------------------------------------------------------------------------------

def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def percent(share: float) -> str:
    return f"{100 * share:.0f}%"


def counts(m: Measurement | None) -> str:
    if m is None:
        return "-"
    if m.failure:
        return "no env"
    if not m.ran:
        return "not run"
    text = "/".join(str(n) for n in m.counted)
    if m.summary and m.counted != (m.passed, m.failed, m.errors, m.skipped):
        text += f" (report {m.passed}/{m.failed}/{m.errors}/{m.skipped})"
    return text + (" (timeout)" if m.timed_out else "")


def collected_text(m: Measurement | None) -> str:
    if m is None:
        return "-"
    if m.failure:
        return "no env"
    return f"{m.collected}" + (f" ({m.collection_errors} err)" if m.collection_errors else "")


def pairs(results: list[Measurement]) -> list[tuple[str, str, Measurement | None, Measurement | None]]:
    """(repo, commit kind, before, after), in the order of the repositories' list, HEAD first."""
    by_key = {key(m): m for m in results}
    order = list(dict.fromkeys((m.repo, m.commit_kind) for m in results))
    order.sort(key=lambda rk: (COMMITS.index(rk[1]),))
    return [(repo, kind, by_key.get((repo, kind, "before")), by_key.get((repo, kind, "after"))) for repo, kind in order]


def markdown_table(title: str, columns: list[str], rows: list[list[str]], note: str = "") -> None:
    """One of the tables: its heading, an optional paragraph, and its rows (a column named with a
    trailing ":" is a number, aligned right; cell text cannot break the table)."""
    print(f"\n## {title}\n")
    if note:
        print(note + "\n")
    print("| " + " | ".join(c.rstrip(":") for c in columns) + " |")
    print("|" + "|".join("---:" if c.endswith(":") else "---" for c in columns) + "|")
    for row in rows:
        print("| " + " | ".join(cell.replace("|", "/") for cell in row) + " |")


def per_repository_table(results: list[Measurement]) -> None:
    def row(repo: str, kind: str, before: Measurement | None, after: Measurement | None) -> list[str]:
        def both(text):
            return f"{text(before)} -> {text(after)}"
        return [repo, f"{kind} {(after or before).commit[:8]} {(after or before).date}",
                both(lambda m: m.python or '-' if m else '-'),
                both(lambda m: seconds(m.cold_seconds) if m else '-'), both(lambda m: seconds(m.warm_seconds) if m else '-'),
                both(collected_text), both(counts), both(lambda m: percent(m.pass_rate) if m else '-'),
                '; '.join(after.left_out) if after and after.left_out else '']

    markdown_table(
        "per repository and commit: before -> after",
        ["repository", "commit", "Python", "cold s:", "warm s:", "collected:", "at the base", "pass:", "left out"],
        [row(*pair) for pair in pairs(results)],
        note="before: `pip install -e . pytest` on Python 3.11, undated; after: what the project declares. "
             "cold/warm: seconds to have the environment and testbed (warm: a second preparation, outside collection). "
             "at the base: passed/failed/errors/skipped as pytest's last line counts them (xfailed as passed), with the "
             "preparation's report beside them where it counts otherwise. pass: passed / collected.")


def after_details_table(results: list[Measurement]) -> None:
    markdown_table(
        "after: where the environment came from, and what kept the suite from collecting",
        ["repository", "commit", "sources read (what was installed from each)", "added", "first collection error or failure"],
        [[repo, kind, '; '.join(after.sources) or 'nothing declared', ', '.join(after.added), after.why[:200]]
         for repo, kind, _, after in pairs(results) if after is not None])


def before_errors_table(results: list[Measurement]) -> None:
    markdown_table(
        "before: the first collection error or failure",
        ["repository", "commit", "first collection error or failure"],
        [[repo, kind, before.why[:200]] for repo, kind, before, _ in pairs(results) if before is not None and before.why])


def summary_table(results: list[Measurement]) -> None:
    def row(name: str, variant: str, group: list[Measurement]) -> list[str]:
        clean = sum(m.clean for m in group)
        cold = [m.cold_seconds for m in group if m.cold_seconds is not None and m.built_cold]
        warm = [m.warm_seconds for m in group if m.warm_seconds is not None]
        return [name, variant, str(len(group)), f"{clean} ({percent(clean / len(group))})",
                percent(statistics.median(m.pass_rate for m in group)),
                percent(statistics.median(m.pass_rate_ran for m in group)),
                seconds(statistics.median(cold)) if cold else '-', seconds(statistics.median(warm)) if warm else '-',
                str(sum(m.timed_out for m in group))]

    groups = [(name, variant, [m for m in results if m.commit_kind in kinds and m.variant == variant])
              for kinds, name in ((("head",), "HEAD"), (("old",), "old"), (COMMITS, "all")) for variant in VARIANTS]
    markdown_table(
        "against issue 54's goals",
        ["commits", "variant", "repositories:", "collect with no error:", "median pass (of collected):",
         "median pass (of not skipped):", "median cold s:", "median warm s:", "ran out of time:"],
        [row(*group) for group in groups if group[2]])
    print(f"\ngoals: at least {percent(COLLECT_GOAL)} collect with no error; the median repository passes at least "
          f"{percent(PASS_GOAL)} of its collected tests at the base; a median environment of at most {COLD_GOAL:.0f} s "
          "cold, and seconds warm. A repository whose environment could not be made counts as not collecting and "
          "as passing 0%; the cold median is over the preparations that built something.")


def tables(results: list[Measurement]) -> None:
    per_repository_table(results)
    after_details_table(results)
    before_errors_table(results)
    summary_table(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repos", type=Path, default=REPOSITORIES, help="a JSON list of {repo, mirror, head, old}")
    parser.add_argument("--results", type=Path, default=Path("own_repositories-results.json"))
    parser.add_argument("--only", nargs="+", metavar="REPO", help="these repositories (owner/name) alone")
    parser.add_argument("--commits", choices=("head", "old", "both"), default="both")
    parser.add_argument("--variants", choices=("before", "after", "both"), default="both")
    parser.add_argument("--cache", type=Path, help="the cache root (default: a fresh one beside the node's, kept for its logs)")
    parser.add_argument("--tables-only", action="store_true", help="print the tables of --results, measure nothing")
    args = parser.parse_args()
    results = load_results(args.results)
    if args.tables_only:
        if not results:
            raise SystemExit(f"no results in {args.results}")
        tables(results)
        return
    entries = json.loads(args.repos.read_text())
    if args.only:
        unknown = set(args.only) - {e["repo"] for e in entries}
        if unknown:
            raise SystemExit(f"not in {args.repos}: {', '.join(sorted(unknown))}")
        entries = [e for e in entries if e["repo"] in args.only]
    kinds = COMMITS if args.commits == "both" else (args.commits,)
    variants = VARIANTS if args.variants == "both" else (args.variants,)
    if args.cache is None:
        default_cache_root().parent.mkdir(parents=True, exist_ok=True)
        args.cache = Path(tempfile.mkdtemp(prefix="bench-own-", dir=default_cache_root().parent))
    settings = RunSettings()
    sandbox = open_sandbox(settings.sandbox)
    runner = LoggingRunner(sandbox, limits_for_test_runs(settings.test_timeout, size_bytes(settings.test_memory)))
    testbeds = TestbedCache(EnvironmentCache(args.cache, sandbox))
    logs_root = args.results.with_suffix(".logs")
    print(f"cache {args.cache}; results {args.results}; runs' outputs {logs_root}", flush=True)
    started = time.monotonic()
    for entry in entries:
        for kind in kinds:
            if not entry.get(kind):
                continue
            for variant in variants:
                logs = logs_root / entry["repo"].replace("/", "+") / kind / variant
                step = time.monotonic()
                found = measure(entry, kind, variant, testbeds, runner, logs)
                results = [m for m in results if key(m) != key(found)] + [found]
                save_results(args.results, results)
                print(f"{entry['repo']} {kind} {variant}: {collected_text(found)} collected, {counts(found)}, "
                      f"cold {seconds(found.cold_seconds)} s, warm {seconds(found.warm_seconds)} s "
                      f"({time.monotonic() - step:.0f} s){'; ' + (found.failure or found.first_error)[:160] if found.failure or found.first_error else ''}",
                      flush=True)
    print(f"\nmeasured in {(time.monotonic() - started) / 60:.0f} min\n")
    tables(results)


if __name__ == "__main__":
    main()
