"""The node's testbeds, beside its environments: looked up by key, built under the group's lock when
this node has none (build.py makes one), fetched from the cluster's artifact store where another
node built it, and kept within the cache's bound."""
from __future__ import annotations

import functools
import os
from pathlib import Path

import msgspec

from magis_ray.actors.code.workspaces import WorkspaceError, borrow_objects, objects_of
from magis_ray.actors.execution.environments import BuildFailed, BuildSteps, Environment, EnvironmentCache
from magis_ray.actors.execution.environments.dated import index_variables, uv_binary, uv_variables
from magis_ray.actors.execution.environments.installers import UvInstaller
from magis_ray.actors.execution.environments.system import check_system_locales, check_system_packages
from magis_ray.actors.execution.sandbox import Mount
from magis_ray.actors.execution.sharing import artifacts
from magis_ray.actors.execution.sharing.artifacts import CACHED, TESTBEDS
from magis_ray.actors.execution.sharing.builds import READY, folder_lock, locked_build, read_record, write_record

from .build import TestbedBuild
from .compiler_cache import CompilerCache, compiler_cache
from .prefix import writable_by_builds
from .recipe import BUILT, REINSTALLED, TESTBED, Testbed, TestbedRecipe, TestbedRecord
from .reuse import INPUTS_FILE, TestbedGroup

CYTHON_CACHE = "cython"  # under the node's cache root: the C Cython generated, by fingerprint


class TestbedCache:
    """Testbeds beside the environments of `envs` (one cache folder, one lock discipline)."""

    __test__ = False

    def __init__(self, envs: EnvironmentCache, reuse: bool = True) -> None:
        self.envs = envs
        self.root = Path(envs.root) / "testbeds"
        self.reuse = reuse  # False: every testbed runs its own install (benchmarks compare the two)

    def get(self, recipe: TestbedRecipe, repo_path: str | os.PathLike, mirrors: str | os.PathLike | None = None) -> Testbed:
        """The testbed of `recipe`, built now unless this node has it. Raises what
        EnvironmentCache.get raises, and BuildFailed for a failed checkout or install."""
        env = self.envs.get(recipe.env)
        check_system_packages(recipe.system_packages)
        check_system_locales(recipe.system_locales)
        key = recipe.key(env.key)
        folder = self.root / key
        repo_path = Path(repo_path).resolve()
        record, seconds = self._ready(folder), 0.0
        if record is None:
            group = TestbedGroup(self.root, recipe.group(env.key))
            # The group's builds one at a time: a commit waits for another's install, then reuses it.
            with group.lock():
                build = TestbedBuild(self, recipe, env, folder, repo_path, mirrors, group if self.reuse else None)
                record, seconds = locked_build(folder, build.make, TestbedRecord,
                                               shared=self.envs.shared(TESTBEDS, key, env.interpreter))
                if record.obtained != CACHED and record.made in (BUILT, REINSTALLED) and (folder / INPUTS_FILE).is_file():
                    group.add(key)
        self.envs.arrived(folder, record.obtained)
        objects = record.objects
        if not Path(objects).is_dir():
            objects = self._borrow_anew(folder, repo_path, recipe.commit)
        return Testbed(env, key, str(folder), objects, seconds, record.obtained == artifacts.BUILT, recipe.label or env.label,
                       record.made, record.made_from, record.obtained, self.compilers)

    @staticmethod
    def _ready(folder: Path) -> TestbedRecord | None:
        """The testbed's record where this node has it ready (None: it must be made), read under
        its lock: never half-written, never while it is being evicted."""
        if not (folder / READY).is_file():
            return None
        with folder_lock(folder):
            if not (folder / READY).is_file():
                return None
            return msgspec.structs.replace(read_record(folder, TestbedRecord), obtained=CACHED)

    def _borrow_anew(self, folder: Path, repo_path: Path, commit: str) -> str:
        """The testbed outlived the repository it was built from (a temporary clone, a moved
        folder): its tree borrows the commit's objects from `repo_path` from now on, rather than
        being built again."""
        with folder_lock(folder):
            record = read_record(folder, TestbedRecord)
            if Path(record.objects).is_dir():  # another process borrowed anew while we waited
                return record.objects
            try:
                objects = borrow_objects(folder / "tree", repo_path, commit)
            except WorkspaceError as exc:
                raise BuildFailed("checkout", f"the testbed's repository is gone and {exc}") from None
            write_record(folder, msgspec.structs.replace(record, objects=objects))
            return objects

    def steps_for(self, env: Environment, folder: Path, repo_path: Path, uv: UvInstaller | None) -> BuildSteps:
        """A testbed build's steps: in the sandbox as the builds' uid, the tree at /testbed, its
        interpreter prefix first on PATH, the node's pip, uv, Cython and compiler caches writable."""
        prefix, tree = folder / "python", folder / "tree"
        path = f"{prefix}/bin:{env.venv}/bin:/usr/local/bin:/usr/bin:/bin"
        pip_cache = self.envs.pip_cache
        variables = {"PATH": path, "PIP_CACHE_DIR": str(pip_cache), "PIP_NO_INPUT": "1",
                     "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_PROGRESS_BAR": "off", **index_variables()}
        mounts = [*env.mounts(), Mount(str(folder), str(folder), writable=True), Mount(str(tree), TESTBED, writable=True),
                  Mount(objects_of(repo_path), objects_of(repo_path)), Mount(str(pip_cache), str(pip_cache), writable=True)]
        cython = self.cython_cache
        cython.mkdir(exist_ok=True)
        writable_by_builds(cython)
        mounts.append(Mount(str(cython), str(cython), writable=True))
        compilers = self.compilers
        if compilers is not None:
            variables.update(compilers.variables(tree, path))
            mounts += compilers.mounts(prefix)
        if uv is not None:
            variables.update(uv_variables(uv.cache))
            mounts += [Mount(str(uv.cache), str(uv.cache), writable=True), Mount(uv_binary(), uv_binary())]
        return BuildSteps(self.envs.sandbox, folder, mounts, variables, cwd=TESTBED)

    def dependency_installer(self, env: Environment) -> UvInstaller | None:
        """uv, where it built the environment and compiles bytecode for its Python (3.7 and
        later): it installs a testbed's dependencies too. None: pip installs them."""
        installer = self.envs.installer(env.installer, env.python_version)
        return installer if isinstance(installer, UvInstaller) and installer.compiles_bytecode else None

    @functools.cached_property
    def compilers(self) -> CompilerCache | None:
        """The node's compiler cache (compiler_cache.py), writable by the builds' uid; None without
        ccache. Made ready once: every testbed this cache hands out carries it."""
        compilers = compiler_cache(self.envs.root)
        if compilers is not None:
            writable_by_builds(compilers.folder)
        return compilers

    @property
    def cython_cache(self) -> Path:
        """The node's cache of Cython's generated C (cython_cache_hook.py); an install's steps make it."""
        return self.envs.root / CYTHON_CACHE
