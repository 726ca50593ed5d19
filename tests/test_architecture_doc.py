"""docs/architecture.md names only modules that exist: a newcomer who follows it from `submit` to
the pages finds every file it names."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
FOLDERS = ("actors", "events", "store", "cli")


def named_paths(text: str) -> set[str]:
    """Every `folder/.../file.ext` the text names in backquotes, from the repository's root."""
    return {p for p in re.findall(r"`([\w./-]+\.(?:py|html|txt|json))`", text) if p.split("/", 1)[0] in FOLDERS}


def test_every_module_the_architecture_names_exists():
    text = DOC.read_text()
    named = named_paths(text)
    assert len(named) >= 30, sorted(named)  # the walk from submit to the pages names its modules
    assert [p for p in sorted(named) if not (ROOT / p).is_file()] == []


def test_the_walk_goes_from_submit_to_the_pages():
    walk = DOC.read_text().split("## How it fits together", 1)[1].split("\n## ", 1)[0]
    order = ["cli/main.py", "actors/runtime/deployment.py", "actors/runtime/team.py", "actors/model/gateway.py",
             "events/schema.py", "events/projections/audit.py", "cli/pages/__init__.py"]
    at = [walk.index(f"`{p}`") for p in order]
    assert at == sorted(at)
