"""The settings of a run, layer by layer, and where each value came from. The settings themselves,
with their one default each, are the one model in events/settings.py (`RunSettings`, what a run
records); this module reads the layers that fill it.

Files: `magis.toml` at the repository's root, or else the `[tool.magis-ray]` table of its
`pyproject.toml` (the project), and `config.toml` under `~/.config/magis-ray/` (the user;
`$XDG_CONFIG_HOME` is honoured). The same keys as the flags (`top-k = 5`, `env-setup = "..."`),
a `[models]` table that gives a role its own model, and a `[grade]` table for `magis-ray grade`:

    [models]
    custodian = "gpt-4o-mini"
    developer = { model = "qwen2.5-coder:32b", base-url = "http://gpu-box:8000/v1" }

    [grade]
    timeout = 600
    memory = "4G"

Precedence: flags, then (on resume) the run's record, then the environment, then the project, then
the user, then the model's defaults. A key is a field's name in kebab case, in whichever section
holds it (`timeout` is `endpoint.timeout`); the grade section's keys carry its name
(`grade.timeout`, MAGIS_GRADE_TIMEOUT; `--timeout` on `magis-ray grade`). Every value is checked
against its field's type as its layer is read, and a refusal is worded from that type (its bounds,
its choices), never from a library's message. An API key is never a setting: it is read from OPENAI_API_KEY only, and never
shown."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import msgspec

from magis_ray.events.errors import BadInput
from magis_ray.events.settings import (
    LLM_KINDS, LLM_PATTERN, NODE_ENV, RECORDED_ONLY, ROLES, SIZE_PATTERN, EndpointSettings, GradeSettings, NodeSettings,
    RoleModel, RunSettings, node_refusals, node_values,
)

from magis_ray.events.errors import BadInput

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the `tomli` package, if it is there
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ModuleNotFoundError:
        tomllib = None  # type: ignore[assignment]

PROJECT_FILE = "magis.toml"
PYPROJECT_TABLE = "magis-ray"  # [tool.magis-ray]
USER_FILE = "config.toml"
SECTIONS = {"run": RunSettings, "endpoint": EndpointSettings, "grade": GradeSettings}  # as `config` groups them
QUALIFIED = ("grade",)  # the sections whose keys carry the section's name: "grade.timeout"
RUN_SECTIONS = ("run", "endpoint")  # what a run records (RunSettings), and submit's and resume's flags set


def _kebab(name: str) -> str:
    return name.replace("_", "-")


# Each key's section and field, read off the model: "top-k" -> ("run", top_k), "timeout" -> ("endpoint", timeout),
# "grade.timeout" -> ("grade", timeout)
FIELDS: dict[str, tuple[str, msgspec.structs.FieldInfo]] = {
    (f"{section}." if section in QUALIFIED else "") + _kebab(f.name): (section, f)
    for section, struct in SECTIONS.items() for f in msgspec.structs.fields(struct)
    if f.name not in (*RECORDED_ONLY, "endpoint", "models")
}
SCALARS = tuple(FIELDS)
# the settings as `config` lists them and layers hold them: "top-k", ..., "models.qa", "models.qa.base-url"
KEYS = (*SCALARS, *(f"models.{role}" for role in ROLES), *(f"models.{role}.base-url" for role in ROLES))
RUN_KEYS = tuple(key for key in KEYS if key.startswith("models.") or FIELDS[key][0] in RUN_SECTIONS)
NO_FLAG = ("test-cmd",)  # set in a file or the environment only (`magis-ray grade` has --test-cmd: grade.test-cmd)
ENV_NAMES = {"base-url": "OPENAI_BASE_URL"}
# The ablations' flags turn a setting off (--no-qa); the others are the key itself (--top-k)
FLAG_NAMES = {"use-qa": "--no-qa", "use-hints": "--no-hints", "use-memory": "--no-memory"}
ON_OFF = {"on": True, "off": False, "true": True, "false": False, "yes": True, "no": False, "1": True, "0": False}


def env_name(key: str) -> str:
    """The environment variable of a setting: MAGIS_TOP_K, MAGIS_MODEL_QA, MAGIS_BASE_URL_QA."""
    if key.startswith("models."):
        role = key.split(".")[1]
        return f"MAGIS_BASE_URL_{role.upper()}" if key.endswith(".base-url") else f"MAGIS_MODEL_{role.upper()}"
    return ENV_NAMES.get(key) or "MAGIS_" + key.upper().replace("-", "_").replace(".", "_")


def flag_name(key: str) -> str:
    """The flag that gives a setting: `--top-k`; a grade setting's is `magis-ray grade`'s (`--timeout`)."""
    if key.startswith("models."):
        return "--role-base-url" if key.endswith(".base-url") else "--role-model"
    if key in FIELDS and FIELDS[key][0] in QUALIFIED:
        return "--" + key.partition(".")[2]
    return "" if key in NO_FLAG else FLAG_NAMES.get(key, f"--{key}")


def value_of(settings: RunSettings | GradeSettings, key: str) -> Any:
    """A setting's value in its section: a run's (RunSettings) or the grade section."""
    if key.startswith("models."):
        role = key.split(".")[1]
        given = next((r for r in settings.endpoint.models if r.role == role), None)
        return "" if given is None else given.base_url if key.endswith(".base-url") else given.model
    section, info = FIELDS[key]
    return getattr(settings.endpoint if section == "endpoint" else settings, info.name)


def shown(value: Any) -> str:
    """A value as `config` prints it: a switch as on/off, as the flags say it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return "" if value is None else str(value)


# --- checking one value against its field -----------------------------------------------------


class Refused(BadInput):
    """A value its field does not take; the message says what the field takes, in the user's words."""


_NOUNS = {int: "an integer", float: "a number", str: "a string"}
# What a patterned string setting takes, in the user's words, by its pattern
PATTERN_WORDS = {LLM_PATTERN: "one of " + ", ".join(LLM_KINDS), SIZE_PATTERN: "a size (e.g. 4G, 512M, 0 for no limit)"}
_BASES = {msgspec.inspect.IntType: int, msgspec.inspect.FloatType: float, msgspec.inspect.StrType: str}


def _why(key: str, value: Any, kind: msgspec.inspect.Type, text: bool) -> str:
    """Why a field refuses `value`, from its type's structure: the wrong kind of value, or outside
    the field's bounds or choices."""
    base = _BASES.get(type(kind))
    if base is not None:
        try:
            msgspec.convert(value, base, strict=not text)
        except msgspec.ValidationError:
            return f"{key} must be {_NOUNS[base]}, not {value!r}"
    if isinstance(kind, msgspec.inspect.LiteralType):
        takes = "one of " + ", ".join(map(str, kind.values))
    elif isinstance(kind, msgspec.inspect.StrType):
        takes = PATTERN_WORDS[kind.pattern]
    elif isinstance(kind, msgspec.inspect.BoolType):
        takes = "on or off"
    elif isinstance(kind, (msgspec.inspect.IntType, msgspec.inspect.FloatType)) and kind.ge is not None:
        takes = "not negative" if kind.ge == 0 else f"at least {kind.ge}"
    elif isinstance(kind, (msgspec.inspect.IntType, msgspec.inspect.FloatType)) and kind.gt is not None:
        takes = f"more than {kind.gt}"
    else:
        takes = "something else"
    return f"{key} must be {takes}, not {value!r}"


def check(key: str, value: Any, *, text: bool = False) -> Any:
    """`value` as setting `key` holds it; `text`: the value is a string to read as the field's type
    (the environment, a choice flag). Raises Refused."""
    if key.startswith("models."):
        if not isinstance(value, str):
            raise Refused(f"{key} must be a string, not {value!r}")
        return value
    info = FIELDS[key][1]
    kind = msgspec.inspect.type_info(info.type)
    if isinstance(kind, msgspec.inspect.BoolType) and isinstance(value, str) and value.lower() in ON_OFF:
        value = ON_OFF[value.lower()]
    try:
        return msgspec.convert(value, info.type, strict=not text)
    except msgspec.ValidationError:
        raise Refused(_why(key, value, kind, text)) from None


def _checked(values: Mapping[str, Any], where: Callable[[str], str], text: bool = False) -> dict[str, Any]:
    out = {}
    for key, value in values.items():
        try:
            out[key] = check(key, value, text=text)
        except Refused as why:
            raise BadInput(f"{where(key)}: {why}") from None
    return out


# --- layers ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    """One layer's values by key (KEYS), checked; `name` says where they came from."""

    name: str  # "flag", "env", "record ...", "project PATH", "user PATH"
    path: Path | None = None
    values: dict[str, Any] = field(default_factory=dict)

    def source(self, key: str) -> str:
        if self.name == "flag":
            return f"flag {flag_name(key)}"
        if self.name == "env":
            return f"env {env_name(key)}"
        return self.name


def _is_secret(key: str) -> bool:
    """A name that holds a secret ("api-key", "openai-api-key", "token", ...): never in a file."""
    return key.endswith(("key", "secret", "password")) or key in ("token", "api-token", "access-token")


def _file_values(table: Mapping, where: str, section: str = "") -> dict[str, Any]:
    """A file's table by key: `top_k` read as `top-k`, as the flags name it; [models] as its keys;
    a qualified section's table ([grade]) by its qualified keys (`grade.timeout`)."""
    values: dict[str, Any] = {}
    for raw, value in table.items():
        key = (f"{section}." if section else "") + _kebab(raw)
        if _is_secret(key):
            raise BadInput(f"{where}: {raw} does not belong in a settings file; set OPENAI_API_KEY in the environment")
        if key == "models":
            values.update(_role_values(value, where))
        elif key in QUALIFIED and not section:
            if not isinstance(value, Mapping):
                raise BadInput(f"{where}: [{key}] must be a table of settings ({key}.timeout = 600 or a [{key}] table)")
            values.update(_file_values(value, f"{where} [{key}]", key))
        elif key in FIELDS and (FIELDS[key][0] in QUALIFIED) == bool(section):
            values[key] = value
        elif section:
            known = ", ".join(k.partition(".")[2] for k in SCALARS if FIELDS[k][0] == section)
            raise BadInput(f"{where}: unknown setting {raw!r} (known: {known})")
        else:
            known = ", ".join(k for k in SCALARS if FIELDS[k][0] not in QUALIFIED)
            raise BadInput(f"{where}: unknown setting {raw!r} (known: {known}, a [models] table, and a [grade] table)")
    return values


def _role_values(table: Any, where: str) -> dict[str, Any]:
    if not isinstance(table, Mapping):
        raise BadInput(f'{where}: [models] must be a table of role = "model"')
    values = {}
    for role, entry in table.items():
        if role not in ROLES:
            raise BadInput(f"{where}: [models] has no role {role!r} (roles: {', '.join(ROLES)})")
        if isinstance(entry, str):
            values[f"models.{role}"] = entry
            continue
        if not isinstance(entry, Mapping):
            raise BadInput(f"{where}: [models] {role} must be a model's name, or {{ model = ..., base-url = ... }}")
        for name, value in entry.items():
            part = {"model": "", "base-url": ".base-url"}.get(_kebab(name))
            if part is None:
                raise BadInput(f"{where}: [models] {role} takes model and base-url, not {name!r}")
            values[f"models.{role}{part}"] = value
    return values


def file_layer(name: str, path: Path, table: Mapping, where: str, base: Path) -> Layer:
    values = _checked(_file_values(table, where), lambda key: where, text=False)
    if str(values.get("llm", "")).startswith("scripted:"):
        # a script named in a file is found beside the file, wherever the command runs
        values["llm"] = "scripted:" + str((base / values["llm"].removeprefix("scripted:")).resolve())
    return Layer(name, path, values)


def _parse_toml(path: Path) -> dict:
    if tomllib is None:
        raise BadInput(f"{path}: reading settings files needs Python 3.11 (tomllib) or the tomli package")
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{path}: not valid TOML ({exc})") from None
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None


def project_layer(root: str | Path | None) -> Layer:
    """The project's settings: ROOT/magis.toml, else ROOT/pyproject.toml's [tool.magis-ray]."""
    if root is None:
        return Layer("project")
    root = Path(root)
    own = root / PROJECT_FILE
    if own.is_file():
        return file_layer(f"project {own}", own, _parse_toml(own), str(own), root)
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        table = _parse_toml(pyproject).get("tool", {}).get(PYPROJECT_TABLE)
        if table is not None:
            where = f"{pyproject} [tool.{PYPROJECT_TABLE}]"
            return file_layer(f"project {where}", pyproject, table, where, root)
    return Layer("project")


def user_file(environ: Mapping[str, str]) -> Path:
    """~/.config/magis-ray/config.toml ($XDG_CONFIG_HOME honoured); MAGIS_USER_CONFIG names another."""
    if environ.get("MAGIS_USER_CONFIG"):
        return Path(environ["MAGIS_USER_CONFIG"])
    config_home = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".config")
    return Path(config_home) / "magis-ray" / USER_FILE


def user_layer(environ: Mapping[str, str]) -> Layer:
    path = user_file(environ)
    if not path.is_file():
        return Layer("user")
    return file_layer(f"user {path}", path, _parse_toml(path), str(path), path.parent)


def env_layer(environ: Mapping[str, str]) -> Layer:
    """The settings the environment gives (MAGIS_TOP_K=5): text, read as the setting's type."""
    given = {key: environ[env_name(key)] for key in KEYS if environ.get(env_name(key))}
    return Layer("env", values=_checked(given, lambda key: f"{env_name(key)}={given[key]!r}", text=True))


def flag_layer(values: Mapping[str, Any]) -> Layer:
    """The settings given on the command line, by key (role_flags reads --role-model's pairs);
    `--tests on` is a word, read as the setting's switch."""
    text = {key: value for key, value in values.items() if isinstance(value, str) and key in FIELDS}
    checked = _checked({k: v for k, v in values.items() if k not in text}, lambda key: flag_name(key) or key)
    checked.update(_checked(text, lambda key: flag_name(key) or key, text=True))
    return Layer("flag", values=checked)


def record_layer(recorded: RunSettings, keys: tuple[str, ...] = RUN_KEYS) -> Layer:
    """A run's record as a layer: the values it holds under `keys`, by the same names (a role with
    no model of its own gives none)."""
    values = {key: value_of(recorded, key) for key in keys}
    return Layer("record", values={key: value for key, value in values.items()
                                   if not key.startswith("models.") or value != ""})


def role_flags(pairs: tuple[str, ...], option: str) -> dict[str, str]:
    """`--role-model developer=gpt-4o` (repeatable) as {"models.developer": "gpt-4o"}."""
    out = {}
    for pair in pairs:
        role, eq, value = pair.partition("=")
        if not eq or role not in ROLES or not value:
            raise BadInput(f"{option} {pair!r}: give ROLE=VALUE, ROLE one of {', '.join(ROLES)}")
        out[f"models.{role}" if option == "--role-model" else f"models.{role}.base-url"] = value
    return out


# --- resolving ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Effective:
    """The settings a command runs with, and where each came from (by key; "default" when no layer
    gave it): a run's, and the grade section."""

    settings: RunSettings
    sources: dict[str, str]
    grade: GradeSettings = GradeSettings()

    def source(self, key: str) -> str:
        return self.sources.get(key, "default")

    def value(self, key: str) -> Any:
        """A setting's value, in whichever section holds it."""
        grade = key in FIELDS and FIELDS[key][0] == "grade"
        return value_of(self.grade if grade else self.settings, key)

    def given(self, key: str) -> str:
        """A setting as the user gave it, for a line about its value: `--memory 64G`,
        `MAGIS_GRADE_MEMORY='64G'`, or `grade.memory = 64G (project PATH)`."""
        source, value = self.source(key), shown(self.value(key))
        if source.startswith("flag "):
            return f"{source.removeprefix('flag ')} {value}"
        if source.startswith("env "):
            return f"{source.removeprefix('env ')}={value!r}"
        return f"{key} = {value} ({source})"


def _role_models(values: Mapping[str, Any], source: Callable[[str], str]) -> tuple[RoleModel, ...]:
    """The roles given a model (a base URL alone changes no model)."""
    roles = []
    for role in ROLES:
        model, base_url = values.get(f"models.{role}", ""), values.get(f"models.{role}.base-url", "")
        if base_url and not model:
            raise BadInput(f"models.{role}.base-url is set ({source(f'models.{role}.base-url')}) "
                           f"but models.{role} is not: give the role a model")
        if model:
            roles.append(RoleModel(role=role, model=model, base_url=base_url))
    return tuple(roles)


def resolve(layers: list[Layer]) -> Effective:
    """The layers merged, the first that gives a key winning, into the one settings model."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for layer in reversed(layers):
        for key, value in layer.values.items():
            values[key], sources[key] = value, layer.source(key)
    sections: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
    for key, value in values.items():
        if not key.startswith("models."):
            section, info = FIELDS[key]
            sections[section][info.name] = value
    endpoint = EndpointSettings(**sections["endpoint"], models=_role_models(values, lambda k: sources.get(k, "default")))
    return Effective(RunSettings(**sections["run"], endpoint=endpoint), sources, GradeSettings(**sections["grade"]))


def describe(effective: Effective) -> list[str]:
    """`magis-ray config`'s lines: each setting by section, its value and its source (a role's
    model: when set)."""
    width = max(len(key) for key in KEYS)
    lines = []
    for section in SECTIONS:
        lines.append(f"[{section}]")
        for key in KEYS:
            in_section = "endpoint" if key.startswith("models.") else FIELDS[key][0]
            if in_section != section or (key.startswith("models.") and key not in effective.sources):
                continue
            value = shown(effective.value(key))
            lines.append(f"{key.ljust(width)}  {(value or '-').ljust(24)}  {effective.source(key)}")
    return lines


def describe_node(environ: Mapping[str, str]) -> list[str]:
    """`magis-ray config`'s [node] lines: what this machine's own environment gives (each node of a
    cluster resolves its own), its value and its source; a variable set to a value its setting
    does not take is named, and the default holds."""
    given, refused = node_values(environ), node_refusals(environ)
    settings = NodeSettings(**given)
    width = max(len(key) for key in KEYS)
    lines = ["[node]"]
    for name, variable in NODE_ENV.items():
        source = f"env {variable}" if name in given else f"default ({variable}={environ[variable]!r} ignored)" \
            if variable in refused else "default"
        value = shown(getattr(settings, name))
        lines.append(f"{_kebab(name).ljust(width)}  {(value or '-').ljust(24)}  {source}")
    return lines
