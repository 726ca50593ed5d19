"""Settings in a file, and where each effective setting comes from.

Files: `magis.toml` at the repository's root, or else the `[tool.magis-ray]` table of its
`pyproject.toml` (the project), and `config.toml` under `~/.config/magis-ray/` (the user;
`$XDG_CONFIG_HOME` is honoured). The same keys as the flags (`top-k = 5`, `env-setup = "..."`),
and a `[models]` table that gives a role its own model:

    [models]
    custodian = "gpt-4o-mini"
    developer = { model = "qwen2.5-coder:32b", base-url = "http://gpu-box:8000/v1" }

Precedence: flags, then the environment, then the project, then the user, then the defaults.
An API key is never a setting: it is read from OPENAI_API_KEY only, and never shown."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

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
ON_OFF = ("on", "off")


@dataclass(frozen=True)
class Setting:
    key: str  # as files write it, like the flag without its dashes: "token-budget"
    env: str  # the environment variable
    kind: Any  # int, float, str, or a tuple of the allowed words
    flag: str = ""  # the option that sets it ("" : none; `config` says so)

    @property
    def param(self) -> str:
        return self.key.replace("-", "_")


def _s(key: str, env: str, kind: Any, flag: str | None = None) -> Setting:
    return Setting(key, env, kind, f"--{key}" if flag is None else flag)


SETTINGS: tuple[Setting, ...] = (
    _s("llm", "MAGIS_LLM", str),
    _s("model", "MAGIS_MODEL", str),
    _s("base-url", "OPENAI_BASE_URL", str),
    _s("response-format", "MAGIS_RESPONSE_FORMAT", ("json_schema", "json_object", "none")),
    _s("timeout", "MAGIS_TIMEOUT", float),
    _s("concurrency", "MAGIS_CONCURRENCY", int),
    _s("rpm", "MAGIS_RPM", int),
    _s("tpm", "MAGIS_TPM", int),
    _s("token-budget", "MAGIS_TOKEN_BUDGET", int),
    _s("batch-budget", "MAGIS_BATCH_BUDGET", int),
    _s("top-k", "MAGIS_TOP_K", int),
    _s("max-files", "MAGIS_MAX_FILES", int),
    _s("max-review-rounds", "MAGIS_MAX_REVIEW_ROUNDS", int),
    _s("candidates", "MAGIS_CANDIDATES", int),
    _s("tests", "MAGIS_TESTS", ON_OFF),
    _s("env-setup", "MAGIS_ENV_SETUP", str),
    # the project's own test command: the team's test runs (the tests to run follow it), and `apply`'s check of its branch
    _s("test-cmd", "MAGIS_TEST_CMD", str, flag=""),
    _s("sandbox", "MAGIS_SANDBOX", ("bwrap", "none")),
    *(Setting(f"models.{role}", f"MAGIS_MODEL_{role.upper()}", str, "--role-model") for role in ROLES),
    *(Setting(f"models.{role}.base-url", f"MAGIS_BASE_URL_{role.upper()}", str, "--role-base-url") for role in ROLES),
)
BY_KEY = {s.key: s for s in SETTINGS}


def _is_secret(key: str) -> bool:
    """A name that holds a secret ("api-key", "openai-api-key", "token", ...): never in a file."""
    return key.endswith(("key", "secret", "password")) or key in ("token", "api-token", "access-token")


@dataclass(frozen=True)
class Layer:
    """One settings file's values, checked; `name` says where they came from."""

    name: str
    path: Path | None = None
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Resolved:
    value: Any
    source: str  # "flag --top-k", "env MAGIS_TOP_K", "project /r/magis.toml", "user ...", "default"


# --- reading --------------------------------------------------------------------------------------


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


def _checked(key: str, value: Any, where: str, base: Path | None) -> Any:
    """`value` as the setting `key` takes it; BadInput names the file and the key."""
    setting = BY_KEY[key]
    kind = setting.kind
    if kind is ON_OFF and isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(kind, tuple):
        if value not in kind:
            raise BadInput(f"{where}: {key} must be one of {', '.join(kind)}, not {value!r}")
        return value
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadInput(f"{where}: {key} must be {'an integer' if kind is int else 'a number' if kind is float else 'a string'}, "
                       f"not {value!r}")
    if key == "llm" and value.startswith("scripted:") and base is not None:
        # a script named in a file is found beside the file, wherever the command runs
        value = "scripted:" + str((base / value.removeprefix("scripted:")).resolve())
    return value


def _flatten(table: Mapping, where: str, base: Path | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for raw, value in table.items():
        key = raw.replace("_", "-")
        if _is_secret(key):
            raise BadInput(f"{where}: {raw} does not belong in a settings file; set OPENAI_API_KEY in the environment")
        if key == "models":
            if not isinstance(value, Mapping):
                raise BadInput(f"{where}: [models] must be a table of role = \"model\"")
            values.update(_role_models(value, where))
            continue
        if key not in BY_KEY or key.startswith("models."):
            known = ", ".join(s.key for s in SETTINGS if not s.key.startswith("models."))
            raise BadInput(f"{where}: unknown setting {raw!r} (known: {known}, and a [models] table)")
        values[key] = _checked(key, value, where, base)
    return values


def _role_models(table: Mapping, where: str) -> dict[str, str]:
    values = {}
    for role, value in table.items():
        if role not in ROLES:
            raise BadInput(f"{where}: [models] has no role {role!r} (roles: {', '.join(ROLES)})")
        if isinstance(value, str):
            value = {"model": value}
        if not isinstance(value, Mapping):
            raise BadInput(f"{where}: [models] {role} must be a model's name, or {{ model = ..., base-url = ... }}")
        for raw, item in value.items():
            name = raw.replace("_", "-")
            if name not in ("model", "base-url"):
                raise BadInput(f"{where}: [models] {role} takes model and base-url, not {raw!r}")
            key = f"models.{role}" if name == "model" else f"models.{role}.base-url"
            values[key] = _checked(key, item, where, None)
    return values


def project_layer(root: str | Path | None) -> Layer:
    """The project's settings: ROOT/magis.toml, else ROOT/pyproject.toml's [tool.magis-ray]."""
    if root is None:
        return Layer("project")
    root = Path(root)
    own = root / PROJECT_FILE
    if own.is_file():
        return Layer(f"project {own}", own, _flatten(_parse_toml(own), str(own), root))
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        table = _parse_toml(pyproject).get("tool", {}).get(PYPROJECT_TABLE)
        if table is not None:
            where = f"{pyproject} [tool.{PYPROJECT_TABLE}]"
            return Layer(f"project {where}", pyproject, _flatten(table, where, root))
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
    return Layer(f"user {path}", path, _flatten(_parse_toml(path), str(path), path.parent))


def _from_env(setting: Setting, text: str) -> Any:
    where = f"{setting.env}={text!r}"
    if setting.kind in (int, float):
        try:
            return setting.kind(text)
        except ValueError:
            raise BadInput(f"{where}: {setting.key} must be {'an integer' if setting.kind is int else 'a number'}") from None
    return _checked(setting.key, text, where, None)


# --- resolving ------------------------------------------------------------------------------------


def resolve(flags: Mapping[str, Any], environ: Mapping[str, str], layers: list[Layer], defaults: Mapping[str, Any]
            ) -> dict[str, Resolved]:
    """Every setting's effective value and its source. `flags`: the values given on the command
    line, by key; `layers`: the project's, then the user's; `defaults`: by key (a role's model and
    base URL default to none: the run's own)."""
    out: dict[str, Resolved] = {}
    for setting in SETTINGS:
        key = setting.key
        if key in flags:
            out[key] = Resolved(flags[key], f"flag {setting.flag}")
        elif environ.get(setting.env):
            out[key] = Resolved(_from_env(setting, environ[setting.env]), f"env {setting.env}")
        elif layer := next((layer for layer in layers if key in layer.values), None):
            out[key] = Resolved(layer.values[key], layer.name)
        elif key in defaults:
            out[key] = Resolved(defaults[key], "default")
    return out


def role_flags(pairs: tuple[str, ...], option: str) -> dict[str, str]:
    """`--role-model developer=gpt-4o` (repeatable) as {"models.developer": "gpt-4o"}."""
    out = {}
    for pair in pairs:
        role, eq, value = pair.partition("=")
        if not eq or role not in ROLES or not value:
            raise BadInput(f"{option} {pair!r}: give ROLE=VALUE, ROLE one of {', '.join(ROLES)}")
        out[f"models.{role}" if option == "--role-model" else f"models.{role}.base-url"] = value
    return out


def role_models(values: Mapping[str, Resolved]) -> tuple:
    """The run's RunSettings.roles: each role given a model (a base URL alone changes no model)."""
    from magis_ray.events.schema import RoleModel

    roles = []
    for role in ROLES:
        model = values.get(f"models.{role}")
        base_url = values.get(f"models.{role}.base-url")
        if model is None and base_url is not None:
            raise BadInput(f"models.{role}.base-url is set ({base_url.source}) but models.{role} is not: give the role a model")
        if model is not None:
            roles.append(RoleModel(role=role, model=model.value, base_url=base_url.value if base_url else ""))
    return tuple(roles)


def describe(values: Mapping[str, Resolved]) -> list[str]:
    """`magis-ray config`'s lines: each setting, its value and its source."""
    width = max(len(s.key) for s in SETTINGS)
    lines = []
    for setting in SETTINGS:
        if setting.key not in values:
            continue
        got = values[setting.key]
        shown = "" if got.value in ("", None) else str(got.value)
        lines.append(f"{setting.key.ljust(width)}  {(shown or '-').ljust(24)}  {got.source}")
    return lines
