"""What a tox environment's commands install: `pip install ...` (read like a requirement file's
lines), `poetry install` (`--only` groups, else its non-optional groups and `--with` ones; `-E`
extras), `pdm install`/`pdm sync` (`-G` groups, else its dev groups) and `uv sync` (the `dev`
dependency group, `--group`, `--extra`). Where a tool would install every group (`poetry install`,
`pdm sync -G :all`), the test groups are taken when there are any, as everywhere else here."""
from __future__ import annotations

import re
import shlex

from .project import Project
from .pyproject import group
from .requirement_files import RequirementFile
from .result import TEST
from .roles import roles
from .tools import pdm_group, poetry_group
from .values import table, unique


class CommandInstalls:
    """What the commands install: requirement lines and files through `parsed` (pip's), the rest in
    `requirements` and `extras`; `tools` are the installers the commands run."""

    _PIP = re.compile(r"^(?:\S*python\S*\s+-m\s+|uv\s+)?pip\s+install\s+(.*)$")
    _TOOL = re.compile(r"^(poetry|pdm|uv)\s+(install|sync)\b(.*)$")

    def __init__(self, project: Project, parsed: RequirementFile, label: str, commands: list[str]) -> None:
        self.project = project
        self.parsed = parsed
        self.label = label
        # tox's "ignore the exit code" prefix off, its interpreter as python
        self.commands = [re.sub(r"^\{env_?python\}", "python", re.sub(r"^[-@]\s*", "", c.strip())) for c in commands]
        self.requirements: list[str] = []
        self.extras: list[str] = []
        self.tools = {tool.group(1) for command in self.commands if (tool := self._TOOL.match(command))}

    def read(self) -> None:
        for command in self.commands:
            self._command(command)

    def _command(self, command: str) -> None:
        if pip := self._PIP.match(command):
            self._pip(_tokens(pip.group(1)))
        elif tool := self._TOOL.match(command):
            arguments = _tokens(tool.group(3))
            if tool.group(1) == "poetry" and tool.group(2) == "install":
                self._poetry(arguments)
            elif tool.group(1) == "pdm":
                self._pdm(arguments)
            elif tool.group(1) == "uv" and tool.group(2) == "sync":
                self._uv(arguments)

    def _pip(self, tokens: list[str]) -> None:
        with_value = {"-r", "--requirement", "-c", "--constraint", "-e", "--editable"}
        skipped_value = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--target", "-t",
                         "--prefix", "--root", "--config-settings", "-C", "--python", "--no-binary", "--only-binary"}
        index = 0
        while index < len(tokens):
            token = tokens[index]
            if token in with_value and index + 1 < len(tokens):
                self.parsed.take(f"{token} {tokens[index + 1]}", self.label)
                index += 2
            elif token in skipped_value:
                index += 2
            elif token.startswith("-"):
                index += 1
            else:
                self.parsed.take(token, self.label)
                index += 1

    def _poetry(self, tokens: list[str]) -> None:
        options = _options(tokens, {"--with", "--without", "--only", "-E", "--extras"})
        groups = table(self.project.pyproject, "tool", "poetry", "group")
        if options.get("--only"):
            names = options["--only"]
        else:
            installed = [n for n, g in groups.items() if not (isinstance(g, dict) and g.get("optional") is True)
                         and n not in options.get("--without", [])]
            tests = [n for n, role in roles(installed).items() if role == TEST]
            names = [*(tests or installed), *options.get("--with", [])]
            if not tests:
                self.requirements.extend(poetry_group(self.project, None))
        for name in unique(names):
            if name != "main":
                self.requirements.extend(poetry_group(self.project, name))
        self.extras.extend([*options.get("-E", []), *options.get("--extras", [])])

    def _pdm(self, tokens: list[str]) -> None:
        options = _options(tokens, {"-G", "--group"})
        named = [n for n in [*options.get("-G", []), *options.get("--group", [])] if n not in (":all", "default")]
        dev_groups = list(table(self.project.pyproject, "tool", "pdm", "dev-dependencies"))
        if not named and "--prod" not in tokens and "--production" not in tokens:
            named = [n for n, role in roles(dev_groups).items() if role == TEST] or dev_groups
        optional = table(self.project.pyproject, "project", "optional-dependencies")
        groups = self.project.pyproject.get("dependency-groups")
        for name in unique(named):
            if name in dev_groups:
                requirements, extras = pdm_group(self.project, name)
                self.requirements.extend(requirements)
                self.extras.extend(extras)
            elif name in optional:
                self.extras.append(name)
            elif isinstance(groups, dict) and name in groups:
                self.requirements.extend(group(self.project, name, self.label) or [])

    def _uv(self, tokens: list[str]) -> None:
        options = _options(tokens, {"--group", "--extra", "--only-group"})
        groups = self.project.pyproject.get("dependency-groups")
        names = options.get("--only-group") or [*([] if "--no-dev" in tokens else ["dev"]), *options.get("--group", [])]
        for name in unique(names):
            if isinstance(groups, dict) and name in groups:
                self.requirements.extend(group(self.project, name, self.label) or [])
        self.extras.extend(options.get("--extra", []))


def _tokens(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _options(tokens: list[str], named: set[str]) -> dict[str, list[str]]:
    """Command-line options' values (`--with a,b`, `-G=test`), commas split."""
    found: dict[str, list[str]] = {}
    for index, token in enumerate(tokens):
        name, _, value = token.partition("=")
        if name in named:
            value = value or (tokens[index + 1] if index + 1 < len(tokens) else "")
            found.setdefault(name, []).extend(v.strip() for v in value.split(",") if v.strip())
    return found
