"""`magis-ray repos --dataset D --repos-dir R [--from URL-PREFIX]`: the repositories folder a
grading (or a batch) of D reads, filled: a line a repository, exit 1 when one could not be had. The
work is actors/swebench/repositories.py's; this prints it."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from magis_ray.events.errors import BadInput


@click.command("repos", short_help="Clone a dataset's repositories and submodule mirrors.")
@click.option("--dataset", required=True, type=click.Path(path_type=Path), help="The SWE-bench dataset (.jsonl or .json).")
@click.option("--repos-dir", required=True, type=click.Path(path_type=Path), help="The folder to fill (made if missing).")
@click.option("--from", "prefix", default="", metavar="URL-PREFIX",
              help="Clone PREFIX/OWNER__NAME (a mirror: file:///srv/mirrors, https://git.example.org/swe) "
                   "instead of https://github.com/OWNER/NAME.git.")
def repos_command(dataset: Path, repos_dir: Path, prefix: str) -> None:
    """Fill a --repos-dir for a dataset: each repository its instances name, cloned as OWNER__NAME,
    and a mirror of each git submodule their commits check out (astropy's astropy-helpers), beside
    them. A repository already there is checked for the commits the dataset needs, and only what it
    lacks is fetched. Exit 1 when a repository, or a commit of it, could not be had."""
    from magis_ray.actors.swebench.grading_service import GradingInputError, load_records
    from magis_ray.actors.swebench.repositories import fill

    try:
        records = list(load_records(dataset, lambda line: click.echo(f"magis-ray: notice: {line}", err=True)).values())
    except GradingInputError as exc:
        raise BadInput(str(exc)) from None
    if not records:
        raise BadInput(f"--dataset {dataset}: no instance in it")

    def told(filled) -> None:
        what = f"{filled.commits} commit{'s' if filled.commits != 1 else ''}"
        of = f", a submodule of {filled.submodule_of}" if filled.submodule_of else ""
        said = {"missing": filled.reason, "present": f"{what}{of}: all here"}.get(filled.how, f"{what}{of}, from {filled.source}")
        click.echo(f"{filled.folder.name:<34} {filled.how.upper() if filled.how == 'missing' else filled.how:<8} {said}")

    done = fill(records, repos_dir, prefix, told)
    counts = {how: sum(f.how == how for f in done) for how in ("cloned", "fetched", "present", "missing")}
    click.echo(f"{len(done)} repositories in {repos_dir}: " + ", ".join(f"{n} {how}" for how, n in counts.items() if n))
    if counts["missing"]:
        sys.exit(1)
