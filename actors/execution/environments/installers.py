"""Who installs an environment's packages: uv where the target Python allows it, pip where not.

uv resolves and installs many times faster than pip, resolves as of a date itself
(`--exclude-newer`), and shares one cache of unpacked wheels whose files it hard-links into each
environment. It runs inside the build's sandbox like pip: its binary (from the `uv` wheel, a
declared dependency) is shown read-only there, and it only ever installs into the interpreter it
is given (`--python`), never downloads one.

uv inspects an interpreter with `python -I` and a query script of its own, which Python 3.6 and
later run: older Pythons (2.7, 3.5) keep pip. Its bytecode compiler needs 3.7, so on 3.6 the
environment's own interpreter compiles what uv installed. Both installers take the same steps (a venv, a
resolution of the whole environment as of its date, installs held to that resolution), so a
recipe builds the same distributions at the same versions with either (tests/test_installers.py);
which one built an environment is part of its key all the same, since a resolver's choices among
equally valid answers are its own."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from magis_ray.actors.execution.sandbox import Mount

from . import dated
from .dated import uv_binary

UV, PIP, AUTO = "uv", "pip", "auto"
UV_OLDEST_PYTHON = (3, 6)  # uv's interpreter query needs `python -I` and 3.6's syntax


def installer_for(python_version: str, wanted: str = AUTO) -> str:
    """The installer of an environment of CPython `python_version` ("3.9.18"): `wanted` unless it
    is "auto", else uv where it serves that Python and pip where not. ValueError for uv on a Python
    it cannot serve, or an unknown name."""
    serves = tuple(int(part) for part in python_version.split(".")[:2]) >= UV_OLDEST_PYTHON
    if wanted == AUTO:
        return UV if serves else PIP
    if wanted == UV and not serves:
        raise ValueError(f"uv cannot install into Python {python_version} (it serves "
                         f"{'.'.join(map(str, UV_OLDEST_PYTHON))} and later); use pip")
    if wanted not in (UV, PIP):
        raise ValueError(f"unknown installer {wanted!r} (uv, pip or auto)")
    return wanted


class Installer(Protocol):
    """One environment build's installs, run as steps of its sandbox (steps.BuildSteps)."""

    name: str

    def variables(self) -> dict[str, str]:
        """The build's environment variables for this installer."""

    def mounts(self, folder: Path) -> list[Mount]:
        """What the build's sandbox shows for `folder` (the environment's) and the installer's caches."""

    def venv_command(self, python: str, venv: Path) -> str:
        """Makes the virtual environment."""

    def install_command(self, venv: Path, arguments: list[str], constraints: str = "", when: str = "",
                        exact: tuple[str, ...] = (), compiled: bool = True) -> tuple[str, dict[str, str]]:
        """(command, extra variables) installing `arguments` into `venv`, held to the `constraints`
        file, as of `when` ("" for today) except for the names of `exact` pins; `compiled`: with
        the modules' bytecode."""

    def finish_command(self, venv: Path) -> str | None:
        """What completes the environment after its installs (None: nothing)."""

    def resolve_command(self, venv: Path, wanted: Path, output: Path, when: str, exact: tuple[str, ...],
                        constraints: str = "", options: tuple[str, ...] = ()) -> str | None:
        """A command writing to `output` the pins of the requirements file `wanted` for the
        environment's interpreter as of `when` (exact pins excepted), held to the `constraints`
        file if one is given; None when this installer resolves otherwise
        (resolver.DatedResolver)."""


@dataclass(frozen=True)
class PipInstaller:
    """pip in the environment itself; resolutions as of a date by a pip that knows dates (dated.py)."""

    pip_cache: Path
    name: str = PIP

    def variables(self) -> dict[str, str]:
        return {"PIP_CACHE_DIR": str(self.pip_cache), "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                "PIP_PROGRESS_BAR": "off", **dated.index_variables()}

    def mounts(self, folder: Path) -> list[Mount]:
        return [Mount(str(folder), str(folder), writable=True), Mount(str(self.pip_cache), str(self.pip_cache), writable=True)]

    def venv_command(self, python: str, venv: Path) -> str:
        return f"{shlex.quote(python)} -m venv {shlex.quote(str(venv))}"

    def install_command(self, venv: Path, arguments: list[str], constraints: str = "", when: str = "",
                        exact: tuple[str, ...] = (), compiled: bool = True) -> tuple[str, dict[str, str]]:
        # The constraints by the environment: they bind the builds of sdists' own environments too.
        return "python -m pip install " + shlex.join(arguments), ({"PIP_CONSTRAINT": constraints} if constraints else {})

    def finish_command(self, venv: Path) -> str | None:
        return None

    def resolve_command(self, venv: Path, wanted: Path, output: Path, when: str, exact: tuple[str, ...],
                        constraints: str = "", options: tuple[str, ...] = ()) -> str | None:
        return None


@dataclass(frozen=True)
class UvInstaller:
    """uv, from outside the environment (`--python`), with one cache shared by the node's builds."""

    root: Path  # the environments' cache folder: uv's cache lives in it
    pip_cache: Path  # pip's, for what still runs pip in a uv build (the testbeds' resolver)
    python_version: str = ""  # the environment's ("3.6.15")
    name: str = UV

    @property
    def compiles_bytecode(self) -> bool:
        """uv compiles what it installs with the target's py_compile.PycInvalidationMode, new in 3.7."""
        return not self.python_version or tuple(int(p) for p in self.python_version.split(".")[:2]) >= (3, 7)

    @property
    def cache(self) -> Path:
        return self.root / "uv-cache"

    def variables(self) -> dict[str, str]:
        # pip's too: the testbeds' resolver is a pip, made by uv
        return {**PipInstaller(self.pip_cache).variables(), **dated.uv_variables(self.cache), "UV_LINK_MODE": "hardlink"}

    def mounts(self, folder: Path) -> list[Mount]:
        """The whole cache folder writable, so that uv's hard links from its cache into the
        environment stay on one mount (a link across two mounts fails, even of one filesystem);
        every other environment in it read-only. The folder itself belongs to the caller, so the
        builds' uid makes nothing new beside the environment."""
        binary = uv_binary()
        # the builds' uid must pass through the cache folder to its own (a folder made with mode
        # 0700, as a temporary one is, would stop it): search only, never listing
        mode = self.root.stat().st_mode
        if not mode & 0o001:
            self.root.chmod(mode | 0o011)
        own = {folder.name, self.cache.name, self.pip_cache.name}
        found = [Mount(str(self.root), str(self.root), writable=True)]
        # optional: another build's failure or the cache's bound may remove an entry while this
        # build runs, and its later steps must not fail for a folder they never read
        found += [Mount(str(entry), str(entry), optional=True) for entry in sorted(self.root.iterdir())
                  if entry.name not in own and not entry.is_symlink()]
        return [*found, Mount(binary, binary)]

    def uv(self, *arguments: str) -> str:
        return shlex.join([uv_binary(), *arguments])

    def venv_command(self, python: str, venv: Path) -> str:
        # The standard library's venv, as pip's build makes it (uv's own adds a distutils hook):
        # the environments of the two installers differ in nothing but what is installed.
        return f"{shlex.quote(python)} -m venv --without-pip {shlex.quote(str(venv))}"

    def dated(self, when: str, exact: tuple[str, ...]) -> list[str]:
        return dated.dated_arguments(when, {dated.requirement_name(pin) for pin in exact})

    def install_command(self, venv: Path, arguments: list[str], constraints: str = "", when: str = "",
                        exact: tuple[str, ...] = (), compiled: bool = True) -> tuple[str, dict[str, str]]:
        held = ["-c", constraints] if constraints else []
        # Compiled as pip compiles them: test runs see the environment read-only, and would
        # otherwise compile every module they import at every run.
        compile_ = ["--compile-bytecode"] if compiled and self.compiles_bytecode else []
        return self.uv("pip", "install", "--python", str(venv / "bin" / "python"), *compile_, *self.dated(when, exact),
                       *held, *arguments), {}

    def add_command(self, python: Path, pins: list[str]) -> str:
        """Installs exactly `pins` (a resolution's `name==version`) for the interpreter `python`,
        copied rather than linked: a testbed's prefix is a mount of its own, across which no link
        from the cache holds."""
        compile_ = ["--compile-bytecode"] if self.compiles_bytecode else []
        return self.uv("pip", "install", "--python", str(python), "--no-deps", "--link-mode", "copy", *compile_, *pins)

    def finish_command(self, venv: Path) -> str | None:
        """On Python 3.6 the bytecode is compiled by the environment's own interpreter."""
        if self.compiles_bytecode:
            return None
        return f"{shlex.quote(str(venv / 'bin' / 'python'))} -m compileall -q -j 0 {shlex.quote(str(venv / 'lib'))} > /dev/null"

    def resolve_command(self, venv: Path, wanted: Path, output: Path, when: str, exact: tuple[str, ...],
                        constraints: str = "", options: tuple[str, ...] = ()) -> str | None:
        held = ["-c", constraints] if constraints else []
        return self.uv("pip", "compile", "--python", str(venv / "bin" / "python"), *self.dated(when, exact), *held,
                       *options, "--no-header", "--no-annotate", "--quiet", "-o", str(output), str(wanted))


def installer_named(name: str, root: Path, pip_cache: Path, python_version: str = "") -> Installer:
    return UvInstaller(root, pip_cache, python_version) if name == UV else PipInstaller(pip_cache)
