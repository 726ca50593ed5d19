"""The small readings every place shares: a table of parsed TOML at a path of keys, the strings of
a list, a value of an INI section, the lines of a multi-line value, a requirement line parsed, a
list without its repeats."""
from __future__ import annotations

import configparser
from collections.abc import Iterable, Mapping

from packaging.requirements import InvalidRequirement, Requirement


def table(data: Mapping, *keys: str) -> dict:
    for key in keys:
        data = data.get(key) if isinstance(data, Mapping) else None
    return data if isinstance(data, dict) else {}


def strings(value) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def ini_value(parser: configparser.ConfigParser | None, section: str, key: str) -> str | None:
    if parser is None or not parser.has_section(section):
        return None
    return parser.get(section, key, fallback=None)


def lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def parse_requirement(line: str) -> Requirement | None:
    try:
        return Requirement(line.strip())
    except InvalidRequirement:
        return None
