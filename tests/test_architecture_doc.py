"""docs/explanations/architecture.md names only modules that exist: a newcomer who follows it from `submit` to
the pages finds every file it names."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "explanations" / "architecture.md"
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


def code_folders() -> list[str]:
    """Every folder of the package that holds a module of its own (not only an __init__.py)."""
    return sorted(str(folder.relative_to(ROOT)) for top in FOLDERS for folder in [ROOT / top, *(ROOT / top).rglob("*")]
                  if folder.is_dir() and any(p.suffix == ".py" and p.name != "__init__.py" for p in folder.iterdir()))


def test_every_folder_of_the_package_is_described():
    text = DOC.read_text()
    assert len(code_folders()) >= 11
    assert [folder for folder in code_folders() if f"`{folder}/`" not in text] == []


def test_the_picture_follows_a_run_and_a_grading_through_modules_that_exist():
    picture = DOC.read_text().split("A run and a grading, side by side", 1)[1].split("```", 2)[1]
    named = re.findall(r"[\w/]+\.py", picture)
    assert len(named) >= 12
    missing = [name for name in named if not (ROOT / name).is_file()
               and not any((ROOT / top / name).is_file() for top in ("actors/runtime", "actors/roles", "actors/model",
                                                                     "actors/execution", "actors/swebench"))]
    assert missing == []
    grading = ["cli/grade.py", "actors/swebench/grading_service.py", "actors/swebench/grading_batch.py",
               "actors/swebench/grading.py", "actors/execution/specs.py", "sandbox/bubblewrap.py"]
    at = [picture.index(name) for name in grading]
    assert at == sorted(at)
