"""The reference pages are made from the code when the site is built (docs/hooks/, mkdocs-click),
so they cannot drift from it: a new setting, event field or command option shows on its page with
no edit to docs/, and the built pages list every real setting, event and option."""
from __future__ import annotations

import html
import subprocess
import sys
import typing
from pathlib import Path

import click
import msgspec
import pytest

pytest.importorskip("mkdocs", reason="the documentation's packages are not installed: pip install -e '.[docs]'")

from magis_ray.cli.main import cli
from magis_ray.cli.settings import KEYS, SECTIONS
from magis_ray.events import schema
from magis_ray.events.settings import AtLeastOne, NodeSettings, RunSettings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs" / "hooks"))  # the generators, as the mkdocs hook imports them

from events_page import events_markdown  # noqa: E402
from reference import UnknownGenerator, fill  # noqa: E402
from settings_page import settings_markdown  # noqa: E402

MKDOCS = Path(sys.executable).parent / "mkdocs"


class RunSettingsWithRetries(RunSettings, frozen=True, kw_only=True):
    retries: AtLeastOne = 2  # how often a step that got no usable answer is asked again


class RunPaused(schema.Event, frozen=True, tag="RunPaused"):
    """The run waits for a person's word."""

    reason: str
    until: float | None = None  # unix seconds, or no end


def cli_with_retries() -> click.Group:
    """The real command, its `submit` taking one option more."""
    submit = cli.commands["submit"]
    extended = click.Command(submit.name, params=[*submit.params, click.Option(["--retries"], type=int, default=2,
                             show_default=True, help="How often a step is asked again.")], callback=submit.callback,
                             help=submit.help)
    return click.Group("magis-ray", commands={**cli.commands, "submit": extended}, help=cli.help)


def test_a_new_setting_shows_on_the_settings_page_with_its_type_default_variable_flag_and_comment():
    page = settings_markdown({**SECTIONS, "run": RunSettingsWithRetries}, cli=cli_with_retries())
    assert ("| `retries` | integer ≥ 1 | `2` | `MAGIS_RETRIES` | `--retries` (submit) "
            "| How often a step that got no usable answer is asked again |") in page
    assert "`retries`" not in settings_markdown()


def test_a_new_event_type_and_its_fields_show_on_the_events_page():
    page = events_markdown(typing.Union[schema.AnyEvent, RunPaused])
    assert "### RunPaused\n\nTag `RunPaused`. The run waits for a person's word." in page
    assert "| `reason` | text | (required) |  |" in page
    assert "| `until` | number or null | `null` | Unix seconds, or no end |" in page
    assert "RunPaused" not in events_markdown()


def test_a_new_option_shows_on_the_cli_page(tmp_path, monkeypatch):
    import markdown

    module = tmp_path / "extended_cli.py"
    module.write_text("from test_docs_reference import cli_with_retries\n\ncli = cli_with_retries()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    page = (ROOT / "docs/reference/cli.md").read_text().replace("magis_ray.cli.main", "extended_cli")
    rendered = markdown.markdown(page, extensions=["mkdocs-click", "pymdownx.superfences"])
    assert "--retries INTEGER" in rendered and "How often a step is asked again." in rendered
    assert "--retries" not in markdown.markdown((ROOT / "docs/reference/cli.md").read_text(),
                                                extensions=["mkdocs-click", "pymdownx.superfences"])


def test_a_page_naming_no_generator_is_refused():
    assert fill("a\n<!-- generated: events -->\nb").startswith("a\nThe schema is at version")
    with pytest.raises(UnknownGenerator, match="no generator 'setings' .known: settings, events."):
        fill("<!-- generated: setings -->")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The documentation site, built as CI builds it (strict: a broken link or a missing page fails)."""
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run([str(MKDOCS), "build", "--strict", "--quiet", "--site-dir", str(folder)], cwd=ROOT,
                           capture_output=True, text=True, env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr
    return folder


def page_text(site: Path, page: str) -> str:
    return html.unescape((site / page / "index.html").read_text())


def test_the_built_cli_page_lists_every_command_and_option(site):
    text = page_text(site, "reference/cli")
    for name, command in cli.commands.items():
        assert f"magis-ray {name} [OPTIONS]" in text, name
        for param in command.params:
            for opt in [*param.opts, *param.secondary_opts] if isinstance(param, click.Option) else []:
                assert opt in text, f"{name} {opt}"


def test_the_built_settings_page_lists_every_setting(site):
    text = page_text(site, "reference/settings")
    for key in KEYS:
        assert f"<code>{key}</code>" in text, key
    for field in msgspec.structs.fields(NodeSettings):
        assert f"<code>{field.name.replace('_', '-')}</code>" in text, field.name


def test_the_built_events_page_lists_every_event_and_field(site):
    text = page_text(site, "reference/events")
    assert f"version <strong>{schema.SCHEMA_VERSION}</strong>" in text
    for event in typing.get_args(schema.AnyEvent):
        assert f'id="{event.__name__.lower()}"' in text, event.__name__
        for field in msgspec.structs.fields(event):
            assert f"<code>{field.encode_name}</code>" in text, f"{event.__name__}.{field.name}"
