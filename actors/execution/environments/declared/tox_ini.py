"""The test environment of a tox.ini-style file (tox.ini, setup.cfg's `[tox:tox]`, pyproject's
`legacy_tox_ini`): the envlist's environment for the chosen Python (`py311`, `3.11-tests`, or the
first `pyXY` one made the chosen Python's), read from its own section when one names it
(`[testenv:py{310,311}]`) over `[testenv]`, `{[section]key}` and `{env:...}` substituted. A
setting's line is kept when its factor condition (`tests: pytest`, `!py38: x`) holds for that
environment."""
from __future__ import annotations

import configparser
import re

from .requirement_files import join_continuations
from .roles import TEST_NAMES
from .tox_environment import ToxEnvironment
from .values import lines

_SUBSTITUTION = re.compile(r"\{\[([^\]]+)\]([^}]+)\}")
_TOX_PYTHON_FACTOR = re.compile(r"^(py|pypy)?\d+(\.\d+)?$|^py(py)?$")


class ToxIni:
    def __init__(self, parser: configparser.ConfigParser, where: str, problems: list[str]) -> None:
        self.parser = parser
        self.where = where
        self.problems = problems

    def environment(self, python_factors: set[str]) -> ToxEnvironment | None:
        """The test environment for the Python that `python_factors` name; None without a section."""
        environment = self._environment(python_factors)
        section = self._section(environment)
        if section is None:
            return None
        factors = python_factors | set(environment.split("-"))

        def words(key: str) -> list[str]:
            return [word for line in self._lines(section, key, factors) for word in re.split(r"[,\s]+", line) if word]

        commands = [*self._lines(section, "commands_pre", factors), *self._lines(section, "commands", factors)]
        return ToxEnvironment(f"{self.where} [{section}]", self._lines(section, "deps", factors), words("extras"),
                              words("dependency_groups"), commands,
                              self._value(section, "skip_install").strip().lower() == "true")

    def _environment(self, mine: set[str]) -> str:
        tox_section = "tox" if self.parser.has_section("tox") else "tox:tox"
        envlist = [env for line in lines(self._raw(tox_section, "envlist") or self._raw(tox_section, "env_list"))
                   for item in _split_outside_braces(line) for env in _expand_braces(item.strip()) if env]
        for env in envlist:
            if set(env.split("-")) & mine:
                return env
        mine_named = sorted(f for f in mine if re.fullmatch(r"py\d+", f))
        for env in envlist:
            factors = env.split("-")
            if any(_TOX_PYTHON_FACTOR.match(f) for f in factors) and mine_named:
                return "-".join(mine_named[-1] if _TOX_PYTHON_FACTOR.match(f) else f for f in factors)
        return mine_named[-1] if mine_named else "py"

    def _section(self, environment: str) -> str | None:
        for section in self.parser.sections():
            if section.startswith("testenv:") and environment in _expand_braces(section.removeprefix("testenv:")):
                return section
        for name in (*TEST_NAMES, "py", "unit"):
            if self.parser.has_section(f"testenv:{name}") and not self.parser.has_section("testenv"):
                return f"testenv:{name}"
        return "testenv" if self.parser.has_section("testenv") else None

    def _raw(self, section: str, key: str) -> str:
        return (self.parser.get(section, key, fallback="") or "") if self.parser.has_section(section) else ""

    def _value(self, section: str, key: str, depth: int = 0) -> str:
        value = self._raw(section, key)
        if not self.parser.has_option(section, key) and section.startswith("testenv:"):
            value = self._raw(self._raw(section, "base").strip() or "testenv", key)
        return self._substituted(value, depth)

    def _substituted(self, value: str, depth: int) -> str:
        if depth > 10:
            self.problems.append(f"{self.where}: substitutions nest deeper than 10; cut")
            return ""
        value = _SUBSTITUTION.sub(lambda m: self._value(m.group(1), m.group(2), depth + 1), value)
        value = re.sub(r"\{env:[^:}]+:([^}]*)\}", r"\1", value)
        value = re.sub(r"\{env:[^}]*\}", "", value)
        value = re.sub(r"\{posargs(:([^}]*))?\}", r"\2", value)
        return re.sub(r"\{(toxinidir|tox_root)\}/?", "", value)

    def _lines(self, section: str, key: str, factors: set[str]) -> list[str]:
        kept = []
        for line in lines(join_continuations(self._value(section, key))):
            line = re.split(r"\s#", line)[0].strip()
            condition = re.match(r"^(!?[\w.{}]+(?:[-,]!?[\w.{}]+)*)\s*:\s+(.+)$", line)
            if condition:
                if not _factors_hold(condition.group(1), factors):
                    continue
                line = condition.group(2).strip()
            if line:
                kept.append(line)
        return kept


def _split_outside_braces(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for character in text:
        depth += {"{": 1, "}": -1}.get(character, 0)
        if character == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += character
    return [*parts, current]


def _expand_braces(text: str) -> list[str]:
    """tox's `py{38,39}-{a,b}` and `3.1{0-3}` as the names they stand for."""
    match = re.search(r"\{([^{}]*)\}", text)
    if not match:
        return [text]
    options = []
    for option in match.group(1).split(","):
        span = re.fullmatch(r"\s*(\d+)-(\d+)\s*", option)
        if span:
            options.extend(str(n) for n in range(int(span.group(1)), int(span.group(2)) + 1))
        else:
            options.append(option.strip())
    return [expanded for option in options for expanded in _expand_braces(text[:match.start()] + option + text[match.end():])]


def _factors_hold(condition: str, factors: set[str]) -> bool:
    """tox's factor condition: `,` is or, `-` is and, `!` is not."""
    for alternative in (a for expanded in _expand_braces(condition) for a in expanded.split(",")):
        if all((word[1:] not in factors) if word.startswith("!") else (word in factors)
               for word in alternative.split("-") if word):
            return True
    return False
