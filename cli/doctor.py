"""`magis-ray doctor [--dataset D]`: what this machine, or with RAY_ADDRESS every node of the
cluster, has and lacks for a grading (or a batch with tests on): a table with a row a node, then
what each check found. Exit 1 when something needed is missing. The checks are the preflight's
(actors/swebench/preflight.py); this prints them."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from magis_ray.events.settings import GradeSettings

from magis_ray.events.errors import BadInput, Unavailable

from .errors import missing_extra

GRADE = GradeSettings()


@click.command("doctor", short_help="Check this machine, or every node, for what a grading needs.")
@click.option("--dataset", type=click.Path(path_type=Path),
              help="The SWE-bench dataset about to be graded: the Pythons, Debian packages and locales its specs need.")
@click.option("--workers", type=int, default=GRADE.workers, show_default=True,
              help="Test runs at once, as the grading's --workers (on a cluster, a node takes at most its CPUs of them).")
@click.option("--memory", default=GRADE.memory, show_default=True, help="Each test run's memory budget, as the grading's --memory.")
@click.option("--sandbox", type=click.Choice(["bwrap", "none"]), default=GRADE.sandbox, show_default=True,
              help="The sandbox the grading will use.")
@click.option("--artifact-store", help="The artifact store the grading will use (default: MAGIS_ARTIFACT_STORE).")
@click.option("--python", "pythons", multiple=True, help="An interpreter to use: PATH, or VERSION=PATH (repeatable).")
@click.pass_context
def doctor_command(ctx: click.Context, dataset: Path | None, **_flags) -> None:
    """Check what this machine has and lacks for a grading (or a batch with tests on): the sandbox
    (bubblewrap and user namespaces), how a test run's memory budget is held (a cgroup, or the
    watchdog), git, the Pythons, Debian packages and locales the dataset's specs need, the free disk
    at the cache root and the artifact store, and the memory for --workers test runs of --memory
    each. With RAY_ADDRESS, the same checks on every node of the cluster, as Ray tasks. Exit 1 when
    something needed is missing. --workers, --memory, --sandbox and the artifact store are the
    grading's settings, read as `magis-ray grade` reads them."""
    from magis_ray.actors.code.swebench_harness import HarnessMissing
    from magis_ray.actors.swebench.grading_service import GradingInputError, load_records
    from magis_ray.actors.swebench.preflight import check_node, missing, needs_of
    from magis_ray.events.settings import node_settings, size_bytes

    from .grade import grade_settings, parse_pythons

    effective = grade_settings(ctx)
    grade = effective.grade
    try:
        records = list(load_records(dataset, notice).values()) if dataset else []
        needs = needs_of(records, workers=grade.workers, memory_bytes=size_bytes(grade.memory), sandbox=grade.sandbox,
                         artifact_store=effective.settings.artifact_store, pythons_given=parse_pythons(ctx.params["pythons"]))
    except GradingInputError as exc:
        raise BadInput(str(exc)) from None
    except HarnessMissing:
        raise Unavailable(missing_extra("grade", "magis-ray doctor --dataset", ["swebench"])) from None
    if dataset and not records:
        raise BadInput(f"--dataset {dataset}: no instance in it")
    if node_settings().ray_address:
        from magis_ray.actors.runtime.deployment import ensure_ray
        from magis_ray.actors.runtime.remote import on_every_node
        from magis_ray.actors.swebench.preflight import check_this_node

        ensure_ray()
        rows = [(f"{host} ({node[:8]})", checks) for node, host, checks in on_every_node(check_this_node, needs)]
    else:
        import socket

        rows = [(f"{socket.gethostname()} (this machine)", check_node(needs, grade.workers))]
    if dataset:
        click.echo(f"for {dataset}: {len(records)} instances; {needs.workers} test runs at once of {grade.memory} each")
        if needs.unknown:
            notice(f"the swebench package has no spec for {', '.join(needs.unknown)}")
    click.echo(table(rows))
    for nodes, checks in found(rows).items():
        click.echo(f"\n{', '.join(nodes)}:")
        for check in checks:
            click.echo(f"  {check.name + ':':<16} {'MISSING: ' if check.state == 'missing' else ''}{check.detail}")
    lacking = sorted({check.name for _, checks in rows for check in checks if check.state == "missing"})
    if missing([checks for _, checks in rows]):
        click.echo(f"\nmissing: {', '.join(lacking)}")
        sys.exit(1)
    click.echo("\nnothing needed is missing")


def found(rows) -> dict[tuple[str, ...], list]:
    """What the checks found, each said once for the nodes it holds for: every check of a single
    node; on a cluster, those not plainly ok."""
    nodes_of: dict = {}
    for node, checks in rows:
        for check in checks:
            if len(rows) == 1 or check.state != "ok":
                nodes_of.setdefault(check, []).append(node)
    grouped: dict[tuple[str, ...], list] = {}
    for check, nodes in nodes_of.items():
        grouped.setdefault(tuple(nodes), []).append(check)
    return grouped


def notice(line: str) -> None:
    click.echo(f"magis-ray: notice: {line}", err=True)


def table(rows) -> str:
    """A row a node, a column a check (in the order the checks come), each cell as the check gives it."""
    names = list(dict.fromkeys(check.name for _, checks in rows for check in checks))
    header = ["NODE", *(name.upper() for name in names)]
    body = [[node, *({c.name: c.cell for c in checks}.get(name, "-") for name in names)] for node, checks in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *body])
