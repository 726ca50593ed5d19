"""The one settings model: every setting of a run, with its one default, by section.

`RunSettings` is what a run records (`RunStarted.settings`): the team's settings at its top level
and the model's in its `endpoint` section. The command line, the environment and the settings files
fill it layer by layer (cli/settings.py) by the same names (`top_k` is `top-k` there, `timeout` is
`endpoint.timeout`); resume lays the flags over the record it decodes. A field's name is unique
across the sections, so a setting's key names its field wherever it sits. Secrets are never a
setting.

Types carry their bounds: a layer that gives `top-k = 0` is refused from the field's own
constraint, and the message is built from it (cli/settings.py)."""
from __future__ import annotations

from typing import Annotated, Literal

import msgspec

ROLES = ("custodian", "manager", "developer", "qa")  # the roles a model of their own can be given to
LLM_KINDS = ("auto", "local", "openai", "scripted:FILE")

LlmKind = Annotated[str, msgspec.Meta(pattern=r"^(auto|local|openai|scripted:.+)$")]
AtLeastOne = Annotated[int, msgspec.Meta(ge=1)]
NotNegative = Annotated[int, msgspec.Meta(ge=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]
Role = Literal["custodian", "manager", "developer", "qa"]


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
    env_setup: str = ""  # the user's install step for the test environment ("": SWE-bench's spec, or the default)
    test_cmd: str = ""  # the user's test command, followed by the tests to run ("": the spec's runner, or pytest)
    sandbox: Literal["bwrap", "none"] = "bwrap"  # "none" runs tests unconfined (the user asked for it)
    token_budget: NotNegative = 0  # most tokens the run may spend (0: no limit)
    batch_budget: NotNegative = 0  # most tokens a batch's runs may spend together (0: no limit)
    # The ablations (the paper's table): off, a role or an input is left out
    use_qa: bool = True
    use_hints: bool = True
    use_memory: bool = True
    memory_any_model: bool = False  # reuse file summaries written by any model, not only by `model`
    # Recorded by the run, not set by the user:
    batch: str = ""  # the batch the run belongs to ("" for a single issue); its token budget is shared
    test_python: str = ""  # the interpreter version for a user's repository's environment
    # The Custodian's file ranking (actors.code.ranking.RANKINGS): "symbols" weighs BM25 with
    # symbol and path evidence; "previous" is plain BM25 over paths and contents.
    ranking: str = "symbols"
    endpoint: EndpointSettings = EndpointSettings()

    def model_of(self, role: str) -> str:
        """The model that answers `role`'s requests."""
        return next((r.model for r in self.endpoint.models if r.role == role), self.model)


# The fields a run fills in itself; no layer sets them.
RECORDED_ONLY = ("batch", "test_python", "ranking")
