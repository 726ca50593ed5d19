"""The mkdocs hook that fills the reference pages' generated parts from the code at build time, so
they cannot drift from it: a page's marker line is replaced by what its generator makes.

    <!-- generated: settings -->   the settings model (settings_page.py)
    <!-- generated: events -->     the event schema (events_page.py)

The CLI reference is made by the mkdocs-click extension (`::: mkdocs-click` in reference/cli.md)."""
from __future__ import annotations

import re
from typing import Callable

from events_page import events_markdown
from settings_page import settings_markdown

GENERATORS: dict[str, Callable[[], str]] = {"settings": settings_markdown, "events": events_markdown}
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


class UnknownGenerator(ValueError):
    """A page names a generator that does not exist."""


def fill(markdown: str, generators: dict[str, Callable[[], str]] = GENERATORS) -> str:
    """`markdown` with each marker line replaced by its generator's Markdown."""
    def generated(match: re.Match) -> str:
        name = match.group(1)
        if name not in generators:
            raise UnknownGenerator(f"no generator {name!r} (known: {', '.join(generators)})")
        return generators[name]().rstrip("\n")

    return MARKER.sub(generated, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:
    try:
        return fill(markdown)
    except UnknownGenerator as exc:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_path}: {exc}") from None
