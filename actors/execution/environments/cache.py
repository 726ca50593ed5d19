"""The node's cache of environments: each built once per node (and, with the cluster's artifact
store, once per cluster: sharing/builds.py), its packages installed by uv where the interpreter
allows it, else by pip (installers.py), as of its recipe's date (resolver.py, dated.py). A build runs
in the sandbox with the network on (for the package index) and every other limit, as the builds'
uid (identities.py), which owns the cache. The cache folder is ~/.cache/magis-ray/envs unless
MAGIS_ENV_CACHE or `--env-cache` say otherwise; the node keeps it within its bound (cache_bound.py).
What depends on the repository's commit (its own install) is a testbed, built on top of it."""
from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from magis_ray.events.settings import node_settings

from magis_ray.actors.execution.sandbox import GiB, Mount, Sandbox, open_sandbox
from magis_ray.actors.execution.sandbox.identities import build_identity, give_to
from magis_ray.actors.execution.sharing.artifacts import BUILT, CACHED, ENVIRONMENTS, FETCHED, ArtifactStore
from magis_ray.actors.execution.sharing.builds import BuildFailed, SharedArtifact, locked_build, write_record
from magis_ray.actors.execution.sharing.cache_bound import evict_least_recent, mark_used, record_size

from . import dated
from .installers import AUTO, PIP, UV, Installer, UvInstaller, installer_named
from .interpreters import find_python, full_version, interpreter_prefix
from .recipe import BASE_TOOLS, Environment, EnvironmentRecord, EnvironmentUnsupported, Recipe, held_by_system
from .resolver import DatedResolver
from .steps import BuildSteps

# How uv says that it could not build a source distribution (its isolated build failed, or found
# no build requirements it could use).
UV_BUILD_FAILED = re.compile(r"Failed to (?:download and )?build")


def default_cache_root() -> Path:
    return Path(node_settings().env_cache or Path.home() / ".cache" / "magis-ray" / "envs")


def set_aside_attempt(folder: Path, name: str) -> None:
    """Empty a build's folder for another attempt, keeping the first attempt's logs as `name`."""
    for entry in folder.iterdir():
        if entry.name == "logs":
            shutil.rmtree(folder / name, ignore_errors=True)
            entry.rename(folder / name)
        elif entry.name != name:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()



@dataclass
class EnvironmentCache:
    root: Path = field(default_factory=default_cache_root)
    sandbox: Sandbox = field(default_factory=open_sandbox)
    pythons: dict[str, str] = field(default_factory=dict)  # version -> path (--python)
    artifacts: ArtifactStore | None = None  # the cluster's store of built environments and testbeds (None: no sharing)
    limit_bytes: int = field(default_factory=lambda: int(node_settings().env_cache_gb * GiB))  # 0: unbounded

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    def shared(self, kind: str, key: str, python: str) -> SharedArtifact | None:
        """The key in the artifact store, for a folder built on the interpreter `python` (None: no sharing)."""
        if self.artifacts is None:
            return None
        return SharedArtifact(self.artifacts, kind, key, self.root, interpreter_prefix(python))

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
        Raises EnvironmentUnsupported, InterpreterMissing or BuildFailed."""
        if recipe.unsupported:
            raise EnvironmentUnsupported(recipe.unsupported)
        python, version = self.interpreter(recipe.python)
        key = recipe.key(version)
        folder = self.root / key
        record, seconds = locked_build(folder, lambda: self._build(recipe, python, version, folder), EnvironmentRecord,
                                       shared=self.shared(ENVIRONMENTS, key, python))
        if record.obtained == FETCHED:
            # Built on another node, whose interpreter of this version may live elsewhere: this node's.
            record = msgspec.structs.replace(record, interpreter_prefix=interpreter_prefix(python), interpreter=python)
            write_record(folder, record)
        self.arrived(folder, record.obtained)
        return Environment(key, str(folder), version, seconds, record.obtained == BUILT, recipe.label,
                           record.interpreter_prefix, record.interpreter or python, record.obtained, record.build_seconds)

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

    def _build(self, recipe: Recipe, python: str, version: str, folder: Path) -> EnvironmentRecord:
        """Build with the recipe's installer; an environment that uv cannot build under "auto" (an
        sdist whose build needs its era's setuptools in the environment itself, as pip builds a
        project without pyproject.toml) is built again with pip, the harness's own installer."""
        installer = self.installer(recipe.installer_name(version), version)
        try:
            return self._build_with(installer, recipe, python, version, folder)
        except BuildFailed as failed:
            if installer.name != UV or recipe.installer != AUTO or not UV_BUILD_FAILED.search(f"{failed}{failed.log}"):
                raise
            why = str(failed).splitlines()[0][-300:]
        set_aside_attempt(folder, "uv-logs")
        (folder / "logs").mkdir()
        (folder / "logs" / "installer.log").write_text(f"uv could not build this environment, so pip built it: {why}\n")
        return self._build_with(self.installer(PIP, version), recipe, python, version, folder)

    def _build_with(self, installer: Installer, recipe: Recipe, python: str, version: str, folder: Path) -> EnvironmentRecord:
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
        stages = dated.Stages(recipe.requirements, recipe.packages, recipe.pip_packages)
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
                path.write_text("\n".join(dated.constraints_without(pins, stages.own_pins(stage) if stage >= 0 else set())) + "\n")
                constraints = str(path)
            command, extra = installer.install_command(venv, arguments, constraints, when, exact)
            steps.run(step, command, extra=extra)

        install("tools", -1, ["--upgrade", *dated.TOOLS] if pins else ["--upgrade", *BASE_TOOLS])
        if recipe.requirements.strip():
            install("requirements", 0, ["-r", str(folder / "requirements.txt")])
        if recipe.packages:
            install("packages", 1, list(recipe.packages))
        if recipe.pip_packages:
            install("pip_packages", 2, list(recipe.pip_packages))
        finish = installer.finish_command(venv)
        if finish:
            steps.run("finish", finish, network=False)
        if recipe.without:
            # only those the requirements brought: a pip before 10 fails on a name not installed
            names = " ".join(shlex.quote(name) for name in recipe.without)
            steps.run("without", f"installed=$(python -m pip show {names} 2>/dev/null | sed -n 's/^Name: //p'); "
                                 '[ -z "$installed" ] || python -m pip uninstall --yes $installed', network=False)
        if pins:
            # What later installs (the testbed's) keep to: the environment as it now is.
            left = {dated.requirement_name(name) for name in recipe.without}
            (folder / "era-constraints.txt").write_text("\n".join(p for p in pins if dated.requirement_name(p) not in left) + "\n")
        shutil.rmtree(folder / "tmp", ignore_errors=True)
        (folder / "recipe.json").write_text(json.dumps(recipe.identity(version), indent=1, sort_keys=True))
        return EnvironmentRecord(label=recipe.label, interpreter_prefix=prefix, interpreter=python, installer=installer.name)

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
        exact = folder / "exact"
        exact.mkdir()
        give_to(exact, build_identity())
        wanted: list[str] = [*packages, *pip_packages]
        if any(line.strip() for line in requirements):
            (folder / "era-requirements.txt").write_text("\n".join(requirements) + "\n")
            wanted = ["-r", str(folder / "era-requirements.txt"), *wanted]
        log = folder / "logs" / "era.log"
        when, notes = dated.effective_date(recipe.uploaded_before, pins)
        resolver = dated.resolver_pip(major_minor)
        attempts = [("everything", [*dated.TOOLS, *wanted]), ("the tools and the exact pins", [*dated.TOOLS, *pins])]
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
                           capture_output=True, text=True, env=dated.pip_environment(self.pip_cache), timeout=900)
        resolving = DatedResolver(steps, folder, when, version, folder / "venv", exact, self.pip_cache,
                                  uv=installer if isinstance(installer, UvInstaller) else None,
                                  pip=str(folder / "resolver" / "bin" / "python") if resolver is not None else "")
        for what, requested in attempts:
            resolved, error = resolving.resolve("era", requested, free=tuple(pins))
            if resolved is not None:
                how = {"uv": f"with {UV}", "pip": f"with {resolver}", "wheels": f"for Python {version}, from wheels"}[resolving.by]
                notes.append(f"resolved {what} as of {when} {how}")
                found = resolved
                break
            if installer.name == UV and UV_BUILD_FAILED.search(error):  # no other attempt builds it either
                raise BuildFailed("era", f"resolving {what} as of {when}: {error.strip().splitlines()[0]}")
            notes.append(f"resolving {what} failed: {error}")
        if not found:
            log.write_text("\n".join(notes) + "\nbuilding without the date limit\n")
            return []
        log.write_text("\n".join(notes) + "\n" + "\n".join(found) + "\n")
        (folder / "era-date.txt").write_text(when + "\n")
        return found
