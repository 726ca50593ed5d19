"""Environments: the heavy, shared part of a test environment, as the official harness's
environment image is: a virtual environment of the spec's Python with the spec's requirements and
packages, built once and cached under a key made of everything that defines it (the exact
interpreter, the requirements, the packages, the date they resolve at, the installer). What
depends on the repository's commit (its own install) is a testbed (testbeds.py), built on top of it.

Its packages are installed by uv where the interpreter allows it, else by pip (installers.py). A
build runs in the sandbox with the network on (for the package index) and every other limit, as
the builds' uid (identities.py), which owns the cache. The cache folder is ~/.cache/magis-ray/envs
unless MAGIS_ENV_CACHE or `--env-cache` say otherwise; builds of the same key on one node wait for
each other (a file lock), so each node builds each environment once. With the cluster's artifact
store (artifacts.py), a node fetches what another node built rather than build it again, and its own
cache is bounded (cache_bound.py)."""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import era
from .artifacts import (BUILT, CACHED, ENVIRONMENTS, FAILURE_TTL_S, FETCHED, ArtifactStore, ArtifactUnusableHere,
                        BuildFailedElsewhere)
from .cache_bound import evict_least_recent, mark_used, record_size
from .identities import build_identity, give_to
from .installers import AUTO, PIP, UV, Installer, UvInstaller, installer_for, installer_named
from .interpreters import InterpreterMissing, find_python, full_version, interpreter_prefix
from .sandbox import GiB, MiB, Limits, Mount, Sandbox
from magis_ray.events.settings import node_settings

BUILD_LIMITS = Limits(wall_seconds=3600.0, memory_bytes=16 * GiB, cpu_seconds=3600, processes=2048,
                      file_bytes=8 * GiB, tmp_bytes=1 * GiB, log_bytes=64 * MiB, output_bytes=64 * 1024)
# Tools of the build itself when no date is set, as current as the interpreter allows; setuptools
# below 81 keeps pkg_resources, which older projects import.
BASE_TOOLS = ("pip", "setuptools<81", "wheel")
SYSTEM_PREFIXES = ("/usr/", "/bin/", "/lib/", "/lib64/")


def held_by_system(prefix: str) -> bool:
    """Whether the sandbox's system folders already show this interpreter prefix: /usr itself (a
    distribution's python, what an ordinary user without pyenv has) as well as any folder in them."""
    return (prefix.rstrip("/") + "/").startswith(SYSTEM_PREFIXES)


def default_cache_root() -> Path:
    return Path(node_settings().env_cache or Path.home() / ".cache" / "magis-ray" / "envs")


class EnvironmentUnsupported(Exception):
    """The recipe cannot be built here (e.g. a conda-only step); the message says why."""


# How uv says that it could not build a source distribution (its isolated build failed, or found
# no build requirements it could use).
UV_BUILD_FAILED = re.compile(r"Failed to (?:download and )?build")


def set_aside_attempt(folder: Path, name: str) -> None:
    """Empty a build's folder for another attempt, keeping the first attempt's logs as `name`."""
    for entry in folder.iterdir():
        if entry.name == "logs":
            shutil.rmtree(folder / name, ignore_errors=True)
            entry.rename(folder / name)
        elif entry.name != name:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


class EnvironmentBuildError(Exception):
    """A build step failed; `step` names it and the message ends with the end of its log."""

    def __init__(self, step: str, message: str, log: str = "") -> None:
        super().__init__(f"{step}: {message}")
        self.step = step
        self.log = log


@dataclass(frozen=True)
class Recipe:
    """What an environment is made of."""

    python: str  # "3.9"
    requirements: str = ""  # a pip requirements file's text
    packages: tuple[str, ...] = ()  # pip install arguments (conda package lists mapped to pip)
    pip_packages: tuple[str, ...] = ()
    unsupported: str = ""  # when set, why this recipe cannot be built
    label: str = ""  # for people: "sqlfluff/sqlfluff 0.6"
    uploaded_before: str = ""  # ISO 8601: packages as of this time (era.py); "" for today's
    installer: str = AUTO  # uv, pip, or auto: uv where it serves the Python (installers.py)

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
        # The installer that builds it, never "auto": a pip-built environment is not a uv one.
        fields["installer"] = self.installer_name(interpreter)
        return {"interpreter": interpreter, "tools": list(BASE_TOOLS), "layout": 3, **fields}

    def key(self, interpreter: str) -> str:
        data = json.dumps(self.identity(interpreter), sort_keys=True).encode()
        return hashlib.sha256(data).hexdigest()[:20]


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

    @property
    def venv(self) -> str:
        return str(Path(self.path) / "venv")

    @property
    def installer(self) -> str:
        """Who installed its packages (uv or pip), from its record: its build's (pip where uv could
        not build it), else its recipe's."""
        folder = Path(self.path)
        try:
            built = json.loads((folder / "ready.json").read_text()).get("installer")
            return built or json.loads((folder / "recipe.json").read_text()).get("installer", PIP)
        except (OSError, ValueError):
            return ""

    @property
    def resolver(self) -> str:
        """A python whose pip resolves as of a date (era.py), or "" when the environment has none."""
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


@contextlib.contextmanager
def folder_lock(folder: Path):
    """The node-wide lock of a cache folder: who builds or changes it holds it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class Shared:
    """One key of the cluster's artifact store, as this node sees it: where a build is fetched
    from instead, and published to after (artifacts.py)."""

    store: ArtifactStore
    kind: str  # artifacts.ENVIRONMENTS or artifacts.TESTBEDS
    key: str
    root: Path  # this node's cache root
    interpreter_prefix: str  # this node's prefix of the interpreter the folder is built on


def locked_build(folder: Path, build, done: str = "ready.json", shared: Shared | None = None):
    """Run `build()` for `folder` unless it is ready; builds of one folder on one node wait for each
    other, and a failed one is not retried within FAILURE_TTL_S (a rerun would fail alike). With
    `shared`, the artifact store is asked first: a published archive is fetched rather than built,
    another node's build is waited for, and what is built here is published, a failure as well as
    a folder (another node's published failure is raised here as the EnvironmentBuildError it
    was). Returns (info, seconds, built_now); the info says how the folder was obtained under
    "obtained" (BUILT, FETCHED, CACHED)."""
    with folder_lock(folder):
        ready = folder / done
        if ready.is_file():
            return dict(json.loads(ready.read_text()), obtained=CACHED), 0.0, False
        failed = folder / "failed.json"
        if failed.is_file():
            info = json.loads(failed.read_text())
            if time.time() - info["time"] < FAILURE_TTL_S:
                raise EnvironmentBuildError(info["step"], info["message"] + f" (an earlier build; remove {folder} to retry now)")
        start = time.monotonic()
        claim = None
        if shared is not None:
            fetched, claim = _fetch_or_claim(folder, shared)
            if fetched:
                return dict(json.loads(ready.read_text()), obtained=FETCHED), time.monotonic() - start, False
        try:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            try:
                info = build()
            except EnvironmentBuildError as exc:
                message = str(exc).split(": ", 1)[1]
                failed.write_text(json.dumps({"time": time.time(), "step": exc.step, "message": message}))
                if shared is not None:
                    _publish_failure(shared, exc.step, message)
                raise
            seconds = time.monotonic() - start
            info = dict(info, build_seconds=seconds, time=time.time())
            write_ready(folder, info, done)  # the last step: a half-built folder is never taken for a ready one
            if shared is not None:
                _publish(folder, shared)
        finally:
            if claim is not None:
                claim.release()
        return dict(info, obtained=BUILT), seconds, True


def _fetch_or_claim(folder: Path, shared: Shared):
    """(True, None) once the store's archive is at `folder`; else (False, the claim to build it).
    A store that fails (unreachable, unwritable), or an archive this node cannot use, is said in the
    log and the node builds; a failure of the key's build the store holds is raised as
    EnvironmentBuildError."""
    try:
        while True:
            try:
                if shared.store.fetch(shared.kind, shared.key, folder, shared.root, shared.interpreter_prefix):
                    return True, None
            except ArtifactUnusableHere as exc:
                logging.getLogger(__name__).warning("artifact %s/%s: %s; building it here", shared.kind, shared.key, exc)
                return False, None
            try:
                claim = shared.store.claim_or_wait(shared.kind, shared.key)
            except BuildFailedElsewhere as exc:
                raise EnvironmentBuildError(exc.failure.step, str(exc)) from None
            if claim is not None:
                # Published between our look and our claim: fetch it after all.
                if claim.held and shared.store.has(shared.kind, shared.key):
                    claim.release()
                    continue
                return False, claim
    except OSError as exc:
        logging.getLogger(__name__).warning("artifact store %s: %s; building %s here", shared.store.location, exc, shared.key)
        return False, None


def _publish(folder: Path, shared: Shared) -> None:
    """What this node built, published unless another node's archive is there already (this node
    could not use it, or stopped waiting for it): replacing an archive would fail the digest of a
    node fetching it meanwhile."""
    try:
        if shared.store.has(shared.kind, shared.key):
            return
        shared.store.publish(shared.kind, shared.key, folder, shared.root, shared.interpreter_prefix)
    except OSError as exc:  # the build stands; the other nodes build it too
        logging.getLogger(__name__).warning("artifact store %s: publishing %s failed: %s", shared.store.location, shared.key, exc)


def _publish_failure(shared: Shared, step: str, message: str) -> None:
    try:
        shared.store.publish_failure(shared.kind, shared.key, step, message, FAILURE_TTL_S)
    except OSError as exc:  # the failure stands here; another node finds it out by building
        logging.getLogger(__name__).warning("artifact store %s: publishing the failure of %s failed: %s",
                                            shared.store.location, shared.key, exc)


def write_ready(folder: Path, info: dict, done: str = "ready.json") -> None:
    """Record a built folder's info at once (a reader sees the old file or the new, never half)."""
    tmp = folder / f"{done}.tmp"
    tmp.write_text(json.dumps(info, indent=1, sort_keys=True))
    tmp.rename(folder / done)


class BuildSteps:
    """The steps of one build, each run in the sandbox with its own log: logs/NN-step.log."""

    def __init__(self, sandbox: Sandbox, folder: Path, mounts: list[Mount], variables: dict[str, str], cwd: str) -> None:
        self.sandbox, self.folder, self.mounts, self.variables, self.cwd = sandbox, folder, mounts, variables, cwd
        self.logs = folder / "logs"
        self.logs.mkdir(exist_ok=True)
        self.number = 0

    def run(self, step: str, command: str, network: bool = True, extra: dict[str, str] | None = None,
            required: bool = True):
        self.number += 1
        log = self.logs / f"{self.number:02d}-{step}.log"
        outcome = self.sandbox.run(command, cwd=self.cwd, mounts=self.mounts, env={**self.variables, **(extra or {})},
                                   limits=BUILD_LIMITS, network=network, log_path=log, build=True)
        if not outcome.ok and required:
            tail = " | ".join(outcome.output.strip().splitlines()[-3:])
            why = "timed out" if outcome.timed_out else f"exit {outcome.exit_code}"
            limits = f" [{'; '.join(outcome.limits)}]" if outcome.limits else ""
            raise EnvironmentBuildError(step, f"{command!r} {why}{limits}: {tail[-400:]} (log: {log})", outcome.output)
        return outcome


@dataclass
class EnvironmentCache:
    root: Path = field(default_factory=default_cache_root)
    sandbox: Sandbox = field(default_factory=Sandbox)
    pythons: dict[str, str] = field(default_factory=dict)  # version -> path (--python)
    artifacts: ArtifactStore | None = None  # the cluster's store of built environments and testbeds (None: no sharing)
    limit_bytes: int = field(default_factory=lambda: int(node_settings().env_cache_gb * GiB))  # 0: unbounded

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    def shared(self, kind: str, key: str, python: str) -> Shared | None:
        """The key in the artifact store, for a folder built on the interpreter `python` (None: no sharing)."""
        if self.artifacts is None:
            return None
        return Shared(self.artifacts, kind, key, self.root, interpreter_prefix(python))

    def arrived(self, folder: Path, obtained: str) -> None:
        """An entry was used; one that just landed is measured, and the cache kept within its bound."""
        mark_used(folder)
        if obtained != CACHED:
            record_size(folder)
            evict_least_recent(self.root, self.limit_bytes, keep=folder)

    def interpreter(self, python_version: str) -> tuple[str, str]:
        python = find_python(python_version, self.pythons)
        return python, full_version(python)

    @property
    def pip_cache(self) -> Path:
        return self.root / "pip-cache"

    def get(self, recipe: Recipe) -> Environment:
        """The environment of `recipe`, built now unless this node has it already.
        Raises EnvironmentUnsupported, InterpreterMissing or EnvironmentBuildError."""
        if recipe.unsupported:
            raise EnvironmentUnsupported(recipe.unsupported)
        python, version = self.interpreter(recipe.python)
        key = recipe.key(version)
        folder = self.root / key
        info, seconds, built_now = locked_build(folder, lambda: self._build(recipe, python, version, folder),
                                                shared=self.shared(ENVIRONMENTS, key, python))
        if info["obtained"] == FETCHED:
            # Built on another node, whose interpreter of this version may live elsewhere: this node's.
            info = dict(info, interpreter_prefix=interpreter_prefix(python), interpreter=python)
            write_ready(folder, {name: value for name, value in info.items() if name != "obtained"})
        self.arrived(folder, info["obtained"])
        return Environment(key, str(folder), version, seconds, built_now, recipe.label, info.get("interpreter_prefix", ""),
                           info.get("interpreter", python), info["obtained"])

    def build_seconds(self, env: Environment) -> float:
        """How long the environment took to build when it was built (from its record)."""
        try:
            return float(json.loads((Path(env.path) / "ready.json").read_text())["build_seconds"])
        except (OSError, ValueError, KeyError):
            return 0.0

    @property
    def uv_cache(self) -> Path:
        return UvInstaller(self.root, self.pip_cache).cache

    def prepare_writable(self, folder: Path, installer: Installer | None = None) -> None:
        """Folders a build writes belong to the builds' uid."""
        identity = build_identity()
        for path in (folder, self.pip_cache, *((self.uv_cache,) if installer is not None and installer.name == UV else ())):
            path.mkdir(parents=True, exist_ok=True)
            if identity.drop and path.stat().st_uid != identity.uid:
                give_to(path, identity)

    def installer(self, name: str, python_version: str = "") -> Installer:
        return installer_named(name, self.root, self.pip_cache, python_version)

    def _build(self, recipe: Recipe, python: str, version: str, folder: Path) -> dict:
        """Build with the recipe's installer; an environment that uv cannot build under "auto" (an
        sdist whose build needs its era's setuptools in the environment itself, as pip builds a
        project without pyproject.toml) is built again with pip, the harness's own installer."""
        installer = self.installer(recipe.installer_name(version), version)
        try:
            return self._build_with(installer, recipe, python, version, folder)
        except EnvironmentBuildError as failed:
            if installer.name != UV or recipe.installer != AUTO or not UV_BUILD_FAILED.search(f"{failed}{failed.log}"):
                raise
            why = str(failed).splitlines()[0][-300:]
        set_aside_attempt(folder, "uv-logs")
        (folder / "logs").mkdir()
        (folder / "logs" / "installer.log").write_text(f"uv could not build this environment, so pip built it: {why}\n")
        return self._build_with(self.installer(PIP, version), recipe, python, version, folder)

    def _build_with(self, installer: Installer, recipe: Recipe, python: str, version: str, folder: Path) -> dict:
        prefix = interpreter_prefix(python)
        self.prepare_writable(folder, installer)
        venv = folder / "venv"
        (folder / "tmp").mkdir()
        variables = {"PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(venv), "TMPDIR": str(folder / "tmp"),
                     **installer.variables()}
        mounts = installer.mounts(folder)
        if not held_by_system(prefix):
            mounts.append(Mount(prefix, prefix))
        give_to(folder / "tmp", build_identity())
        steps = BuildSteps(self.sandbox, folder, mounts, variables, cwd=str(folder))
        steps.run("venv", installer.venv_command(python, venv), network=False)
        stages = era.Stages(recipe.requirements, recipe.packages, recipe.pip_packages)
        if recipe.requirements.strip():
            (folder / "requirements.txt").write_text(recipe.requirements)
        pins: list[str] = []
        if recipe.uploaded_before:
            pins = self._resolve_era(recipe, stages, steps, folder, version, installer)
        when = (folder / "era-date.txt").read_text().strip() if pins else ""
        exact = tuple(stages.pins())

        def install(step: str, stage: int, arguments: list[str]) -> None:
            """One install step, held to the date's pins less the names the step pins itself."""
            constraints = ""
            if pins:
                path = folder / f"constraints-{step}.txt"
                path.write_text("\n".join(era.constraints_without(pins, stages.own_pins(stage) if stage >= 0 else set())) + "\n")
                constraints = str(path)
            command, extra = installer.install_command(venv, arguments, constraints, when, exact)
            steps.run(step, command, extra=extra)

        install("tools", -1, ["--upgrade", *era.TOOLS] if pins else ["--upgrade", *BASE_TOOLS])
        if recipe.requirements.strip():
            install("requirements", 0, ["-r", str(folder / "requirements.txt")])
        if recipe.packages:
            install("packages", 1, list(recipe.packages))
        if recipe.pip_packages:
            install("pip_packages", 2, list(recipe.pip_packages))
        finish = installer.finish_command(venv)
        if finish:
            steps.run("finish", finish, network=False)
        if pins:
            # What later installs (the testbed's) keep to: the environment as it now is.
            (folder / "era-constraints.txt").write_text("\n".join(pins) + "\n")
        shutil.rmtree(folder / "tmp", ignore_errors=True)
        (folder / "recipe.json").write_text(json.dumps(recipe.identity(version), indent=1, sort_keys=True))
        return {"label": recipe.label, "interpreter_prefix": prefix, "interpreter": python, "installer": installer.name}

    def _resolve_era(self, recipe: Recipe, stages, steps: BuildSteps, folder: Path, version: str,
                     installer: Installer) -> list[str]:
        """The pins of `recipe.uploaded_before` for the whole environment (pip, setuptools and wheel
        included), or [] when no resolution works (the build then goes on as of today, and
        logs/era.log says so). uv resolves for the environment's own interpreter; pip by a pip that
        knows dates, in a venv of its own (3.9 and later) or, for an older Python, from wheels.
        Either way the testbeds' installs get that resolver and the spec's exact pins as files."""
        major_minor = tuple(int(p) for p in version.split(".")[:2])
        requirements, packages, pip_packages = stages.final()
        pins = stages.pins()
        exact, report = folder / "exact", folder / "era-report.json"
        exact.mkdir()
        give_to(exact, build_identity())
        wanted: list[str] = [*packages, *pip_packages]
        if any(line.strip() for line in requirements):
            (folder / "era-requirements.txt").write_text("\n".join(requirements) + "\n")
            wanted = ["-r", str(folder / "era-requirements.txt"), *wanted]
        log = folder / "logs" / "era.log"
        when, notes = era.effective_date(recipe.uploaded_before, pins)
        resolver = era.resolver_pip(major_minor)
        attempts = [("everything", [*era.TOOLS, *wanted]), ("the tools and the exact pins", [*era.TOOLS, *pins])]
        found: list[str] = []
        if resolver is not None:
            # A venv of its own beside the environment, kept for the testbeds' installs; it runs in
            # the sandbox, for it may build an sdist's metadata, which runs the sdist's code.
            tool = folder / "resolver" / "bin" / "python"
            if installer.name == PIP:
                made = f"python -m venv {shlex.quote(str(folder / 'resolver'))} && {tool} -m pip install --quiet --upgrade {shlex.quote(resolver)}"
            else:
                command, _ = installer.install_command(folder / "resolver", ["--quiet", resolver], compiled=False)
                made = f"{installer.venv_command('python', folder / 'resolver')} && {command}"
            steps.run("resolver", made)
            if pins:
                steps.run("exact-pins", f"{tool} -m pip download --no-deps --quiet -d " + shlex.quote(str(exact)) + " "
                          + " ".join(shlex.quote(p) for p in pins), required=False)
        elif pins:
            # Too old for a resolver of its own: this process's pip fetches the pins for its
            # version, from wheels only, so no package code runs here.
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(exact),
                            "--python-version", ".".join(map(str, major_minor)), "--only-binary=:all:", *pins],
                           capture_output=True, text=True, env=era.pip_environment(self.pip_cache), timeout=900)
        for what, requested in attempts:
            resolved, error = self._resolve(installer, resolver, steps, folder, version, when, requested, tuple(pins), report)
            if resolved is not None:
                how = f"with {installer.name}" if installer.name == UV else \
                    f"with {resolver}" if resolver is not None else f"for Python {version}, from wheels"
                notes.append(f"resolved {what} as of {when} {how}")
                found = resolved
                break
            if installer.name == UV and UV_BUILD_FAILED.search(error):  # no other attempt builds it either
                raise EnvironmentBuildError("era", f"resolving {what} as of {when}: {error.strip().splitlines()[0]}")
            notes.append(f"resolving {what} failed: {error}")
        if not found:
            log.write_text("\n".join(notes) + "\nbuilding without the date limit\n")
            return []
        log.write_text("\n".join(notes) + "\n" + "\n".join(found) + "\n")
        (folder / "era-date.txt").write_text(when + "\n")
        return found

    def _resolve(self, installer: Installer, resolver: str | None, steps: BuildSteps, folder: Path, version: str,
                 when: str, requested: list[str], pins: tuple[str, ...], report: Path) -> tuple[list[str] | None, str]:
        """One attempt at the environment's resolution: (its pins, "") or (None, why)."""
        wanted, output = folder / "era-wanted.txt", folder / "era-pins.txt"
        wanted.write_text("\n".join(requirement_lines(requested)) + "\n")
        output.unlink(missing_ok=True)
        command = installer.resolve_command(folder / "venv", wanted, output, when, pins)
        if command is not None:
            outcome = steps.run("era", command, required=False)
            if outcome.ok and output.is_file():
                return era.pins_in(output), ""
            return None, f"exit {outcome.exit_code}: {outcome.output[-1500:]}"
        if resolver is not None:
            tool = folder / "resolver" / "bin" / "python"
            command = [str(tool), "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                       "--uploaded-prior-to", when, "--find-links", str(folder / "exact"), *requested]
            outcome = steps.run("era", shlex.join(command), required=False)
            if outcome.ok and report.is_file():
                return era.constraints_from_report(report), ""
            return None, f"exit {outcome.exit_code}: {outcome.output[-1500:]}"
        ok, error = era.resolve_from_wheels(requested, version, when, str(folder / "exact"), output, self.pip_cache)
        return (era.pins_in(output), "") if ok else (None, error)


def requirement_lines(arguments: list[str]) -> list[str]:
    """pip install arguments as the lines of a requirements file (`-r FILE` stays one line)."""
    lines: list[str] = []
    for argument in arguments:
        if lines and lines[-1] == "-r":
            lines[-1] = f"-r {argument}"
        else:
            lines.append(argument)
    return lines


__all__ = ["Recipe", "Environment", "EnvironmentCache", "EnvironmentUnsupported", "EnvironmentBuildError",
           "InterpreterMissing", "default_cache_root", "locked_build", "BuildSteps", "BUILD_LIMITS", "Shared"]
