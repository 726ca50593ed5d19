"""`magis-ray submit ISSUE.json`: validate the input, run the team on Ray, write the diff and audit."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import click

from .source import BadInput


def load_issue(path: Path):
    from magis_ray.actors.issue import BadIssue, parse_issue

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    try:
        return parse_issue(data, where=str(path))
    except BadIssue as exc:
        raise BadInput(str(exc)) from None


def locate_repo(issue, repo: str | None, repos_dir: str | None) -> str:
    from magis_ray.actors.repository import RepoError, RepoSnapshot, find_repo

    try:
        path = find_repo(issue.repo, repo_path=repo or issue.repo_path, repos_dir=repos_dir)
        RepoSnapshot.open(path, issue.base_commit)  # fail now, before a run starts, on a bad repo or commit
    except RepoError as exc:
        raise BadInput(str(exc)) from None
    return str(path)


def write_outputs(store_path: str, run_id: str) -> tuple[Path, Path, dict]:
    from magis_ray.events.projections import audit_html, audit_markdown, final_diff, fold, metrics
    from magis_ray.store import open_store

    store = open_store(store_path)
    try:
        view = fold(store.read(run_id))
    finally:
        store.close()
    out = Path(store_path) / "runs" / run_id
    out.mkdir(parents=True, exist_ok=True)
    diff_path, audit_path = out / "diff.patch", out / "audit.md"
    diff_path.write_text(final_diff(view))
    audit_path.write_text(audit_markdown(view))
    (out / "audit.html").write_text(audit_html(view))
    return diff_path, audit_path, metrics(view)["total"]


def report(run_id: str, end, diff_path: Path, audit_path: Path, total: dict) -> None:
    from magis_ray.events.schema import RunFinished

    outcome = end.outcome if isinstance(end, RunFinished) else f"failed: {end.reason}"
    click.echo(f"run:      {run_id}")
    click.echo(f"outcome:  {outcome}")
    click.echo(
        f"model:    {total['calls']} calls, {total['prompt_tokens']} prompt + {total['completion_tokens']} "
        f"completion tokens, ${total['cost_usd']:.4f}"
    )
    click.echo(f"diff:     {diff_path}")
    click.echo(f"audit:    {audit_path}")
    click.echo(f"page:     {audit_path.with_suffix('.html')}")


def gateway_config(base_url, model, timeout, concurrency, response_format):
    from magis_ray.actors.gateway import GatewayConfig

    return GatewayConfig(
        base_url=base_url or None, model=model or "", timeout_s=timeout, concurrency=concurrency,
        response_format=response_format,
    )


@contextmanager
def model_endpoint(llm: str, base_url: str | None):
    """The base URL of the model to talk to; `scripted:FILE` serves a script on loopback meanwhile."""
    if llm.startswith("scripted:"):
        from magis_ray.actors.scripted_server import Script, ScriptedServer

        path = llm.removeprefix("scripted:")
        try:
            script = Script.load(path)
        except (OSError, ValueError) as exc:
            raise BadInput(f"cannot load the script {path}: {exc}") from None
        with ScriptedServer(script) as server:
            yield server.base_url
        return
    if llm not in ("auto", "openai"):
        raise BadInput(f"unknown --llm {llm!r}: use openai or scripted:FILE")
    if not base_url and not os.environ.get("OPENAI_API_KEY"):
        raise BadInput("no model configured: give --base-url URL (any OpenAI-compatible server) or set OPENAI_API_KEY, or --llm scripted:FILE")
    yield base_url


def model_options(f):
    """The options that say which model to use and how to talk to it."""
    for option in reversed([
        click.option("--llm", default="auto", show_default=True,
                     help="openai (any OpenAI-compatible endpoint), or scripted:FILE (a scripted model on loopback)."),
        click.option("--base-url", envvar="OPENAI_BASE_URL", help="Any OpenAI-compatible endpoint (env OPENAI_BASE_URL)."),
        click.option("--model", envvar="MAGIS_MODEL", default="", help="Model name (env MAGIS_MODEL)."),
        click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds per model request."),
        click.option("--concurrency", type=int, default=8, show_default=True, help="Model requests in flight at once."),
        click.option("--response-format", type=click.Choice(["json_schema", "json_object", "none"]), default="json_schema",
                     show_default=True, help="How answer schemas are sent (llama.cpp wants json_object)."),
    ]):
        f = option(f)
    return f


def settings_options(f):
    for option in reversed([
        click.option("--top-k", type=int, default=10, show_default=True, help="BM25 candidates the Custodian examines."),
        click.option("--max-files", type=int, default=3, show_default=True, help="Relevant files kept at most."),
        click.option("--max-review-rounds", type=int, default=3, show_default=True, help="Developer/QA iterations per task."),
        click.option("--no-qa", is_flag=True, help="Ablation: no QA Engineer; the first patch stands."),
        click.option("--no-hints", is_flag=True, help="Ablation: ignore the issue's hints_text."),
        click.option("--no-memory", is_flag=True, help="Ablation: always summarize files afresh."),
        click.option("--token-budget", type=int, default=0, help="Most tokens the run may spend (0: no limit)."),
    ]):
        f = option(f)
    return f


def run_settings(model: str, top_k, max_files, max_review_rounds, no_qa, no_hints, no_memory, token_budget):
    from magis_ray.events.schema import RunSettings

    if top_k < 1 or max_files < 1 or max_review_rounds < 1 or token_budget < 0:
        raise BadInput("--top-k, --max-files and --max-review-rounds must be at least 1, --token-budget not negative")
    return RunSettings(
        top_k=top_k, max_files=max_files, max_review_rounds=max_review_rounds, use_qa=not no_qa,
        use_hints=not no_hints, use_memory=not no_memory, token_budget=token_budget,
        model=model or os.environ.get("MAGIS_MODEL", ""),
    )
