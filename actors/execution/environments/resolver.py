"""The one way packages are resolved as of a date, for an environment's whole install and for what a
testbed's install adds to it: whichever resolver serves the environment's interpreter.

- uv, where it installs the environment: `uv pip compile` for that interpreter, `--exclude-newer`
  the date (installers.UvInstaller.resolve_command);
- else a pip that knows dates (`--uploaded-prior-to`), in a venv of its own beside the
  environment (Python 3.9 and later; dated.resolver_pip): its `--dry-run --report`;
- else, for a Python too old for either, uv from this process for that Python's version and
  markers, from wheels only, so that no package's code runs here (dated.resolve_from_wheels).

The spec's exact pins are offered as files (they carry no upload time), so they hold whatever the
date. A resolution runs as a step of the build, in its sandbox: resolving may build an sdist's
metadata, which runs the sdist's code."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from . import dated
from .installers import UvInstaller
from .steps import BuildSteps


def requirement_lines(arguments: list[str]) -> list[str]:
    """pip install arguments as the lines of a requirements file (`-r FILE` stays one line)."""
    lines: list[str] = []
    for argument in arguments:
        if lines and lines[-1] == "-r":
            lines[-1] = f"-r {argument}"
        else:
            lines.append(argument)
    return lines


@dataclass(frozen=True)
class DatedResolver:
    """Resolutions as of `when` for the interpreter of the environment at `venv`; each writes its
    files into `folder`, named after its step."""

    steps: BuildSteps
    folder: Path
    when: str
    python_version: str  # the interpreter's ("3.9.18")
    venv: Path
    exact: Path  # the folder of the spec's exact pins, as files
    pip_cache: Path
    uv: UvInstaller | None = None  # uv resolves, where it installs for this interpreter
    pip: str = ""  # else the python of a venv whose pip knows dates ("": none; from wheels)

    @property
    def by(self) -> str:
        """Who resolves, in words: "uv", "pip" or "wheels"."""
        return "uv" if self.uv is not None else "pip" if self.pip else "wheels"

    def resolve(self, step: str, requested: list[str], *, constraints: str = "", free: tuple[str, ...] = (),
                options: tuple[str, ...] = ()) -> tuple[list[str] | None, str]:
        """The pins (`name==version`) of everything `requested` (pip install arguments) needs, held
        to the `constraints` file if one is given; `free`: exact pins whose names any date allows
        (uv); `options`: uv's own. (pins, "") or (None, why)."""
        wanted, output, report = (self.folder / f"{step}-wanted.txt", self.folder / f"{step}-pins.txt",
                                  self.folder / f"{step}-report.json")
        for path in (output, report):
            path.unlink(missing_ok=True)
        if self.uv is not None:
            wanted.write_text("\n".join(requirement_lines(requested)) + "\n")
            command = self.uv.resolve_command(self.venv, wanted, output, self.when, free, constraints, options)
            outcome = self.steps.run(step, command, required=False)
            if outcome.ok and output.is_file():
                return dated.pins_in(output), ""
            return None, f"exit {outcome.exit_code}: {outcome.output[-1500:]}"
        if self.pip:
            held = ["-c", constraints] if constraints else []
            command = [self.pip, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                       "--uploaded-prior-to", self.when, "--find-links", str(self.exact), *held, *requested]
            outcome = self.steps.run(step, shlex.join(command), required=False)
            if outcome.ok and report.is_file():
                return dated.constraints_from_report(report), ""
            return None, f"exit {outcome.exit_code}: {outcome.output[-1500:]}"
        ok, error = dated.resolve_from_wheels(requested, self.python_version, self.when, str(self.exact), output,
                                              self.pip_cache, constraints=constraints)
        return (dated.pins_in(output), "") if ok else (None, error)
