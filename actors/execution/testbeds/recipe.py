"""What a testbed is made of (`TestbedRecipe`) and a made one (`Testbed`): the repository installed at
one commit on top of an environment, as the official harness's instance image is. Built once per
(environment, commit, install steps) and cached beside the environments:

    testbeds/KEY/tree        the checkout of the commit after the spec's pre-install edits and its
                             install step (generated files included: a setuptools_scm version
                             file, compiled extensions, egg-info)
    testbeds/KEY/python      the interpreter as a prefix of its own (its files linked, not
                             copied), chained onto the environment's packages: the install's own
                             changes (the editable link, a dependency only this commit needs) land
                             in its bin/ and site-packages, never in the shared environment
                             (prefix.py says why a prefix and not a venv)
    testbeds/KEY/wheelhouse  the project's build requirements, so that installing it again in a
                             test run (as the harness's eval script does) works without the network
    testbeds/KEY/ready.json  its record (`TestbedRecord`)
    testbeds/KEY/inputs.json what its install read and left behind (records.py, install_inputs.py):
                             another commit of its environment whose tree gives the same inputs is
                             made from it, with no install run; another commit has the install run
                             again on a copy of it (reuse.py)

The install ran with the tree at /testbed, so what it wrote points there; a test run gets copies of
the tree (at /testbed) and of the prefix's bin/ and site-packages, and changes neither (runner.py)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from magis_ray.actors.execution.environments import Environment, Recipe
from magis_ray.actors.execution.sandbox import Mount
from magis_ray.actors.execution.sharing.artifacts import CACHED
from magis_ray.actors.execution.sharing.builds import BuildRecord

from .compiler_cache import CompilerCache
from .prefix import site_packages_of

TESTBED = "/testbed"
LAYOUT = 8  # what a cached testbed holds; another number builds anew
BUILT, REUSED, REINSTALLED = "built", "reused", "reinstalled"


@dataclass(frozen=True)
class TestbedRecipe:
    """The repository at `commit`, installed on the environment of `env` by `pre_install` (file
    edits) and then `install` (shell commands run in /testbed)."""

    __test__ = False

    env: Recipe
    repo: str  # owner/name, for people and for submodule mirrors
    commit: str
    pre_install: tuple[str, ...] = ()
    install: tuple[str, ...] = ()
    system_packages: tuple[str, ...] = ()  # Debian packages the spec installs; this machine must have them
    label: str = ""
    system_locales: tuple[str, ...] = ()  # locales the spec generates ("en_US.UTF-8"); this machine must have them

    def key(self, env_key: str) -> str:
        data = json.dumps({"env": env_key, "commit": self.commit, "pre_install": self.pre_install,
                           "install": self.install, "layout": LAYOUT}, sort_keys=True).encode()
        return hashlib.sha256(data).hexdigest()[:20]

    def group(self, env_key: str) -> str:
        """What testbeds that may be made from one another share: all but the commit."""
        data = json.dumps({"env": env_key, "repo": self.repo, "pre_install": self.pre_install, "install": self.install,
                           "system": self.system_packages, "layout": LAYOUT}, sort_keys=True).encode()
        return hashlib.sha256(data).hexdigest()[:20]


@dataclass(frozen=True)
class Testbed:
    __test__ = False

    env: Environment
    key: str
    path: str
    objects: str  # the repository's object folder, which the tree's git borrows from
    build_seconds: float
    built_now: bool
    label: str = ""
    made: str = BUILT  # how: BUILT (its install ran), REUSED (another's install, no install run), REINSTALLED
    made_from: str = ""  # the testbed it was made from (REUSED, REINSTALLED)
    obtained: str = CACHED  # how this node has it: BUILT now, FETCHED from the artifact store, or CACHED
    compilers: CompilerCache | None = None  # the node's compiler cache, which a test run's install reads

    @property
    def tree(self) -> str:
        return str(Path(self.path) / "tree")

    @property
    def prefix(self) -> str:
        """The testbed's interpreter prefix (bin/python, lib/pythonX.Y/site-packages)."""
        return str(Path(self.path) / "python")

    @property
    def writable(self) -> tuple[str, ...]:
        """What installing into the testbed changes: its bin/ and its site-packages."""
        return (str(Path(self.prefix) / "bin"), site_packages_of(Path(self.prefix)))

    @property
    def wheelhouse(self) -> str:
        return str(Path(self.path) / "wheelhouse")

    def variables(self) -> dict[str, str]:
        return {"PATH": f"{self.prefix}/bin:{self.env.venv}/bin:/usr/local/bin:/usr/bin:/bin"}

    def mounts(self) -> list[Mount]:
        """Read-only: the environment, the interpreter, the testbed and the repository's objects."""
        return [*self.env.mounts(), Mount(self.path, self.path), Mount(self.objects, self.objects)]


class TestbedRecord(BuildRecord, frozen=True, kw_only=True):
    """A testbed's ready.json."""

    objects: str = ""  # the repository's object folder, which the tree's git borrows from
    label: str = ""
    made: str = BUILT  # BUILT (its install ran), REUSED (another's install, no install run), REINSTALLED
    made_from: str = ""  # the testbed it was made from (REUSED, REINSTALLED)
    notes: list[str] = []  # what its build decided, in words (also logs/testbed.log)
    build_requires: list[str] = []  # what building the project needs (the wheelhouse's contents)
