"""Prompt templates: text files in prompts/, a [system] and a [user] part, `$name` placeholders."""
from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from string import Template

from magis_ray.events.schema import Message

_SECTION = re.compile(r"^\[(system|user)\]\s*$", re.MULTILINE)


@lru_cache(maxsize=None)
def load_template(name: str) -> tuple[tuple[str, Template], ...]:
    text = resources.files("magis_ray.actors.prompts").joinpath(f"{name}.txt").read_text(encoding="utf-8")
    parts = _SECTION.split(text)
    # split gives ["", "system", body, "user", body]: pair each role with its body
    return tuple((role, Template(body.strip("\n"))) for role, body in zip(parts[1::2], parts[2::2]))


def render(template: str, /, **values: object) -> list[Message]:
    """The messages of `template`; a missing value is a programming error (KeyError)."""
    return [Message(role=role, content=tpl.substitute(values)) for role, tpl in load_template(template)]
