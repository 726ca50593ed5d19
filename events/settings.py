"""The one settings model: every setting of a run, with its one default, by section.

`RunSettings` is what a run records (`RunStarted.settings`): the team's settings at its top level
and the model's in its `endpoint` section. The command line, the environment and the settings files
fill it layer by layer (cli/settings.py) by the same names (`top_k` is `top-k` there, `timeout` is
`endpoint.timeout`); resume lays the flags over the record it decodes. A field's name is unique
across a run's sections, so a setting's key names its field wherever it sits. Secrets are never a
setting.

`GradeSettings` is the `grade` section: the defaults of `magis-ray grade`, filled by the same
layers. Its keys are qualified by the section (`grade.timeout`, a settings file's `[grade]` table,
MAGIS_GRADE_TIMEOUT), as its names are a run's names for other things (a model request's timeout,
a run's sandbox); on `magis-ray grade`'s command line they are its flags (`--timeout`).

`NodeSettings` is the one section no run records: what belongs to the machine a process runs on
(its caches, scratch, sandbox uids), which each process resolves on its own node from that node's
environment. This module is the one place that reads the process's environment.

Types carry their bounds: a layer that gives `top-k = 0` is refused from the field's own
constraint, and the message is built from it (cli/settings.py)."""
from __future__ import annotations

import os
from typing import Annotated, Any, Iterable, Literal, Mapping

import msgspec

ROLES = ("custodian", "manager", "developer", "qa")  # the roles a model of their own can be given to
LLM_KINDS = ("auto", "local", "openai", "scripted:FILE")

LLM_PATTERN = r"^(auto|local|openai|scripted:.+)$"
LlmKind = Annotated[str, msgspec.Meta(pattern=LLM_PATTERN)]
AtLeastOne = Annotated[int, msgspec.Meta(ge=1)]
NotNegative = Annotated[int, msgspec.Meta(ge=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]
Role = Literal["custodian", "manager", "developer", "qa"]
SIZE_PATTERN = r"^\d+(\.\d+)?[kKmMgG]?[bB]?$"  # 8G, 512M, 1.5g, 4096 (bytes), 0
Size = Annotated[str, msgspec.Meta(pattern=SIZE_PATTERN)]


class RoleModel(msgspec.Struct, frozen=True):
    """A role's own model (a settings file's [models] table): the gateway sends that role's
    requests to it, at `base_url` when it has one, else at the run's endpoint."""

    role: Role
    model: str
    base_url: str = ""


class EndpointSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How a run talks to its model (never the API key): the section the gateway is given."""

    # "auto" (openai when a base URL or OPENAI_API_KEY is set, else local), "local", "openai",
    # "scripted:FILE"; a run records what auto resolved to, and a script's absolute path
    llm: LlmKind = "auto"
    base_url: str = ""  # an OpenAI-compatible endpoint ("": the client's default)
    response_format: Literal["json_schema", "json_object", "none"] = "json_schema"
    timeout: Seconds = 120.0  # seconds per model request
    concurrency: AtLeastOne = 8  # model requests in flight at once
    rpm: NotNegative = 0  # most requests per minute, for all runs together (0: no limit)
    tpm: NotNegative = 0  # most tokens per minute, for all runs together (0: no limit)
    models: tuple[RoleModel, ...] = ()  # a model per role; a role not listed asks the run's `model`


class RunSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What a run records of its settings: the team's, and the model's in `endpoint`."""

    model: str = ""  # the model's name ("" until a run resolves it: the endpoint's own)
    top_k: AtLeastOne = 10  # BM25 candidates the Custodian examines
    max_files: AtLeastOne = 3  # the Custodian keeps at most this many relevant files
    max_review_rounds: AtLeastOne = 3  # Developer/QA iterations per task
    candidates: AtLeastOne = 1  # candidate patches per task
    # Execution (off: the paper's MAGIS exactly). With tests on, a reproduction test and the
    # repository's nearest regression tests judge every patch.
    tests: bool = True
    env_setup: str = ""  # the user's install step for the test environment ("": SWE-bench's spec, or what the project declares)
    test_cmd: str = ""  # the user's test command, followed by the tests to run ("": the spec's runner, or pytest)
    python: str = ""  # the interpreter of a repository's test environment, "3.12" ("": the newest the project allows)
    sandbox: Literal["bwrap", "none"] = "bwrap"  # "none" runs tests unconfined (the user asked for it)
    test_timeout: Seconds = 600.0  # seconds each of the team's test runs may take
    test_memory: Size = "4G"  # each of the team's test runs' memory budget: its processes and in-memory scratch ("0": no limit)
    token_budget: NotNegative = 0  # most tokens the run may spend (0: no limit)
    batch_budget: NotNegative = 0  # most tokens a batch's runs may spend together (0: no limit)
    # The ablations (the paper's table): off, a role or an input is left out
    use_qa: bool = True
    use_hints: bool = True
    use_memory: bool = True
    memory_any_model: bool = False  # reuse file summaries written by any model, not only by `model`
    # Recorded by the run, not set by the user:
    batch: str = ""  # the batch the run belongs to ("" for a single issue); its token budget is shared
    test_python: str = ""  # the interpreter version a run of an earlier version recorded for its environment (python holds it now)
    # The Custodian's file ranking (actors.code.ranking.RANKINGS): "symbols" weighs BM25 with
    # symbol and path evidence; "previous" is plain BM25 over paths and contents.
    ranking: str = "symbols"
    # Where the cluster's nodes share built environments and testbeds: a folder on a shared
    # filesystem, or a URL (s3://, gs://) through fsspec ("": each node builds its own). One for
    # the whole cluster, so it travels with the work from the driver, unlike a node's own cache.
    artifact_store: str = ""
    endpoint: EndpointSettings = EndpointSettings()

    def model_of(self, role: str) -> str:
        """The model that answers `role`'s requests."""
        return next((r.model for r in self.endpoint.models if r.role == role), self.model)


# The fields a run fills in itself; no layer sets them.
RECORDED_ONLY = ("batch", "test_python", "ranking")


class GradeSettings(msgspec.Struct, frozen=True, kw_only=True):
    """`magis-ray grade`'s settings (the grading service's GradingOptions takes its defaults from here)."""

    sandbox: Literal["bwrap", "none"] = "bwrap"  # "none" runs the tests unconfined (you trust the predictions)
    timeout: Seconds = 1800.0  # seconds a test run may take
    memory: Size = "8G"  # each test run's memory budget: its processes and in-memory scratch together ("0": no limit)
    workers: AtLeastOne = 1  # instances graded at once
    network: bool = False  # the tests get the network (only for predictions you trust)
    env_setup: str = ""  # a user's repository: its environment's setup command ("": what the project declares)
    test_cmd: str = ""  # a user's repository: its test command ("": pytest -rA)
    env_python: str = ""  # a user's repository: the Python version of its environment ("": the newest it allows)


def size_bytes(size: str) -> int:
    """A Size in bytes: "8G" is 8 GiB, "512m" 512 MiB, "4096" bytes."""
    units = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
    text = size.strip().lower().rstrip("b")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(float(text))


# --- the node's own settings, and the one place that reads the process's environment -----------


class NodeSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What belongs to the machine a process runs on: resolved by each process on its own node,
    from that node's environment (node_settings()), never recorded in a run nor sent from the driver."""

    env_cache: str = ""  # MAGIS_ENV_CACHE: the node's cache of built environments ("": ~/.cache/magis-ray/envs)
    # MAGIS_ENV_CACHE_GB: the most that cache holds; past it, the least recently used entries go (0: no bound)
    env_cache_gb: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    scratch_dir: str = "/var/tmp"  # MAGIS_SCRATCH_DIR: where the sandboxes' bounded scratch disks are made
    sandbox_uids: str = ""  # MAGIS_SANDBOX_UIDS: FIRST-LAST, the uids sandboxes run as ("": the default pool)
    sandbox_cgroup: str = ""  # MAGIS_SANDBOX_CGROUP: the cgroup sandboxes' memory budgets are made under ("": found)
    lease_s: Seconds = 30.0  # MAGIS_LEASE_S: how long a run's lease outlives a driver that stops renewing it
    log_level: str = "info"  # MAGIS_LOG_LEVEL
    prompts_dir: str = ""  # MAGIS_PROMPTS_DIR: the user's own versions of prompt templates ("": the packaged ones)
    pyenv_root: str = ""  # PYENV_ROOT: where pyenv's interpreters are ("": ~/.pyenv)
    ray_address: str = ""  # RAY_ADDRESS: the cluster to join ("": a local Ray)
    # MAGIS_RAY: "auto" joins a Ray that `ray start --head` left running here, else starts one of
    # the command's own; "own" always starts its own (ended with the command)
    ray: Literal["auto", "own"] = "auto"
    # MAGIS_RAY_START_S: how long a Ray of our own is started again after its start ran out of time
    # (on a loaded machine Ray misses its own fixed start-up deadlines while merely slow)
    ray_start_s: Seconds = 300.0


# What each node resolves for itself and no driver sends: its own folders and sandbox resources
NODE_OWN = ("env_cache", "env_cache_gb", "scratch_dir", "sandbox_uids", "sandbox_cgroup", "pyenv_root")
# Each node setting's variable: MAGIS_ and its name, but for the variables other tools own
NODE_ENV = {name: {"pyenv_root": "PYENV_ROOT", "ray_address": "RAY_ADDRESS"}.get(name, "MAGIS_" + name.upper())
            for name in NodeSettings.__struct_fields__}


def node_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """The node settings `environ` gives, each read as its field's type; a value its field does not
    take is left out (the default holds), for `magis-ray config` to point out (node_refusals)."""
    fields = {f.name: f for f in msgspec.structs.fields(NodeSettings)}
    given = {}
    for name, variable in NODE_ENV.items():
        if environ.get(variable):
            try:
                given[name] = msgspec.convert(environ[variable], fields[name].type, strict=False)
            except msgspec.ValidationError:
                pass
    return given


def node_refusals(environ: Mapping[str, str]) -> list[str]:
    """The node variables set to a value their setting does not take."""
    taken = node_values(environ)
    return [variable for name, variable in NODE_ENV.items() if environ.get(variable) and name not in taken]


def node_settings(environ: Mapping[str, str] | None = None) -> NodeSettings:
    """This node's settings, from its own environment (or `environ`)."""
    return NodeSettings(**node_values(os.environ if environ is None else environ))


def set_node_setting(name: str, value: str) -> None:
    """Give this process's node setting `name` (and every process it starts, a Ray of its own
    included) the value `value`, through its variable."""
    os.environ[NODE_ENV[name]] = value


def process_environment(**overrides: str) -> dict[str, str]:
    """This process's environment with `overrides`: what a child process (git, pip, a server) is given."""
    return {**os.environ, **overrides}


def api_key() -> str | None:
    """The model's API key (OPENAI_API_KEY): never a setting, never recorded, never shown."""
    return os.environ.get("OPENAI_API_KEY") or None


def forget_variables(names: Iterable[str]) -> None:
    """Drop these variables (any case) from this process's environment, for every child it starts."""
    wanted = {name.lower() for name in names}
    for name in [n for n in os.environ if n.lower() in wanted]:
        del os.environ[name]
