"""`magis-ray config`: the effective settings and where each came from; and the same resolution
for `submit`, `resume` and `grade` (flags, then the run's record, then the environment, then the
project's file, then the user's, then the defaults)."""
from __future__ import annotations

import os
from pathlib import Path

import click

from .settings import (
    FIELDS, RUN_SECTIONS, SCALARS, Effective, Layer, describe, describe_node, env_layer, flag_layer, project_layer, resolve, role_flags, user_file,
    user_layer,
)


def project_root(repo: str | None, cwd: str = ".") -> Path | None:
    """The project whose settings apply: --repo, else the repository of the current folder."""
    from magis_ray.actors.code.repository import RepoError
    from magis_ray.actors.code.workingcopy import open_working_copy

    try:
        return (open_working_copy(repo, search=False).path if repo else open_working_copy(cwd).path).resolve()
    except RepoError:
        return None


def given_flags(ctx: click.Context, sections: tuple[str, ...] = RUN_SECTIONS, keys: tuple[str, ...] = ()) -> Layer:
    """The settings of `sections` (and the single settings `keys`) given on this command line (an
    option's default is the struct's: no layer). `--timeout` is the endpoint's on submit, the grade
    section's on grade."""
    from click.core import ParameterSource

    # an option's parameter is its setting's field
    names = {key: FIELDS[key][1].name for key in SCALARS if FIELDS[key][0] in sections or key in keys}
    values = {key: ctx.params[name] for key, name in names.items()
              if name in ctx.params and ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE}
    values.update(role_flags(ctx.params.get("role_model", ()), "--role-model"))
    values.update(role_flags(ctx.params.get("role_base_url", ()), "--role-base-url"))
    return flag_layer(values)


def below_flags(root: Path | None, environ=None) -> list[Layer]:
    """The layers under the command line and the run's record: environment, project, user."""
    environ = os.environ if environ is None else environ
    return [env_layer(environ), project_layer(root), user_layer(environ)]


def effective_settings(flags: Layer, root: Path | None, record: Layer | None = None) -> Effective:
    return resolve([flags, *([record] if record else []), *below_flags(root)])


def setting_value(key: str, root: Path | None):
    """One setting's value as the environment, the project and the user give it (no flags here)."""
    return resolve(below_flags(root)).value(key)


@click.command("config", short_help="Print the effective settings and where each came from.")
@click.option("--repo", type=click.Path(), help="The project whose settings apply (default: the current folder's repository).")
def config_command(repo: str | None) -> None:
    """Print the effective settings of `submit` and `grade` here by section, and where each came
    from: a flag, the environment, the project's magis.toml (or pyproject.toml's [tool.magis-ray]), the user's
    ~/.config/magis-ray/config.toml, or the default; and this machine's own [node] settings, from
    its environment. Never the API key."""
    root = project_root(repo)
    env, project, user = below_flags(root)
    click.echo(f"project:  {project.path or '(none' + (f' in {root}' if root else '') + ')'}")
    click.echo(f"user:     {user.path or '(none: ' + str(user_file(os.environ)) + ')'}")
    click.echo("")
    for line in [*describe(resolve([env, project, user])), *describe_node(os.environ)]:
        click.echo(line)
    key = "set in OPENAI_API_KEY (never shown)" if os.environ.get("OPENAI_API_KEY") else "not set (OPENAI_API_KEY)"
    click.echo(f"\napi key:  {key}")
    click.echo("flags given to `magis-ray submit` (or `grade`, for [grade]) come before all of these.")
