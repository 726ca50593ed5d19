"""What an environment is made of (`Recipe`), and an environment built from one (`Environment`):
the heavy, shared part of a test environment, as the official harness's environment image is,
keyed by everything that defines it (the exact interpreter, the requirements, the packages, the
date they resolve at, the installer)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from magis_ray.events.errors import Unavailable

from magis_ray.actors.execution.sandbox import Mount
from magis_ray.actors.execution.sharing.builds import READY, BuildRecord, read_record
from magis_ray.actors.execution.sharing.artifacts import CACHED

from .installers import AUTO, PIP, installer_for

# Tools of the build itself when no date is set, as current as the interpreter allows; setuptools
# below 81 keeps pkg_resources, which older projects import.
BASE_TOOLS = ("pip", "setuptools<81", "wheel")
SYSTEM_PREFIXES = ("/usr/", "/bin/", "/lib/", "/lib64/")


def held_by_system(prefix: str) -> bool:
    """Whether the sandbox's system folders already show this interpreter prefix: /usr itself (a
    distribution's python, what an ordinary user without pyenv has) as well as any folder in them."""
    return (prefix.rstrip("/") + "/").startswith(SYSTEM_PREFIXES)


class EnvironmentUnsupported(Unavailable):
    """The recipe cannot be built here (e.g. a conda-only step); the message says why."""


@dataclass(frozen=True)
class Recipe:
    """What an environment is made of."""

    python: str  # "3.9"
    requirements: str = ""  # a pip requirements file's text
    packages: tuple[str, ...] = ()  # pip install arguments (conda package lists mapped to pip)
    pip_packages: tuple[str, ...] = ()
    unsupported: str = ""  # when set, why this recipe cannot be built
    label: str = ""  # for people: "sqlfluff/sqlfluff 0.6"
    uploaded_before: str = ""  # ISO 8601: packages as of this time (dated.py); "" for today's
    installer: str = AUTO  # uv, pip, or auto: uv where it serves the Python (installers.py)
    # Distributions taken out after the install: the project itself, which each testbed installs
    # from its checkout, where a test requirement brought a release of it (pytest brings packaging,
    # pluggy and iniconfig). Left in, that release would be found before the checkout, and a pip
    # installing the project would try to uninstall it from this read-only environment.
    without: tuple[str, ...] = ()

    def installer_name(self, interpreter: str) -> str:
        """Who installs this recipe on Python `interpreter` ("3.9.18"); EnvironmentUnsupported
        when the recipe asks for an installer that cannot serve it."""
        try:
            return installer_for(interpreter, self.installer)
        except ValueError as exc:
            raise EnvironmentUnsupported(str(exc)) from None

    def identity(self, interpreter: str) -> dict:
        fields = asdict(self)
        fields.pop("label")
        if not fields["without"]:
            fields.pop("without")  # a recipe that takes nothing out keeps the key it had before there was the field
        # The installer that builds it, never "auto": a pip-built environment is not a uv one.
        fields["installer"] = self.installer_name(interpreter)
        return {"interpreter": interpreter, "tools": list(BASE_TOOLS), "layout": 3, **fields}

    def key(self, interpreter: str) -> str:
        data = json.dumps(self.identity(interpreter), sort_keys=True).encode()
        return hashlib.sha256(data).hexdigest()[:20]




class EnvironmentRecord(BuildRecord, frozen=True, kw_only=True):
    """An environment's ready.json."""

    label: str = ""
    interpreter_prefix: str = ""  # the prefix of the interpreter its venv is made on
    interpreter: str = ""  # that interpreter
    installer: str = ""  # who installed its packages: uv, or pip where uv could not build it


@dataclass(frozen=True)
class Environment:
    """A built environment: a venv whose bin/ goes first on PATH."""

    key: str
    path: str
    python_version: str
    build_seconds: float  # how long its build (or its fetch from the artifact store) took; 0 from the cache
    built_now: bool
    label: str = ""
    interpreter_prefix: str = ""  # the venv's base interpreter's prefix, which the sandbox must show
    interpreter: str = ""  # that interpreter
    obtained: str = CACHED  # how this node has it: BUILT now, FETCHED from the artifact store, or CACHED
    recorded_build_seconds: float = 0.0  # how long its build took when it was built (its record)

    @property
    def venv(self) -> str:
        return str(Path(self.path) / "venv")

    @property
    def installer(self) -> str:
        """Who installed its packages (uv or pip), from its record: its build's (pip where uv could
        not build it), else its recipe's."""
        folder = Path(self.path)
        try:
            return read_record(folder, EnvironmentRecord).installer or json.loads(
                (folder / "recipe.json").read_text()).get("installer", PIP)
        except (OSError, ValueError):
            return ""

    @property
    def resolver(self) -> str:
        """A python whose pip resolves as of a date (dated.py), or "" when the environment has none."""
        path = Path(self.path) / "resolver" / "bin" / "python"
        return str(path) if path.exists() else ""

    @property
    def exact_pins(self) -> str:
        """The folder of the spec's exact pins, which a resolution as of a date takes as found."""
        return str(Path(self.path) / "exact")

    @property
    def uploaded_before(self) -> str:
        """The date its packages resolved at ("" for today's)."""
        path = Path(self.path) / "era-date.txt"
        return path.read_text().strip() if path.is_file() else ""

    @property
    def constraints(self) -> str:
        """The constraints file of its date, or "" when it has none."""
        path = Path(self.path) / "era-constraints.txt"
        return str(path) if path.is_file() else ""

    def variables(self) -> dict[str, str]:
        return {"PATH": f"{self.venv}/bin:/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": self.venv}

    def mounts(self) -> list[Mount]:
        """Read-only: the environment and, unless the system holds it, its interpreter."""
        found = [Mount(self.path, self.path)]
        if self.interpreter_prefix and not held_by_system(self.interpreter_prefix):
            found.append(Mount(self.interpreter_prefix, self.interpreter_prefix))
        return found
