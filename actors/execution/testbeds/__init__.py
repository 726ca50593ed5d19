"""Testbeds: the repository installed at one commit on top of an environment, as the official
harness's instance image is.

recipe.py says what a testbed is made of and what a made one is; cache.py looks them up and locks
them; build.py makes one, a method per phase; prefix.py is its interpreter prefix and the hooks
its install runs with; install_steps.py reads its install steps; install_inputs.py and reuse.py
make a testbed from another of its group; compiler_cache.py and the Cython hook spare compiling
again what did not change. Testbeds know environments, the sandbox and sharing; none of them
knows testbeds."""
from __future__ import annotations

from .cache import TestbedCache
from .recipe import BUILT, REINSTALLED, REUSED, TESTBED, Testbed, TestbedRecipe

__all__ = ["TestbedCache", "TestbedRecipe", "Testbed", "TESTBED", "BUILT", "REUSED", "REINSTALLED"]
