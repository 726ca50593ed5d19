"""Environments: the heavy, shared part of a test environment, as the official harness's
environment image is: a virtual environment of a recipe's Python with its requirements and
packages, resolved as of its date, built once per node and cached.

recipe.py says what an environment is made of and what a built one is; cache.py builds and keeps
them; steps.py runs a build's steps in the sandbox; installers.py (uv, pip), resolver.py and
dated.py (packages as of a date), interpreters.py (the machine's Pythons), conda.py (a conda
environment as pip packages) and system.py (what the machine itself must have) serve it.
declared/ reads what a project declares for its tests (dependency groups, extras, requirement
files, tox, the tools' tables, setup.py), its Python and its pytest, from its files at a commit,
nothing run. Environments know nothing of testbeds."""
from __future__ import annotations

from magis_ray.actors.execution.sharing.builds import BuildFailed

from .cache import EnvironmentCache, default_cache_root
from .interpreters import InterpreterMissing
from .recipe import Environment, EnvironmentUnsupported, Recipe, held_by_system
from .steps import BUILD_LIMITS, BuildSteps
from .system import SystemPackagesMissing, missing_system_packages

__all__ = ["Recipe", "Environment", "EnvironmentCache", "EnvironmentUnsupported", "BuildFailed", "InterpreterMissing",
           "SystemPackagesMissing", "default_cache_root", "held_by_system", "missing_system_packages", "BuildSteps",
           "BUILD_LIMITS"]
