"""Python interpreters the machine already has: nothing is ever downloaded.

Looked for in this order: the user's `--python` choice (a path, or VERSION=PATH pairs), pyenv's
versions (~/.pyenv/versions/X.Y.*, newest patch first), then `pythonX.Y` on PATH."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from magis_ray.events.errors import Unavailable
from magis_ray.events.settings import node_settings


class InterpreterMissing(Unavailable):
    """No interpreter of the wanted version on this machine; the message says where we looked."""


def _pyenv_root() -> Path:
    return Path(node_settings().pyenv_root or Path.home() / ".pyenv")


def _patch_key(name: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.\-]", name))


def full_version(python: str) -> str:
    """The interpreter's exact version, e.g. "3.9.18" (part of an environment's key)."""
    result = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise InterpreterMissing(f"{python} does not run: {' '.join(result.stderr.split())[:200]}")
    return result.stdout.strip()


def find_python(version: str, overrides: dict[str, str] | None = None) -> str:
    """The path of a CPython `version` ("3.9") interpreter, real (not a pyenv shim)."""
    overrides = overrides or {}
    if version in overrides or "" in overrides:
        path = overrides.get(version) or overrides[""]
        if not (shutil.which(path) or Path(path).is_file()):
            raise InterpreterMissing(f"--python {path}: no such interpreter")
        return shutil.which(path) or path
    versions = _pyenv_root() / "versions"
    if versions.is_dir():
        found = sorted((p for p in versions.iterdir() if re.fullmatch(rf"{re.escape(version)}\.\d+", p.name)),
                       key=lambda p: _patch_key(p.name), reverse=True)
        for folder in found:
            if (folder / "bin" / "python").is_file():
                return str(folder / "bin" / "python")
    on_path = shutil.which(f"python{version}")
    if on_path and "/shims/" not in on_path:
        return on_path
    raise InterpreterMissing(
        f"no Python {version} on this machine (looked in {versions} and for python{version} on PATH); "
        f"install one (e.g. `pyenv install {version}`) or pass --python {version}=PATH"
    )


def available_versions(overrides: dict[str, str] | None = None) -> list[str]:
    """The CPython versions ("3.11") this machine has, as find_python finds them, oldest first."""
    found = {version for version in (overrides or {}) if version}
    versions = _pyenv_root() / "versions"
    if versions.is_dir():
        found |= {match.group(1) for p in versions.iterdir() if (match := re.fullmatch(r"(\d+\.\d+)\.\d+", p.name))
                  and (p / "bin" / "python").is_file()}
    for minor in range(0, 30):
        on_path = shutil.which(f"python3.{minor}")
        if on_path and "/shims/" not in on_path:
            found.add(f"3.{minor}")
    return sorted(found, key=_patch_key)


def interpreter_prefix(python: str) -> str:
    """Where the interpreter's own files are (its sys.base_prefix): what a sandbox must show for a
    virtual environment made from it to run."""
    result = subprocess.run([python, "-c", "import sys; print(getattr(sys, 'base_prefix', sys.prefix))"],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise InterpreterMissing(f"{python} does not run: {' '.join(result.stderr.split())[:200]}")
    return result.stdout.strip()
