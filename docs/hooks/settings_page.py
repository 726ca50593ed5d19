"""The settings reference, made from the one settings model (events/settings.py) and the names the
layers give each setting (cli/settings.py): a table per section with every setting's key, type,
default, environment variable, flag, and the comment its field carries in the source."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import click
import msgspec

from magis_ray.cli import settings as layers
from magis_ray.cli.grade import SHARED_KEYS
from magis_ray.events.settings import NODE_ENV, RECORDED_ONLY, ROLES, NodeSettings

from field_comments import field_comments
from type_words import cell, default_of, type_words

# The commands that read a section's flags as a layer (cli/config.py's given_flags, as each command calls it)
SECTION_COMMANDS = {"run": ("submit", "resume"), "endpoint": ("submit", "resume"), "models": ("submit", "resume"),
                    "grade": ("grade",)}
HEADER = "| Key | Type | Default | Environment | Flag | What it does |\n|---|---|---|---|---|---|"
SECTION_WORDS = {
    "run": "The team's settings: what a run records, and what `resume` lays its flags over.",
    "endpoint": "How a run talks to its model (the API key is never a setting: it is read from `OPENAI_API_KEY` only).",
    "grade": "`magis-ray grade`'s settings. Their keys carry the section's name (`grade.timeout`, a settings "
             "file's `[grade]` table, `MAGIS_GRADE_TIMEOUT`); on `magis-ray grade`'s command line they are its flags.",
}


def key_of(section: str, name: str) -> str:
    """A field's key in the settings layers: `top-k`, `grade.timeout`."""
    return (f"{section}." if section in layers.QUALIFIED else "") + name.replace("_", "-")


def readers(key: str, section: str) -> tuple[str, ...]:
    """The commands whose flags give setting `key` of `section`."""
    return (*SECTION_COMMANDS.get(section, ()), *(("grade",) if key in SHARED_KEYS else ()))


def commands_with(flag: str, cli: click.Group, names: Iterable[str]) -> list[str]:
    """Those of the commands `names` that take `flag`, as click has them."""
    return [name for name in sorted(set(names)) if name in cli.commands
            and any(flag in param.opts or flag in param.secondary_opts for param in cli.commands[name].params)]


def shown_default(value: Any) -> str:
    if value is msgspec.NODEFAULT:
        return "(required)"
    if isinstance(value, bool):
        return "`on`" if value else "`off`"
    if value == "" or value == ():
        return "(none)"
    return f"`{value}`"


def _flag_cell(flag: str, cli: click.Group, names: Iterable[str]) -> str:
    takers = commands_with(flag, cli, names) if flag else []
    if not takers:
        return "—"
    return f"`{flag}` ({', '.join(takers)})"


def _row(key: str, field: msgspec.structs.FieldInfo, comment: str, environment: str, flag: str) -> str:
    kind = type_words(field.type, patterns=layers.PATTERN_WORDS).replace("boolean", "`on` or `off`")
    description = comment[:1].upper() + comment[1:] if comment else ""
    return "| " + " | ".join(cell(text) for text in (
        f"`{key}`", kind, shown_default(default_of(field)), f"`{environment}`" if environment else "—", flag, description)) + " |"


def section_table(section: str, struct: type, cli: click.Group, skip: Iterable[str] = ()) -> str:
    comments = field_comments(struct)
    rows = []
    for field in msgspec.structs.fields(struct):
        if field.name in skip:
            continue
        key = key_of(section, field.name)
        rows.append(_row(key, field, comments.get(field.name, ""), layers.env_name(key), _flag_cell(layers.flag_name(key), cli, readers(key, section))))
    return "\n".join([HEADER, *rows])


def models_table(cli: click.Group) -> str:
    rows = []
    for role in ROLES:
        for key, what in ((f"models.{role}", f"The {role}'s own model (a role not given one asks the run's `model`)"),
                          (f"models.{role}.base-url", f"Where the {role}'s model is served (default: the run's `base-url`)")):
            flag = layers.flag_name(key)
            taker = _flag_cell(flag, cli, readers(key, "models")).replace(f"`{flag}`", f"`{flag} {role}={'URL' if key.endswith('base-url') else 'MODEL'}`")
            rows.append("| " + " | ".join((f"`{key}`", "text", "(none)", f"`{layers.env_name(key)}`", taker, what)) + " |")
    return "\n".join([HEADER, *rows])


def node_table(struct: type = NodeSettings, variables: Mapping[str, str] = NODE_ENV) -> str:
    comments = field_comments(struct)
    rows = ["| Key | Type | Default | Environment | What it does |", "|---|---|---|---|---|"]
    for field in msgspec.structs.fields(struct):
        variable = variables.get(field.name) or "MAGIS_" + field.name.upper()
        comment = comments.get(field.name, "").removeprefix(variable).lstrip(": ")
        kind = type_words(field.type).replace("boolean", "`on` or `off`")
        rows.append("| " + " | ".join(cell(text) for text in (
            f"`{field.name.replace('_', '-')}`", kind, shown_default(default_of(field)), f"`{variable}`",
            comment[:1].upper() + comment[1:])) + " |")
    return "\n".join(rows)


def recorded_table(struct: type, names: Iterable[str] = RECORDED_ONLY) -> str:
    comments = field_comments(struct)
    fields = {field.name: field for field in msgspec.structs.fields(struct)}
    rows = ["| Field | Type | What it holds |", "|---|---|---|"]
    for name in names:
        comment = comments.get(name, "")
        rows.append(f"| `{name}` | {cell(type_words(fields[name].type))} | {cell(comment[:1].upper() + comment[1:])} |")
    return "\n".join(rows)


def settings_markdown(sections: Mapping[str, type] | None = None, node: type = NodeSettings,
                      cli: click.Group | None = None) -> str:
    """The generated part of reference/settings.md: every section of the settings model, its
    role models, the node's own settings, and what a run records without a layer setting it."""
    if sections is None:
        sections = layers.SECTIONS
    if cli is None:
        from magis_ray.cli.main import cli
    parts = []
    for section, struct in sections.items():
        parts += [f"## `[{section}]`", SECTION_WORDS.get(section, (struct.__doc__ or "").strip()),
                  section_table(section, struct, cli, skip=(*RECORDED_ONLY, "endpoint", "models"))]
    parts += ["## `[models]`",
              "A role's own model, and where it is served: a settings file's `[models]` table "
              "(`developer = \"gpt-4o\"`, or `developer = { model = \"...\", base-url = \"...\" }`).",
              models_table(cli),
              "## `[node]`",
              "What belongs to the machine a process runs on: each node of a cluster reads these from its own "
              "environment; a run never records them and the driver never sends them.",
              node_table(node),
              "## Recorded by a run",
              "A run fills these in itself and records them with its settings; no layer sets them.",
              recorded_table(sections.get("run", layers.SECTIONS["run"]))]
    return "\n\n".join(parts) + "\n"
