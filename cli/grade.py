"""`magis-ray grade PREDS.jsonl --dataset D --repos-dir R`: SWE-bench grading without Docker.

Predictions from magis-ray or any other system (SWE-bench's predictions format: instance_id,
model_name_or_path, model_patch; a .json list or a dict by instance id also load), or the
dataset's own patches (--gold) or empty ones (--empty). Each instance is graded in its
(repo, version) environment in the sandbox; results are events in the store, so the same command
after a crash grades only what was not finished. Prints a per-instance table and a summary, and
writes the official report shape as JSON."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .errors import BadInput, require_extra
from .options import store_option


def load_predictions(path: Path) -> dict[str, dict]:
    """instance id -> prediction; BadInput (one line, with the file's line number) for a file that
    is not predictions."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    stripped = text.strip()
    numbered: list[tuple[int, object]] = []  # (line number, item)
    if stripped.startswith("[") or (stripped.startswith("{") and path.suffix == ".json"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
        items = list(data.values()) if isinstance(data, dict) else data
        numbered = [(0, item) for item in items]
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                numbered.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise BadInput(f"{path} line {number}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    found: dict[str, dict] = {}
    for index, (number, item) in enumerate(numbered, 1):
        where = f"{path} line {number}" if number else f"{path}: prediction {index}"
        if not isinstance(item, dict) or not isinstance(item.get("instance_id"), str):
            raise BadInput(f"{where}: no instance_id")
        patch = item.get("model_patch")
        if patch is not None and not isinstance(patch, str):
            raise BadInput(f"{where} ({item['instance_id']}): model_patch is not a string")
        found[item["instance_id"]] = item
    return found


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
    from magis_ray.actors.execution.memory_budget import workers_within_memory

    fit, note = workers_within_memory(workers, budget)
    if not fit:
        raise BadInput(f"{what}: {note}")
    if note:
        click.echo(f"magis-ray: notice: {note}", err=True)
    return fit


def parse_memory(value: str) -> int:
    units = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
    text = value.strip().lower().rstrip("b")
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise BadInput(f"--memory {value}: not a size (e.g. 4G, 512M, 0 for no limit)") from None


@click.command("grade")
@click.argument("predictions", required=False, type=click.Path(path_type=Path))
@click.option("--dataset", required=True, type=click.Path(path_type=Path), help="The SWE-bench dataset (.jsonl or .json).")
@click.option("--repos-dir", required=True, type=click.Path(), help="A folder of owner__name repositories.")
@click.option("--gold", is_flag=True, help="Grade the dataset's own patches (the grader's fidelity check).")
@click.option("--empty", is_flag=True, help="Run the tests with no patch at all (the grader's check: nothing may resolve).")
@click.option("--instances", multiple=True, help="Only these instance ids (repeatable).")
@click.option("--workers", type=int, default=1, show_default=True, help="Instances graded at once (Ray tasks).")
@click.option("--name", help="The grading's name in the store (default: from the predictions and the dataset); "
                             "the same name resumes it.")
@click.option("--sandbox", type=click.Choice(["bwrap", "none"]), default="bwrap", show_default=True,
              help="bwrap: bubblewrap (no network, read-only system); none: run directly (you trust the code).")
@click.option("--timeout", type=float, default=1800.0, show_default=True, help="Seconds a test run may take.")
@click.option("--network", is_flag=True, help="Give the tests the network (some need the internet); only for predictions "
                                               "you trust.")
@click.option("--memory", default="8G", show_default=True, help="The memory budget of each test run: all its processes and "
                                                                "its in-memory scratch together (0: no limit).")
@click.option("--python", "pythons", multiple=True, help="An interpreter to use: PATH, or VERSION=PATH (repeatable).")
@click.option("--env-cache", type=click.Path(), envvar="MAGIS_ENV_CACHE",
              help="Where environments are cached (default ~/.cache/magis-ray/envs).")
@click.option("--env-setup", help="Your repository: the environment's setup command (default: pip install -e . pytest).")
@click.option("--test-cmd", help="Your repository: the test command (default: pytest -rA), followed by the test patch's files.")
@click.option("--env-python", default="3.11", show_default=True, help="Your repository: the Python version of its environment.")
@click.option("--report", type=click.Path(path_type=Path), help="Write the report (official shape) here "
                                                               "(default: STORE/gradings/NAME.json).")
@click.option("--no-ray", is_flag=True, help="Grade in this process (threads) instead of Ray tasks.")
@store_option
def grade_command(predictions, dataset, repos_dir, gold, empty, instances, workers, name, sandbox, timeout, network, memory,
                  pythons, env_cache, env_setup, test_cmd, env_python, report, no_ray, store_path) -> None:
    """Grade predictions on SWE-bench without Docker: per instance resolved, FAIL_TO_PASS and
    PASS_TO_PASS, in sandboxed environments built from SWE-bench's own specs."""
    from magis_ray.actors.execution.environments import default_cache_root
    from magis_ray.actors.execution.sandbox import SandboxUnavailable, check_available
    from magis_ray.actors.swebench.grading import CustomSetup
    from magis_ray.actors.swebench.grading_batch import (GradeJob, GradeOptions, ThreadExecutor, grade_after_build,
                                                         instance_details, official_report, preparation_line,
                                                         prepare_environment, run_grading)
    from magis_ray.actors.execution.swebench_harness import HarnessMissing, harness
    from magis_ray.events.schema import GradingStarted
    from magis_ray.store import open_store

    if sum(bool(x) for x in (predictions, gold, empty)) != 1:
        raise BadInput("give a predictions file, or --gold, or --empty (exactly one)")
    if workers < 1:
        raise BadInput("--workers must be at least 1")
    if timeout <= 0:
        raise BadInput("--timeout must be positive")
    memory_bytes = parse_memory(memory)
    workers = workers_for_memory(workers, memory_bytes, f"--memory {memory}")
    repos = Path(repos_dir)
    if not repos.is_dir():
        raise BadInput(f"--repos-dir {repos_dir}: not a folder")
    custom = CustomSetup(env_python, env_setup, test_cmd) if (env_setup or test_cmd) else None
    if custom is None:
        require_extra("grade", "magis-ray grade")
        try:
            harness()
        except HarnessMissing as exc:
            raise BadInput(str(exc)) from None
    if sandbox == "bwrap":
        try:
            check_available()
        except SandboxUnavailable as exc:
            raise BadInput(str(exc)) from None
    records = _load_records(dataset)
    if instances:
        unknown = sorted(set(instances) - set(records))
        if unknown:
            raise BadInput(f"not in {dataset.name}: {', '.join(unknown)}")
    chosen = [records[i] for i in records if not instances or i in instances]
    if gold:
        source, jobs = "gold", [GradeJob(r, r["patch"], "gold") for r in chosen]
        submitted = list(records)
    elif empty:
        source, jobs = "empty", [GradeJob(r, "", "empty") for r in chosen]
        submitted = list(records)
    else:
        preds = load_predictions(predictions)
        unknown = sorted(set(preds) - set(records))
        if unknown:
            raise BadInput(f"{predictions.name}: instances not in {dataset.name}: {', '.join(unknown[:5])}")
        source = str(predictions)
        jobs = [GradeJob(records[i], preds[i].get("model_patch"), str(preds[i].get("model_name_or_path", "")))
                for i in records if i in preds and (not instances or i in instances)]
        submitted = list(preds)
    name = name or f"{Path(source).stem if not (gold or empty) else source}@{dataset.stem}"
    logs_root = Path(store_path) / "gradings" / name
    options = GradeOptions(
        repos_dir=str(repos.resolve()), cache_root=str(Path(env_cache or default_cache_root()).expanduser().resolve()),
        sandbox=sandbox, wall_seconds=timeout, memory_bytes=memory_bytes, pythons=parse_pythons(pythons),
        logs_dir=str((logs_root / "logs").resolve()), custom=custom, network=network, run_empty=empty,
    )
    started = GradingStarted(name=name, dataset=str(dataset), predictions=source, instances=[j.instance_id for j in jobs],
                             sandbox=sandbox, workers=workers, timeout_s=timeout, memory_mb=memory_bytes // 2 ** 20,
                             network=network)
    if no_ray:
        executor = ThreadExecutor(options, workers)
    else:
        from magis_ray.actors.runtime.deployment import ensure_ray
        from magis_ray.actors.runtime.remote import RayExecutor

        ensure_ray()  # RAY_ADDRESS (under `ray job submit`), else a Ray of our own
        executor = RayExecutor(options, prepare_environment, grade_after_build)
    from tqdm import tqdm

    open_store(store_path, create=True).close()
    with open_store(store_path) as store, tqdm(total=len(jobs), unit="instance", desc=f"grade {name}", file=sys.stderr) as bar:
        def progress(event, skipped: bool) -> None:
            bar.update(1)
            state = "skipped (graded before)" if skipped else ("resolved" if event.resolved else event.error_step or "unresolved")
            bar.set_postfix_str(f"{event.instance_id}: {state}", refresh=True)

        try:
            results = run_grading(store, name, jobs, executor, workers, started, progress)
        except KeyboardInterrupt:
            click.echo(f"magis-ray: interrupted; run the same command again to resume grading {name}", err=True)
            sys.exit(130)
    data = official_report(results, [r["instance_id"] for r in chosen], submitted)
    report = report or logs_root.with_suffix(".json")
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(data, indent=4))
    details = report.with_suffix(".details.json")
    details.write_text(json.dumps(instance_details(results), indent=2))
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
    click.echo(f"report:   {report} (the harness's shape); details: {details}")
    click.echo(f"logs:     {logs_root / 'logs'}")


def _load_records(dataset: Path) -> dict[str, dict]:
    from magis_ray.actors.swebench.instances import load_dataset

    try:
        instances, errors = load_dataset(dataset)
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read the dataset {dataset}: {exc}") from None
    for error in errors:
        click.echo(f"magis-ray: warning: {dataset.name} line {error.line}: {error.reason}", err=True)
    wanted = {i.instance_id for i in instances}
    records: dict[str, dict] = {}
    text = dataset.read_text(encoding="utf-8")
    raw = json.loads(text) if dataset.suffix == ".json" else [json.loads(l) for l in text.splitlines() if l.strip()]
    for record in raw:
        if isinstance(record, dict) and record.get("instance_id") in wanted and record["instance_id"] not in records:
            records[record["instance_id"]] = record
    return records


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
        f2p = f"{len(r.fail_to_pass_success)}/{len(r.fail_to_pass_success) + len(r.fail_to_pass_failure)}"
        p2p = f"{len(r.pass_to_pass_success)}/{len(r.pass_to_pass_success) + len(r.pass_to_pass_failure)}"
        built = preparation_seconds(r)
        build = f"{built:.1f}" if (r.env_built_now or r.testbed_built_now) else ("cached" if r.env_key else "-")
        if not r.ran:
            note = "empty patch: not run"
        elif r.error_step:
            note = f"{r.error_step}: {r.error}"
        elif r.needs_internet and not r.resolved:
            note = "needs the internet"
        else:
            note = "; ".join([*r.limits, *r.warnings]) if not r.resolved else ""
        rows.append((r.instance_id, "yes" if r.resolved else "no", f2p, p2p, r.env_label or "-", build,
                     f"{r.test_seconds:.1f}", note[:100]))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in [header, *rows])
