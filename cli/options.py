"""The options several commands share: the store, the model, and the run's settings. A setting's
default is the one settings model's (events/settings.py; shown in --help), and an option's
parameter is the setting's field; only an option given on the command line is a layer of the
settings (cli/settings.py), and the environment is read there, not here."""
from __future__ import annotations

import click

from magis_ray.events.settings import EndpointSettings, RunSettings

RUN = RunSettings()
ENDPOINT = EndpointSettings()
DEFAULT_STORE = ".magis"
store_option = click.option(
    "--store", "store_path", default=DEFAULT_STORE, envvar="MAGIS_STORE", show_default=True,
    help="The magis store: a folder (or its events.sqlite3 file).",
)


def on_off(value: bool) -> str:
    return "on" if value else "off"


def model_options(f):
    """The options that say which model to use and how to talk to it."""
    for option in reversed([
        click.option("--llm", default=ENDPOINT.llm, show_default=True,
                     help="auto (openai when --base-url or OPENAI_API_KEY is set, else local), local (SmolLM2-135M "
                          "on loopback; pip install 'magis-ray[local]'), openai, or scripted:FILE."),
        click.option("--base-url", default=ENDPOINT.base_url, help="Any OpenAI-compatible endpoint (env OPENAI_BASE_URL)."),
        click.option("--local-port", type=int, default=0, help="With --llm local: the loopback port of its server (0: any free one)."),
        click.option("--model", default=RUN.model, help="Model name (env MAGIS_MODEL)."),
        click.option("--timeout", type=float, default=ENDPOINT.timeout, show_default=True, help="Seconds per model request."),
        click.option("--concurrency", type=int, default=ENDPOINT.concurrency, show_default=True, help="Model requests in flight at once."),
        click.option("--rpm", type=int, default=ENDPOINT.rpm, help="Most model requests per minute, for all runs together (0: no limit)."),
        click.option("--tpm", type=int, default=ENDPOINT.tpm, help="Most model tokens per minute, for all runs together (0: no limit)."),
        click.option("--response-format", type=click.Choice(["json_schema", "json_object", "none"]), default=ENDPOINT.response_format,
                     show_default=True, help="How answer schemas are sent (llama.cpp wants json_object)."),
    ]):
        f = option(f)
    return f


def settings_options(f):
    for option in reversed([
        click.option("--top-k", type=int, default=RUN.top_k, show_default=True, help="BM25 candidates the Custodian examines."),
        click.option("--max-files", type=int, default=RUN.max_files, show_default=True, help="Relevant files kept at most."),
        click.option("--max-review-rounds", type=int, default=RUN.max_review_rounds, show_default=True, help="Developer/QA iterations per task."),
        click.option("--no-qa", "use_qa", is_flag=True, flag_value=False, default=RUN.use_qa,
                     help="Ablation: no QA Engineer; the first patch stands."),
        click.option("--no-hints", "use_hints", is_flag=True, flag_value=False, default=RUN.use_hints,
                     help="Ablation: ignore the issue's hints_text."),
        click.option("--no-memory", "use_memory", is_flag=True, flag_value=False, default=RUN.use_memory,
                     help="Ablation: always summarize files afresh."),
        click.option("--token-budget", type=int, default=RUN.token_budget, help="Most tokens the run may spend (0: no limit)."),
        click.option("--memory-any-model", is_flag=True, default=RUN.memory_any_model,
                     help="Reuse file summaries written by any model (by default only by the run's own model)."),
        click.option("--tests", type=click.Choice(["on", "off"]), default=on_off(RUN.tests), show_default=True,
                     help="Run the code: a reproduction test and the nearest regression tests judge every patch "
                          "(off: the paper's MAGIS exactly). Without an environment the run goes on without, and says so."),
        click.option("--candidates", type=int, default=RUN.candidates, show_default=True,
                     help="Candidate patches per task, each by its own Developer sampling above temperature 0; "
                          "the tests, then a majority of equivalent patches, then the QA Engineer choose."),
    ]):
        f = option(f)
    return test_settings_options(f)


def test_settings_options(f):
    """The settings of a repository's test environment and its test runs."""
    for option in reversed([
        click.option("--env-setup", default=RUN.env_setup, help="Tests: the install step of your repository's environment "
                                                     "(default: SWE-bench's spec, or what the project declares)."),
        click.option("--python", default=RUN.python,
                     help="Tests: the Python version of the repository's environment (default: the newest the project allows)."),
        click.option("--sandbox", type=click.Choice(["bwrap", "none"]), default=RUN.sandbox, show_default=True,
                     help="Tests: bubblewrap (no network, read-only system), or none (unconfined; only for code you trust)."),
        click.option("--test-timeout", type=float, default=RUN.test_timeout, show_default=True,
                     help="Tests: seconds each test run may take."),
        click.option("--test-memory", default=RUN.test_memory, show_default=True,
                     help="Tests: the memory budget of each test run, its processes and in-memory scratch together (0: no limit)."),
        click.option("--artifact-store", default=RUN.artifact_store,
                     help="Tests on a cluster: where the nodes share built environments and testbeds, a folder on a "
                          "shared filesystem or an s3:// or gs:// URL (none: each node builds its own)."),
    ]):
        f = option(f)
    return f
