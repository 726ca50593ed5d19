"""`magis-ray apply RUN`: the run's diff as a branch of your repository (one commit on the base
commit, its message written from the log), never touching your working tree or current branch;
then the commands that push it and open the pull request."""
from __future__ import annotations

import shlex
import time
from pathlib import Path

import click

from magis_ray.events.errors import BadInput
from .options import store_option


def patched_view(store_path: str, run: str):
    """The run's view when it ended with a patch; BadInput says why not (still running, cut off,
    failed, no patch)."""
    from magis_ray.events.projections import final_diff, fold
    from magis_ray.events.projections.ending import ending
    from magis_ray.store import open_store

    from .source import load_run, resolve_run_id

    if run.endswith(".jsonl"):
        view = fold(load_run(store_path, run))
        leases = []
    else:
        with open_store(store_path) as store:
            run_id = resolve_run_id(store, run)
            view = fold(store.read(run_id))
            leases = [lease for lease in store.leases(run_id) if lease.key == run_id]
    if view.status == "running":
        live = [lease for lease in leases if lease.live(time.time())]
        if live:
            from magis_ray.actors.runtime.liveness import describe_holder

            raise BadInput(f"{describe_holder(live[0], f'run {view.run_id}')}; apply it once it has finished")
        raise BadInput(f"run {view.run_id} was cut off before it finished; resume it with `magis-ray resume {view.run_id}`")
    if view.failed is not None or not final_diff(view):
        raise BadInput(f"run {view.run_id} has no patch to apply: {ending(view) or view.status}")
    return view


def default_branch(view) -> str:
    from magis_ray.actors.runtime.issue import slug

    from magis_ray.events.projections.pull_request import issue_title

    return f"magis/{slug(issue_title(view), words=5, chars=32)}-{view.run_id[:6]}"


@click.command("apply", short_help="Make a branch with the run's diff as one commit.")
@click.argument("run")
@click.option("--branch", help="The new branch's name (default: magis/ISSUE-SLUG-RUN). An existing branch is refused.")
@click.option("--worktree", type=click.Path(), help="Also check the branch out in a new working tree at this path.")
@click.option("--repo", type=click.Path(), help="Where the repository is now, if it moved since the run.")
@store_option
def apply_command(run: str, branch: str | None, worktree: str | None, repo: str | None, store_path: str) -> None:
    """Make a branch from the run's base commit with one commit, the run's diff; its message is the
    issue's title, the run and what changed. Your working tree, index and current branch are left
    as they are. Then print the commands that push it and open the pull request."""
    from magis_ray.actors.code.committing import add_worktree, branch_with_diff
    from magis_ray.actors.code.repository import RepoError
    from magis_ray.events.projections import commit_message, final_diff
    from magis_ray.events.projections.pull_request import issue_title

    from .config import project_root, setting_value

    view = patched_view(store_path, run)
    started = view.started
    repo_path = repo or started.repo_path
    if not repo_path:
        raise BadInput("the log does not say where the repository is; give --repo")
    if not Path(repo_path).is_dir():
        raise BadInput(f"the run's repository {repo_path} is not there any more; give --repo PATH")
    if worktree and Path(worktree).exists():  # before the branch is made: a refusal changes nothing
        raise BadInput(f"--worktree {worktree} exists already")
    branch = branch or default_branch(view)
    files = sorted({t.final_patch.path for t in view.tasks.values() if t.final_patch is not None and t.final_patch.diff})
    try:
        commit = branch_with_diff(repo_path, started.base_commit, final_diff(view), commit_message(view), branch)
        if worktree:
            add_worktree(repo_path, worktree, branch)
    except RepoError as exc:
        raise BadInput(str(exc)) from None
    click.echo(f"branch {branch}: 1 commit ({commit[:10]}) on {started.base_commit[:10]}, changing {', '.join(files)}")
    if worktree:
        click.echo(f"worktree: {worktree}")
    store = "" if store_path == ".magis" else f" --store {shlex.quote(store_path)}"
    q = shlex.quote(branch)
    click.echo("next:")
    test_cmd = setting_value("test-cmd", project_root(repo_path))
    if test_cmd:  # the project's own test command, on the branch, in a working tree of its own
        tree = worktree or f"{str(repo_path).rstrip('/')}-{branch.replace('/', '-')}"
        add = "" if worktree else f"git -C {shlex.quote(str(repo_path))} worktree add {shlex.quote(tree)} {q} && "
        click.echo(f"  {add}(cd {shlex.quote(tree)} && {test_cmd})")
    remotes = remote_names(repo_path)
    if not remotes:
        click.echo(f"  # the repository has no remote to push to: add one with "
                   f"`git -C {shlex.quote(str(repo_path))} remote add origin URL`, then push the branch")
        return
    remote = "origin" if "origin" in remotes else remotes[0]
    click.echo(f"  git push -u {shlex.quote(remote)} {q}")
    click.echo(f"  gh pr create --head {q} --fill")
    click.echo(f"  # or with the run's description: magis-ray audit {view.run_id}{store} --format pr > pr.md && "
               f"gh pr create --head {q} --title {shlex.quote(issue_title(view))} --body-file pr.md")


def remote_names(repo_path) -> list[str]:
    """The repository's remotes, by name."""
    import pygit2

    return sorted(remote.name for remote in pygit2.Repository(str(repo_path)).remotes)
