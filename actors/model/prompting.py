"""Prompt templates: text files in prompts/, a [system] and a [user] part, `$name` placeholders."""
from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from string import Template

from magis_ray.events.schema import Message
from magis_ray.events.settings import node_settings

_SECTION = re.compile(r"^\[(system|user)\]\s*$", re.MULTILINE)


def _template_text(name: str) -> str:
    """MAGIS_PROMPTS_DIR may hold the user's own version of any template."""
    override = node_settings().prompts_dir
    if override and (Path(override) / f"{name}.txt").is_file():
        return (Path(override) / f"{name}.txt").read_text(encoding="utf-8")
    return resources.files("magis_ray.actors.model.prompts").joinpath(f"{name}.txt").read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def load_template(name: str) -> tuple[tuple[str, Template], ...]:
    text = _template_text(name)
    parts = _SECTION.split(text)
    # split gives ["", "system", body, "user", body]: pair each role with its body
    return tuple((role, Template(body.strip("\n"))) for role, body in zip(parts[1::2], parts[2::2]))


def render(template: str, /, **values: object) -> list[Message]:
    """The messages of `template`; a missing value is a programming error (KeyError)."""
    return [Message(role=role, content=tpl.substitute(values)) for role, tpl in load_template(template)]
