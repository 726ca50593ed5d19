"""`magis-ray config`: the effective settings and where each came from; and the same resolution
for `submit` (flags, then the environment, then the project's file, then the user's, then the
defaults)."""
from __future__ import annotations

import os
from pathlib import Path

import click

from .settings import SETTINGS, Resolved, describe, project_layer, resolve, role_flags, user_layer


def project_root(repo: str | None, cwd: str = ".") -> Path | None:
    """The project whose settings apply: --repo, else the repository of the current folder."""
    from magis_ray.actors.code.repository import RepoError
    from magis_ray.actors.code.workingcopy import open_working_copy

    try:
        return (open_working_copy(repo, search=False).path if repo else open_working_copy(cwd).path).resolve()
    except RepoError:
        return None


def command_defaults(command: click.Command) -> dict:
    """The settings' defaults, as the command's options declare them."""
    by_param = {s.param: s.key for s in SETTINGS}
    # an option without a default holds click's UNSET marker: for a setting, that is ""
    defaults = {by_param[p.name]: p.default if isinstance(p.default, (str, int, float)) else ""
                for p in command.params if p.name in by_param}
    defaults.setdefault("test-cmd", "")
    return defaults


def given_flags(ctx: click.Context) -> dict:
    """The settings given on this command line, by key."""
    from click.core import ParameterSource

    flags = {s.key: ctx.params[s.param] for s in SETTINGS
             if s.param in ctx.params and ctx.get_parameter_source(s.param) == ParameterSource.COMMANDLINE}
    flags.update(role_flags(ctx.params.get("role_model", ()), "--role-model"))
    flags.update(role_flags(ctx.params.get("role_base_url", ()), "--role-base-url"))
    return flags


def effective_settings(ctx: click.Context, root: Path | None, environ=None) -> dict[str, Resolved]:
    environ = os.environ if environ is None else environ
    layers = [project_layer(root), user_layer(environ)]
    return resolve(given_flags(ctx), environ, layers, command_defaults(ctx.command))


def setting_value(key: str, root: Path | None):
    """One setting's value as the environment, the project and the user give it (no flags here)."""
    got = resolve({}, os.environ, [project_layer(root), user_layer(os.environ)], {}).get(key)
    return got.value if got else None


@click.command("config")
@click.option("--repo", type=click.Path(), help="The project whose settings apply (default: the current folder's repository).")
@click.pass_context
def config_command(ctx: click.Context, repo: str | None) -> None:
    """Print the effective settings of `submit` here, and where each came from: a flag, the
    environment, the project's magis.toml (or pyproject.toml's [tool.magis-ray]), the user's
    ~/.config/magis-ray/config.toml, or the default. Never the API key."""
    root = project_root(repo)
    project, user = project_layer(root), user_layer(os.environ)
    submit = ctx.parent.command.get_command(ctx.parent, "submit") if ctx.parent else None
    defaults = command_defaults(submit) if submit is not None else {}
    values = resolve({}, os.environ, [project, user], defaults)
    click.echo(f"project:  {project.path or '(none' + (f' in {root}' if root else '') + ')'}")
    click.echo(f"user:     {user.path or '(none: ' + str(_user_path()) + ')'}")
    click.echo("")
    for line in describe(values):
        click.echo(line)
    key = "set in OPENAI_API_KEY (never shown)" if os.environ.get("OPENAI_API_KEY") else "not set (OPENAI_API_KEY)"
    click.echo(f"\napi key:  {key}")
    click.echo("flags given to `magis-ray submit` come before all of these.")


def _user_path() -> Path:
    from .settings import user_file

    return user_file(os.environ)
