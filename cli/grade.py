"""`magis-ray grade PREDS.jsonl --dataset D --repos-dir R`: SWE-bench grading without Docker.

The command's shell over the grading service (actors/swebench/grading_service.py): its flags are
the top layer of the settings' grade section (`--timeout` is `grade.timeout`; under it the
environment's MAGIS_GRADE_TIMEOUT, the project's magis.toml `[grade]` table, the user's, the
defaults), the resolved section and the flags become the service's options (`grading_options`,
the one mapping), the service grades, and this prints a per-instance table and a summary. The
service records the results in the store, so the same command after a crash grades only what was
not finished, and writes the official report shape as JSON."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import click

from magis_ray.events.settings import GradeSettings

from magis_ray.events.errors import BadInput, Unavailable

from .errors import missing_extra
from .options import store_option

if TYPE_CHECKING:
    from magis_ray.actors.swebench.grading_service import GradingInputError, GradingOptions, GradingOutcome

    from .settings import Effective

# The run's settings a grading shares: where the cluster's nodes share built environments
SHARED_KEYS = ("artifact-store",)
GRADE = GradeSettings()  # the flags' defaults, shown in --help; only a flag given on the command line is a layer


def parse_pythons(values: tuple[str, ...]) -> dict[str, str]:
    """--python PATH (any version) or --python 3.9=PATH (that version)."""
    found = {}
    for value in values:
        version, _, path = value.rpartition("=")
        found[version] = path
    return found


def workers_for_memory(workers: int, budget: int, what: str) -> int:
    """--workers lowered to what the machine's memory holds at `budget` bytes a sandbox, said in
    one line; BadInput when not even one fits."""
    from magis_ray.actors.execution.sandbox.memory_budget import workers_within_memory

    fit, note = workers_within_memory(workers, budget)
    if not fit:
        raise BadInput(f"{what}: {note}")
    if note:
        click.echo(f"magis-ray: notice: {note}", err=True)
    return fit


def grading_options(flags: dict, grade: GradeSettings, artifact_store: str = "") -> GradingOptions:
    """The grading's options from the command's flags (click's parameter names) for what is
    graded and where, and the resolved grade section (its flags included), whole, for how."""
    from magis_ray.actors.swebench.grading_service import GradingOptions

    chosen = [patches for patches, given in (("predictions", flags["predictions"]), ("gold", flags["gold"]),
                                             ("empty", flags["empty"])) if given]
    if len(chosen) != 1:
        raise BadInput("give a predictions file, or --gold, or --empty (exactly one)")
    return GradingOptions(
        dataset=str(flags["dataset"]), repos_dir=str(flags["repos_dir"]), store=str(flags["store_path"]),
        patches=chosen[0], predictions=str(flags["predictions"] or ""), instances=tuple(flags["instances"]),
        name=flags["name"] or "", grade=grade, pythons=parse_pythons(flags["pythons"]),
        env_cache=flags["env_cache"] or None, artifact_store=artifact_store,
        report=str(flags["report"]) if flags["report"] else None, use_ray=not flags["no_ray"],
    )


def grade_settings(ctx: click.Context) -> Effective:
    """The grade section as this command line, the environment, the current folder's project and
    the user give it (BadInput, one line naming its source, for a value its setting does not take)."""
    from .config import effective_settings, given_flags, project_root

    return effective_settings(given_flags(ctx, ("grade",), SHARED_KEYS), project_root(None))


def grade_options(f):
    """The grade section's flags and where the test runs' environments come from: grade's, and
    `tasks validate`'s (a validation's test runs are a grading's)."""
    for option in reversed([
        click.option("--workers", type=int, default=GRADE.workers, show_default=True,
                     help="How many at once (Ray tasks; threads with --no-ray)."),
        click.option("--sandbox", type=click.Choice(["bwrap", "none"]), default=GRADE.sandbox, show_default=True,
                     help="bwrap: bubblewrap (no network, read-only system); none: run directly (you trust the code)."),
        click.option("--timeout", type=float, default=GRADE.timeout, show_default=True, help="Seconds a test run may take."),
        click.option("--network/--no-network", default=GRADE.network,
                     help="Give the tests the network (some need the internet); only for patches you trust."),
        click.option("--memory", default=GRADE.memory, show_default=True,
                     help="The memory budget of each test run: all its processes and its in-memory scratch together (0: no limit)."),
        click.option("--python", "pythons", multiple=True, help="An interpreter to use: PATH, or VERSION=PATH (repeatable)."),
        click.option("--env-cache", type=click.Path(),
                     help="This machine's environment cache, for the workers this command runs (default: MAGIS_ENV_CACHE, "
                          "else ~/.cache/magis-ray/envs); a cluster's nodes each use their own MAGIS_ENV_CACHE."),
        click.option("--artifact-store", help="Where the cluster's nodes share built environments and testbeds: a folder on a "
                                              "shared filesystem, or an s3:// or gs:// URL (default: MAGIS_ARTIFACT_STORE; none: "
                                              "each node builds its own)."),
        click.option("--env-setup", default=GRADE.env_setup,
                     help="Your repository: the environment's setup command (default: what the project declares)."),
        click.option("--test-cmd", default=GRADE.test_cmd,
                     help="Your repository: the test command (default: pytest -rA), followed by the test patch's files."),
        click.option("--env-python", default=GRADE.env_python,
                     help="Your repository: the Python version of its environment (default: the newest the project allows)."),
        click.option("--no-ray", is_flag=True, help="Work in this process (threads) instead of Ray tasks."),
    ]):
        f = option(f)
    return f


def input_error(exc: GradingInputError, effective: Effective, repos_dir: str) -> BadInput:
    """A grading's (or a validation's) input error said as the user gave the setting at fault
    ("--memory 64G: ...", "MAGIS_GRADE_MEMORY='64G': ..."); the repositories' folder is a flag of
    the command alone, no setting."""
    if exc.setting == "repos-dir":
        return BadInput(f"--repos-dir {repos_dir}: {exc}")
    return BadInput(f"{effective.given(exc.setting)}: {exc}" if exc.setting else str(exc))


@click.command("grade", short_help="Grade predictions on SWE-bench without Docker.")
@click.argument("predictions", required=False, type=click.Path(path_type=Path))
@click.option("--dataset", required=True, type=click.Path(path_type=Path), help="The SWE-bench dataset (.jsonl or .json).")
@click.option("--repos-dir", required=True, type=click.Path(), help="A folder of owner__name repositories.")
@click.option("--gold", is_flag=True, help="Grade the dataset's own patches (the grader's fidelity check).")
@click.option("--empty", is_flag=True, help="Run the tests with no patch at all (the grader's check: nothing may resolve).")
@click.option("--instances", multiple=True, help="Only these instance ids (repeatable).")
@click.option("--name", help="The grading's name in the store (default: from the predictions and the dataset); "
                             "the same name resumes it.")
@grade_options
@click.option("--report", type=click.Path(path_type=Path), help="Write the report (official shape) here "
                                                               "(default: STORE/gradings/NAME.json).")
@store_option
@click.pass_context
def grade_command(ctx: click.Context, **flags) -> None:
    """Grade predictions on SWE-bench without Docker: per instance resolved, FAIL_TO_PASS and
    PASS_TO_PASS, in sandboxed environments built from SWE-bench's own specs. --sandbox, --timeout,
    --memory, --workers, --network, --env-setup, --test-cmd and --env-python are the [grade]
    settings: given here, else from the environment (MAGIS_GRADE_TIMEOUT, ...), magis.toml's [grade]
    table, ~/.config/magis-ray/config.toml's, in that order (`magis-ray config` shows them)."""
    from magis_ray.actors.code.swebench_harness import HarnessMissing
    from magis_ray.actors.swebench.grading_service import GradingInputError, plan_grading, run_grading_plan

    effective = grade_settings(ctx)
    options = grading_options(flags, effective.grade, effective.settings.artifact_store)
    try:
        plan = plan_grading(options, notice=lambda line: click.echo(f"magis-ray: notice: {line}", err=True))
    except GradingInputError as exc:
        raise input_error(exc, effective, flags["repos_dir"]) from None
    except HarnessMissing:
        raise Unavailable(missing_extra("grade", "magis-ray grade", ["swebench"])) from None
    outcome = run_with_progress(plan, run_grading_plan, "grading", "instance", lambda event, skipped: (
        "skipped (graded before)" if skipped else ("resolved" if event.resolved else event.error_step or "unresolved")))
    print_outcome(outcome)


def run_with_progress(plan, run, what: str, unit: str, state: Callable[[object, bool], str]):
    """`run(plan, on_result)` (a grading's or a validation's) under a progress bar on stderr, a
    step a job (`unit`: what a job is), each said by `state(event, skipped)`; Ctrl-C says how to
    resume, and exits as an interrupted command does."""
    from tqdm import tqdm

    from magis_ray.actors.swebench.grading_service import start_ray

    from .signals import interrupted_exit_code

    start_ray(plan)
    with tqdm(total=len(plan.jobs), unit=unit, desc=f"{what} {plan.name}", file=sys.stderr) as bar:
        def progress(event, skipped: bool) -> None:
            bar.update(1)
            bar.set_postfix_str(f"{event.instance_id}: {state(event, skipped)}", refresh=True)

        try:
            return run(plan, progress)
        except KeyboardInterrupt:
            click.echo(f"magis-ray: interrupted; run the same command again to resume {what} {plan.name}", err=True)
            sys.exit(interrupted_exit_code())


def print_outcome(outcome: GradingOutcome) -> None:
    from magis_ray.actors.swebench.grading_batch import preparation_line

    results, data = outcome.results, outcome.report
    click.echo(summary_table(results))
    click.echo(preparation_line(results))
    if len({r.instance_id.rsplit("-", 1)[0] for r in results}) > 1:
        click.echo(repository_table(results))
    offline = sorted(r.instance_id for r in results if r.needs_internet and not r.resolved)
    click.echo(f"resolved: {data['resolved_instances']} of {len(results)}; completed: {data['completed_instances']}; "
               f"errors: {data['error_instances']}; empty patches (not run): {data['empty_patch_instances']}"
               + (f"; incomplete: {len(data['incomplete_ids'])}" if data["incomplete_ids"] else ""))
    if offline:
        click.echo(f"needs the internet: {len(offline)} ({', '.join(offline[:5])}{' ...' if len(offline) > 5 else ''}); "
                   "--network gives the tests the network (only for predictions you trust)")
    click.echo(f"report:   {outcome.report_path} (the harness's shape); details: {outcome.details_path}")
    click.echo(f"logs:     {outcome.logs_dir}")


def repository_table(results) -> str:
    """Resolved per repository, and how many of those not resolved need the internet."""
    rows: dict[str, list[int]] = {}
    for r in results:
        row = rows.setdefault(r.instance_id.rsplit("-", 1)[0], [0, 0, 0, 0])
        row[0] += 1
        row[1] += r.resolved
        row[2] += (not r.resolved) and r.needs_internet
        row[3] += (not r.resolved) and not r.needs_internet
    lines = ["REPOSITORY                    INSTANCES  RESOLVED  NEEDS THE INTERNET  OTHER UNRESOLVED"]
    for name, (total, resolved, offline, other) in sorted(rows.items()):
        lines.append(f"{name:<29} {total:>9}  {resolved:>8}  {offline:>18}  {other:>16}")
    return "\n".join(lines)


def summary_table(results) -> str:
    from magis_ray.actors.swebench.grading_batch import preparation_seconds

    header = ("INSTANCE", "RESOLVED", "F2P", "P2P", "ENV", "PREP s", "TESTS s", "NOTE")
    rows = []
    for r in results:
        f2p, p2p = (f"{len(o.success)}/{len(o.success) + len(o.failure)}"
                    for o in (r.tests_status.fail_to_pass, r.tests_status.pass_to_pass))
        built = preparation_seconds(r)
        build = f"{built:.1f}" if (r.environment.built_now or r.testbed.built_now) else ("cached" if r.environment.key else "-")
        if not r.ran:
            note = "empty patch: not run"
        elif r.error_step:
            note = f"{r.error_step}: {r.error}"
        elif r.needs_internet and not r.resolved:
            note = "needs the internet"
        else:
            note = "; ".join([*r.limits, *r.warnings]) if not r.resolved else ""
        rows.append((r.instance_id, "yes" if r.resolved else "no", f2p, p2p, r.environment.label or "-", build,
                     f"{r.run.seconds:.1f}", note[:100]))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in [header, *rows])
