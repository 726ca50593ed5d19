"""The test environment of tox's TOML configuration (tox.toml, or pyproject's `[tool.tox]`):
`env_run_base`, under the `[env.NAME]` of the chosen Python or of a test name when there is one,
`{replace = "ref"}` followed and `{tox_root}` the project's root."""
from __future__ import annotations

import re

from .roles import TEST_NAMES
from .tox_environment import ToxEnvironment
from .values import table


class ToxToml:
    def __init__(self, config: dict, where: str, problems: list[str]) -> None:
        self.config = config
        self.where = where
        self.problems = problems

    def environment(self, python_factors: set[str]) -> ToxEnvironment | None:
        """The test environment for the Python that `python_factors` name; None when nothing is set."""
        base = table(self.config, "env_run_base")
        envs = table(self.config, "env")
        names = (*sorted(python_factors - {"py", "py3"}), *TEST_NAMES)
        name = next((n for n in names if isinstance(envs.get(n), dict)), None)
        env = {**base, **envs[name]} if name else base
        if not env:
            return None
        commands = [" ".join(self._strings(command)) for key in ("commands_pre", "commands")
                    for command in (env.get(key) or []) if isinstance(command, list | dict)]
        return ToxEnvironment(f"{self.where} [env.{name}]" if name else f"{self.where} [env_run_base]",
                              self._strings(env.get("deps")), self._strings(env.get("extras")),
                              self._strings(env.get("dependency_groups")), commands, env.get("skip_install") is True)

    def _strings(self, value, depth: int = 0) -> list[str]:
        """A setting's strings, `{replace = "ref", of = [...]}` followed, `{tox_root}` the root."""
        if depth > 10 or value is None:
            return []
        if isinstance(value, str):
            return [re.sub(r"\{(toxinidir|tox_root)\}/?", "", value)]
        if isinstance(value, dict):
            if value.get("replace") == "ref" and isinstance(value.get("of"), list):
                target = self.config
                for key in value["of"]:
                    target = target.get(key) if isinstance(target, dict) else None
                return self._strings(target, depth + 1)
            if value.get("replace") in ("posargs", "env"):
                return self._strings(value.get("default"), depth + 1)
            self.problems.append(f"{self.where}: the substitution {value} is not read")
            return []
        if isinstance(value, list):
            return [s for item in value for s in self._strings(item, depth + 1)]
        return []
