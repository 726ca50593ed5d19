"""Environments: a virtual environment built once from a recipe and cached under a key made of
everything that defines it (the exact interpreter, the requirements, the packages, the install
steps and the commit they ran at).

A build runs in the sandbox with the network on (pip needs PyPI) but everything else as for tests:
the repository's checkout at the recipe's commit is mounted at /testbed, the install step runs
there, and an editable install therefore points at /testbed, where every later test run mounts
its own workspace (SWE-bench's images use the same path). The cache folder is
~/.cache/magis-ray/envs unless MAGIS_ENV_CACHE or `--env-cache` say otherwise; builds of the same
key on one node wait for each other (a file lock), so each node builds each environment once.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .interpreters import InterpreterMissing, find_python, full_version
from .sandbox import Limits, Mount, Sandbox
from .workspaces import Workspace, WorkspaceError

TESTBED = "/testbed"
FAILURE_TTL_S = 3600.0  # a failed build is not retried within this time (a rerun would fail alike)
BUILD_LIMITS = Limits(wall_seconds=3600.0, memory_bytes=0, output_bytes=16 * 1024)
# Tools of the build itself, as current as the interpreter allows; setuptools below 81 keeps
# pkg_resources, which older projects import.
BASE_TOOLS = ("pip", "setuptools<81", "wheel")


def default_cache_root() -> Path:
    return Path(os.environ.get("MAGIS_ENV_CACHE") or Path.home() / ".cache" / "magis-ray" / "envs")


class EnvironmentUnsupported(Exception):
    """The recipe cannot be built here (e.g. a conda-only step); the message says why."""


class EnvironmentBuildError(Exception):
    """A build step failed; `step` names it and the message ends with the end of its log."""

    def __init__(self, step: str, message: str, log: str = "") -> None:
        super().__init__(f"{step}: {message}")
        self.step = step
        self.log = log


@dataclass(frozen=True)
class Recipe:
    """What an environment is made of. `install` and `setup` run in the checkout of `commit`."""

    python: str  # "3.9"
    repo: str = ""  # owner/name, or a label for a user's repository
    commit: str = ""  # the commit whose checkout the install step sees ("" for none)
    requirements: str = ""  # a pip requirements file's text
    packages: tuple[str, ...] = ()  # pip install arguments (conda package lists mapped to pip)
    pip_packages: tuple[str, ...] = ()
    install: str = ""  # e.g. "python -m pip install -e ."
    setup: tuple[str, ...] = ()  # more shell commands after the install (a user's --env-setup)
    unsupported: str = ""  # when set, why this recipe cannot be built
    label: str = ""  # for people: "sqlfluff/sqlfluff 0.6"
    # Only packages uploaded before this time (ISO 8601), for pip versions that can (>= 26, which
    # needs Python >= 3.9); older pips resolve as of today, which for their Pythons is old anyway.
    uploaded_before: str = ""

    def identity(self, interpreter: str) -> dict:
        fields = asdict(self)
        fields.pop("label")
        return {"interpreter": interpreter, "tools": list(BASE_TOOLS), **fields}

    def key(self, interpreter: str) -> str:
        data = json.dumps(self.identity(interpreter), sort_keys=True).encode()
        return hashlib.sha256(data).hexdigest()[:20]


@dataclass(frozen=True)
class Environment:
    """A built environment: a venv whose bin/ goes first on PATH."""

    key: str
    path: str
    python_version: str
    build_seconds: float  # how long its build took (0 when it came from the cache)
    built_now: bool
    label: str = ""

    @property
    def venv(self) -> str:
        return str(Path(self.path) / "venv")

    def variables(self) -> dict[str, str]:
        return {"PATH": f"{self.venv}/bin:/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": self.venv,
                "PYTHONDONTWRITEBYTECODE": "1"}


@dataclass
class EnvironmentCache:
    root: Path = field(default_factory=default_cache_root)
    sandbox: Sandbox = field(default_factory=Sandbox)
    pythons: dict[str, str] = field(default_factory=dict)  # version -> path (--python)

    def __post_init__(self) -> None:
        self.root = Path(self.root)

    def interpreter(self, recipe: Recipe) -> tuple[str, str]:
        python = find_python(recipe.python, self.pythons)
        return python, full_version(python)

    def get(self, recipe: Recipe, repo_path: str | os.PathLike | None = None) -> Environment:
        """The environment of `recipe`, built now unless this node has it already.
        Raises EnvironmentUnsupported, InterpreterMissing or EnvironmentBuildError."""
        if recipe.unsupported:
            raise EnvironmentUnsupported(recipe.unsupported)
        python, version = self.interpreter(recipe)
        key = recipe.key(version)
        folder = self.root / key
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another build of this key on this node: wait for it
            ready = folder / "ready.json"
            if ready.is_file():
                info = json.loads(ready.read_text())
                return Environment(key, str(folder), version, 0.0, False, recipe.label)
            failed = folder / "failed.json"
            if failed.is_file():
                info = json.loads(failed.read_text())
                if time.time() - info["time"] < FAILURE_TTL_S:
                    raise EnvironmentBuildError(info["step"], info["message"] + " (an earlier build; remove "
                                                f"{folder} to retry now)")
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            start = time.monotonic()
            try:
                self._build(recipe, python, folder, repo_path)
            except EnvironmentBuildError as exc:
                failed.write_text(json.dumps({"time": time.time(), "step": exc.step, "message": str(exc).split(": ", 1)[1]}))
                raise
            seconds = time.monotonic() - start
            (folder / "recipe.json").write_text(json.dumps(recipe.identity(version), indent=1, sort_keys=True))
            tmp = folder / "ready.json.tmp"
            tmp.write_text(json.dumps({"build_seconds": seconds, "label": recipe.label, "time": time.time()}))
            tmp.rename(ready)  # the last step: a half-built environment is never taken for a ready one
            return Environment(key, str(folder), version, seconds, True, recipe.label)

    def build_seconds(self, env: Environment) -> float:
        """How long the environment took to build when it was built (from its record)."""
        try:
            return float(json.loads((Path(env.path) / "ready.json").read_text())["build_seconds"])
        except (OSError, ValueError, KeyError):
            return 0.0

    def _era(self, recipe: Recipe, venv: Path, folder: Path, after_tools: dict, variables: dict, mounts) -> dict:
        """The variables that keep pip to packages uploaded before `recipe.uploaded_before`: the
        venv's own pip when it knows --uploaded-prior-to (pip >= 26); otherwise constraints that this
        process's pip resolves for the venv's Python as of that date (wheels only; when that cannot
        resolve, the build goes on unconstrained and the log says so)."""
        log = folder / "logs" / "era.log"
        probe = self.sandbox.run("python -m pip install --help", cwd=str(folder), mounts=mounts, env=variables,
                                 limits=BUILD_LIMITS, network=False)
        if "--uploaded-prior-to" in probe.full_output:
            log.write_text(f"pip knows --uploaded-prior-to: PIP_UPLOADED_PRIOR_TO={recipe.uploaded_before}\n")
            return after_tools
        version = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True).stdout.strip()
        wanted: list[str] = []
        if recipe.requirements.strip():
            wanted += ["-r", str(folder / "requirements.txt")]
        wanted += [*recipe.packages, *recipe.pip_packages]
        variables = dict(after_tools)
        variables.pop("PIP_UPLOADED_PRIOR_TO", None)
        if not wanted:
            log.write_text("nothing to resolve before the install step\n")
            return variables
        report = folder / "era-report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
                   "--python-version", version, "--only-binary=:all:", "--uploaded-prior-to", recipe.uploaded_before, *wanted]
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        if done.returncode != 0 or not report.is_file():
            log.write_text(f"{shlex.join(command)}\nexit {done.returncode}; building without the date limit\n{done.stderr[-3000:]}")
            return variables
        pins = sorted(f"{item['metadata']['name']}=={item['metadata']['version']}"
                      for item in json.loads(report.read_text())["install"])
        (folder / "era-constraints.txt").write_text("\n".join(pins) + "\n")
        log.write_text(f"{shlex.join(command)}\n" + "\n".join(pins) + "\n")
        variables["PIP_CONSTRAINT"] = str(folder / "era-constraints.txt")
        return variables

    def _build(self, recipe: Recipe, python: str, folder: Path, repo_path) -> None:
        logs = folder / "logs"
        logs.mkdir()
        venv = folder / "venv"
        pip_cache = self.root / "pip-cache"
        pip_cache.mkdir(exist_ok=True)
        variables = {
            "PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(venv),
            "PIP_CACHE_DIR": str(pip_cache), "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_PROGRESS_BAR": "off",
        }
        # pip's own configuration from the host (index, certificates, proxies): builds reach PyPI as
        # the user's pip does. Only builds see these, never a test run.
        for name, value in os.environ.items():
            if name.startswith("PIP_") and name not in variables or name.lower() in ("http_proxy", "https_proxy", "no_proxy"):
                variables[name] = value
        after_tools = dict(variables, PIP_UPLOADED_PRIOR_TO=recipe.uploaded_before) if recipe.uploaded_before else variables
        mounts = [Mount(str(folder), str(folder), writable=True), Mount(str(pip_cache), str(pip_cache), writable=True)]
        steps: list[tuple[str, str]] = [
            ("venv", f"{shlex.quote(python)} -m venv {shlex.quote(str(venv))}"),
            ("tools", "python -m pip install --upgrade " + " ".join(shlex.quote(t) for t in BASE_TOOLS)),
        ]
        if recipe.requirements.strip():
            (folder / "requirements.txt").write_text(recipe.requirements)
            steps.append(("requirements", f"python -m pip install -r {shlex.quote(str(folder / 'requirements.txt'))}"))
        if recipe.packages:
            steps.append(("packages", "python -m pip install " + " ".join(shlex.quote(p) for p in recipe.packages)))
        if recipe.pip_packages:
            steps.append(("pip_packages", "python -m pip install " + " ".join(shlex.quote(p) for p in recipe.pip_packages)))
        if recipe.install:
            steps.append(("install", recipe.install))
        for number, command in enumerate(recipe.setup, 1):
            steps.append((f"setup-{number}", command))
        workspace = None
        era_done = False
        try:
            if recipe.commit and (recipe.install or recipe.setup):
                if repo_path is None:
                    raise EnvironmentBuildError("checkout", "the recipe installs the repository but no repository was given")
                try:
                    workspace = Workspace(repo_path, recipe.commit)
                except WorkspaceError as exc:
                    raise EnvironmentBuildError("checkout", str(exc)) from None
                mounts.append(Mount(str(workspace.repo_path), str(workspace.repo_path)))  # the objects it borrows
                mounts.append(Mount(str(workspace.path), TESTBED, writable=True))
            for number, (step, command) in enumerate(steps, 1):
                if step not in ("venv", "tools") and recipe.uploaded_before and not era_done:
                    era_done = True
                    after_tools = self._era(recipe, venv, folder, after_tools, variables, mounts)
                log = logs / f"{number:02d}-{step}.log"
                outcome = self.sandbox.run(command, cwd=TESTBED if workspace else str(folder), mounts=mounts,
                                           env=variables if step in ("venv", "tools") else after_tools, limits=BUILD_LIMITS, network=True, log_path=log)
                if not outcome.ok and step == "install" and "build_editable" in outcome.full_output:
                    # A pinned build backend older than PEP 660 (e.g. setuptools~=62.6): the pips of
                    # the specs' time fell back to `setup.py develop`; today's build it with the
                    # environment's own setuptools instead.
                    log = logs / f"{number:02d}-{step}-no-build-isolation.log"
                    outcome = self.sandbox.run(f"{command} --no-build-isolation", cwd=TESTBED if workspace else str(folder),
                                               mounts=mounts, env=after_tools, limits=BUILD_LIMITS, network=True, log_path=log)
                if not outcome.ok:
                    tail = " | ".join(line for line in outcome.full_output.strip().splitlines()[-3:])
                    why = "timed out" if outcome.timed_out else f"exit {outcome.exit_code}"
                    raise EnvironmentBuildError(step, f"{command!r} {why}: {tail[-400:]} (log: {log})", outcome.output)
        finally:
            if workspace is not None:
                workspace.close()


__all__ = ["Recipe", "Environment", "EnvironmentCache", "EnvironmentUnsupported", "EnvironmentBuildError",
           "InterpreterMissing", "TESTBED", "default_cache_root"]
