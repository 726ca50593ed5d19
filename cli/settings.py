"""The settings of a run: one struct, filled by layer, and where each value came from.

Files: `magis.toml` at the repository's root, or else the `[tool.magis-ray]` table of its
`pyproject.toml` (the project), and `config.toml` under `~/.config/magis-ray/` (the user;
`$XDG_CONFIG_HOME` is honoured). The same keys as the flags (`top-k = 5`, `env-setup = "..."`),
and a `[models]` table that gives a role its own model:

    [models]
    custodian = "gpt-4o-mini"
    developer = { model = "qwen2.5-coder:32b", base-url = "http://gpu-box:8000/v1" }

Precedence: flags, then (on resume) the run's record, then the environment, then the project, then
the user, then the defaults of `Settings`. Every layer is checked by converting it to `Settings`
(msgspec), and the merged layers are converted once more into the one struct a run is given.
An API key is never a setting: it is read from OPENAI_API_KEY only, and never shown."""
from __future__ import annotations

import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping

import msgspec

from .errors import BadInput

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
ROLES = ("custodian", "manager", "developer", "qa")  # as the gateway routes them (gateway.ROLES)

LLM_KINDS = ("auto", "local", "openai", "scripted:FILE")
LlmKind = Annotated[str, msgspec.Meta(pattern=r"^(auto|local|openai|scripted:.+)$")]
AtLeastOne = Annotated[int, msgspec.Meta(ge=1)]
NotNegative = Annotated[int, msgspec.Meta(ge=0)]


class RoleModelSetting(msgspec.Struct, frozen=True, kw_only=True, rename="kebab", forbid_unknown_fields=True):
    model: str = ""
    base_url: str = ""


RoleEntry = typing.Union[str, RoleModelSetting, None]  # a file writes a model's name, or the table


class RoleModels(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    custodian: RoleEntry = None
    manager: RoleEntry = None
    developer: RoleEntry = None
    qa: RoleEntry = None

    def of(self, role: str) -> RoleModelSetting:
        entry = getattr(self, role)
        return RoleModelSetting(model=entry) if isinstance(entry, str) else entry or RoleModelSetting()


class Settings(msgspec.Struct, frozen=True, kw_only=True, rename="kebab", forbid_unknown_fields=True):
    """Every setting of `submit`, by the name files and flags give it (`top-k`, `--top-k`)."""

    llm: LlmKind = "auto"  # LLM_KINDS
    model: str = ""
    base_url: str = ""
    response_format: Literal["json_schema", "json_object", "none"] = "json_schema"
    timeout: Annotated[float, msgspec.Meta(gt=0)] = 120.0
    concurrency: AtLeastOne = 8
    rpm: NotNegative = 0
    tpm: NotNegative = 0
    token_budget: NotNegative = 0
    batch_budget: NotNegative = 0
    top_k: AtLeastOne = 10
    max_files: AtLeastOne = 3
    max_review_rounds: AtLeastOne = 3
    candidates: AtLeastOne = 1
    tests: Literal["on", "off"] = "on"
    env_setup: str = ""
    test_cmd: str = ""  # the project's test command: the team's test runs (the tests to run follow it), and `apply`'s check of its branch
    sandbox: Literal["bwrap", "none"] = "bwrap"
    models: RoleModels = RoleModels()


DEFAULTS = Settings()
FIELDS = {f.encode_name: f for f in msgspec.structs.fields(Settings)}
SCALARS = tuple(name for name in FIELDS if name != "models")
# the settings as `config` lists them and layers hold them: "top-k", ..., "models.qa", "models.qa.base-url"
KEYS = (*SCALARS, *(f"models.{role}" for role in ROLES), *(f"models.{role}.base-url" for role in ROLES))
NO_FLAG = ("test-cmd",)  # set in a file or the environment only
ENV_NAMES = {"base-url": "OPENAI_BASE_URL"}


def env_name(key: str) -> str:
    """The environment variable of a setting: MAGIS_TOP_K, MAGIS_MODEL_QA, MAGIS_BASE_URL_QA."""
    if key.startswith("models."):
        role = key.split(".")[1]
        return f"MAGIS_BASE_URL_{role.upper()}" if key.endswith(".base-url") else f"MAGIS_MODEL_{role.upper()}"
    return ENV_NAMES.get(key) or "MAGIS_" + key.upper().replace("-", "_")


def flag_name(key: str) -> str:
    if key.startswith("models."):
        return "--role-base-url" if key.endswith(".base-url") else "--role-model"
    return "" if key in NO_FLAG else f"--{key}"


def value_of(settings: Settings, key: str) -> Any:
    if key.startswith("models."):
        role = settings.models.of(key.split(".")[1])
        return role.base_url if key.endswith(".base-url") else role.model
    return getattr(settings, FIELDS[key].name)


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


def _nested(values: Mapping[str, Any]) -> dict:
    """Keys as KEYS name them, as the table `Settings` converts from."""
    out: dict = {}
    for key, value in values.items():
        if key.startswith("models."):
            _, role, *rest = key.split(".")
            out.setdefault("models", {}).setdefault(role, {})["base-url" if rest else "model"] = value
        else:
            out[key] = value
    return out


def _given(settings: Settings, table: Mapping) -> dict[str, Any]:
    """The values `table` gives, read off the struct it converted to, by key."""
    values = {key: value_of(settings, key) for key in table if key != "models"}
    for role, entry in (table.get("models") or {}).items():
        converted = settings.models.of(role)
        if isinstance(entry, str) or "model" in entry:
            values[f"models.{role}"] = converted.model
        if isinstance(entry, Mapping) and "base-url" in entry:
            values[f"models.{role}.base-url"] = converted.base_url
    return values


def _converted(table: Mapping, where, strict: bool = True) -> Settings:
    """`table` as Settings; BadInput names the layer (`where(key)`) and the setting."""
    try:
        return msgspec.convert(table, Settings, strict=strict)
    except msgspec.ValidationError as exc:
        key, why = _explain(str(exc), table)
        raise BadInput(f"{where(key)}: {why}") from None


def _explain(message: str, table: Mapping) -> tuple[str, str]:
    """msgspec's message about `table`, as the setting's key and what is wrong, in the user's words."""
    what, _, at = message.partition(" - at `$")
    path = [part for part in at.rstrip("`").split(".") if part]
    key = ".".join(path)
    value: Any = table
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    if what.startswith("Object contains unknown field"):
        name = what.split("`")[1]
        if not path:
            known = ", ".join(SCALARS)
            return name, f"unknown setting {name!r} (known: {known}, and a [models] table)"
        if path == ["models"]:
            return "models", f"[models] has no role {name!r} (roles: {', '.join(ROLES)})"
        return key, f"[models] {path[1]} takes model and base-url, not {name!r}"
    if path == ["models"]:
        return key, "[models] must be a table of role = \"model\""
    if len(path) == 2 and path[0] == "models":
        return key, f"[models] {path[1]} must be a model's name, or {{ model = ..., base-url = ... }}"
    if key == "llm" and "matching regex" in what:
        return key, f"{key} must be one of {', '.join(LLM_KINDS)}, not {value!r}"
    if what.startswith("Invalid enum value"):
        allowed = typing.get_args(FIELDS[key].type) if key in FIELDS else ()
        return key, f"{key} must be one of {', '.join(allowed)}, not {value!r}"
    for bound, words in ((">= 1", "at least 1"), (">= 0", "not negative"), ("> 0", "more than 0")):
        if what.endswith(f"` {bound}"):
            return key, f"{key} must be {words}, not {value!r}"
    kind = what.split("`")[1] if "`" in what else ""
    noun = {"int": "an integer", "float": "a number", "str": "a string"}.get(kind, kind or "something else")
    return key, f"{key} must be {noun}, not {value!r}"


def _is_secret(key: str) -> bool:
    """A name that holds a secret ("api-key", "openai-api-key", "token", ...): never in a file."""
    return key.endswith(("key", "secret", "password")) or key in ("token", "api-token", "access-token")


def _kebab(table: Mapping, where: str) -> dict:
    """A file's table with `top_k` read as `top-k`, as the flags name it; `tests = false` as off."""
    out: dict = {}
    for raw, value in table.items():
        key = raw.replace("_", "-")
        if _is_secret(key):
            raise BadInput(f"{where}: {raw} does not belong in a settings file; set OPENAI_API_KEY in the environment")
        if key == "tests" and isinstance(value, bool):
            value = "on" if value else "off"
        if key == "models" and isinstance(value, Mapping):
            value = {role: {k.replace("_", "-"): v for k, v in entry.items()} if isinstance(entry, Mapping) else entry
                     for role, entry in value.items()}
        out[key] = value
    return out


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


def file_layer(name: str, path: Path, table: Mapping, where: str, base: Path) -> Layer:
    table = _kebab(table, where)
    values = _given(_converted(table, lambda key: where), table)
    if str(values.get("llm", "")).startswith("scripted:"):
        # a script named in a file is found beside the file, wherever the command runs
        values["llm"] = "scripted:" + str((base / values["llm"].removeprefix("scripted:")).resolve())
    return Layer(name, path, values)


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
    """The settings the environment gives (MAGIS_TOP_K=5): text, converted as the setting's type."""
    given = {key: environ[env_name(key)] for key in KEYS if environ.get(env_name(key))}
    table = _nested(given)
    settings = _converted(table, lambda key: f"{env_name(key)}={given.get(key, '')!r}", strict=False)
    return Layer("env", values=_given(settings, table))


def flag_layer(values: Mapping[str, Any]) -> Layer:
    """The settings given on the command line, by key (role_flags reads --role-model's pairs)."""
    table = _nested(values)
    return Layer("flag", values=_given(_converted(table, lambda key: flag_name(key) or key), table))


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
    gave it)."""

    settings: Settings
    sources: dict[str, str]

    def source(self, key: str) -> str:
        return self.sources.get(key, "default")


def resolve(layers: list[Layer]) -> Effective:
    """The layers merged, the first that gives a key winning, into one Settings."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for layer in reversed(layers):
        for key, value in layer.values.items():
            values[key], sources[key] = value, layer.source(key)
    settings = _converted(_nested(values), lambda key: sources.get(key, "settings"))
    return Effective(settings, sources)


def role_models(effective: Effective) -> tuple:
    """The run's RunSettings.roles: each role given a model (a base URL alone changes no model)."""
    from magis_ray.events.schema import RoleModel

    roles = []
    for role in ROLES:
        given = effective.settings.models.of(role)
        if given.base_url and not given.model:
            raise BadInput(f"models.{role}.base-url is set ({effective.source(f'models.{role}.base-url')}) "
                           f"but models.{role} is not: give the role a model")
        if given.model:
            roles.append(RoleModel(role=role, model=given.model, base_url=given.base_url))
    return tuple(roles)


def describe(effective: Effective) -> list[str]:
    """`magis-ray config`'s lines: each setting, its value and its source (a role's model: when set)."""
    width = max(len(key) for key in KEYS)
    lines = []
    for key in KEYS:
        if key.startswith("models.") and key not in effective.sources:
            continue
        value = value_of(effective.settings, key)
        shown = "" if value in ("", None) else str(value)
        lines.append(f"{key.ljust(width)}  {(shown or '-').ljust(24)}  {effective.source(key)}")
    return lines
