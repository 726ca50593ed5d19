"""Testbeds: the repository installed at one commit on top of an environment, as the official
harness's instance image is. Built once per (environment, commit, install steps) and cached beside
the environments:

    testbeds/KEY/tree        the checkout of the commit after the spec's pre-install edits and its
                             install step (generated files included: a setuptools_scm version
                             file, compiled extensions, egg-info)
    testbeds/KEY/python      the interpreter as a prefix of its own (its files linked, not
                             copied), chained onto the environment's packages: the install's own
                             changes (the editable link, a dependency only this commit needs) land
                             in its bin/ and site-packages, never in the shared environment
    testbeds/KEY/wheelhouse  the project's build requirements, so that installing it again in a
                             test run (as the harness's eval script does) works without the network
    testbeds/KEY/inputs.json what its install read and left behind (install_inputs.py,
                             testbed_reuse.py): another commit of its environment whose tree gives
                             the same inputs is made from it, with no install run; another commit
                             has the install run again on a copy of it

The install ran with the tree at /testbed, so what it wrote points there; a test run gets copies of
the tree (at /testbed) and of the prefix's bin/ and site-packages, in memory, and changes neither
(runner.py).

Why a prefix and not a venv: the harness's conda environment is a real prefix, and tools rely on
it. tox-current-env (sphinx's test command) links `.tox/py39/bin/python` to sys.executable; a link
to a venv's python starts the base interpreter without the venv (Python looks for pyvenv.cfg
beside the link), while a link to a prefix's python finds its prefix. The prefix sees the
environment's packages through a .pth file that adds the environment's site-packages after its
own, and carries the environment's console scripts with their first line pointing at its own
interpreter (`pytest`, `tox` then run with the testbed's packages). Its standard library is the
interpreter's own files, linked (read-only to the sandbox's users); a system interpreter (under
/usr, laid out by its distribution) gets a venv instead."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from magis_ray.actors.code.commit_packs import folder_name, submodules_at

from .artifacts import CACHED, TESTBEDS
from .compiler_cache import CompilerCache, compiler_cache
from .environments import (SYSTEM_PREFIXES, BuildSteps, Environment, EnvironmentBuildError, EnvironmentCache,
                           EnvironmentUnsupported, Recipe, folder_lock, held_by_system, locked_build, write_ready)
from .identities import build_identity, give_to
from .install_inputs import DIFFERENT, INCREMENTAL, SAME, InstallInputs, Trace, TreeState
from .testbed_reuse import (INPUTS_FILE, Donors, InstallRecord, copy_installed, copy_prefix, date_unchanged, distributions,
                            drop_untouched, requirements_may_differ, to_copy,
                            installed_files, link_folder, mentions_of, project_requirements,
                            installs_in_place, requested_extras)
from .era import (constraints_from_report, distribution_of, pins_in, project_requirements_for, requirement_name,
                  resolve_from_wheels, uv_binary, uv_variables)
from .installers import UvInstaller
from .sandbox import Mount
from .workspaces import WorkspaceError, borrow_objects, checkout, git_env, objects_of

TESTBED = "/testbed"
DEFAULT_BUILD_REQUIRES = ("setuptools>=40.8.0", "wheel")  # pip's own default for a project without pyproject.toml
PIP_INSTALL = re.compile(r"^\s*(?:python -m pip|pip) install (.*)$")
LAYOUT = 8  # what a cached testbed holds; another number builds anew
BUILT, REUSED, REINSTALLED = "built", "reused", "reinstalled"
TRACE = "trace"  # the install's trace (install_trace_hook.py), in the testbed's folder
TRACE_HOOK = "_magis_install_trace"
CYTHON_HOOK = "_magis_cython_cache"  # cython_cache_hook.py, beside the trace hook while an install runs
CYTHON_CACHE = "cython"  # under the node's cache root: the C Cython generated, by fingerprint
CONFLICT_SIGNS = ("ResolutionImpossible", "conflicting dependencies", "Could not find a version that satisfies")
# What a compiler leaves in the tree, which distutils dates against its sources
BUILT_OBJECTS = (".so", ".pyd", ".o", ".a", ".dylib")


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


class TestbedCache:
    """Testbeds beside the environments of `envs` (one cache folder, one lock discipline)."""

    __test__ = False

    def __init__(self, envs: EnvironmentCache, reuse: bool = True) -> None:
        self.envs = envs
        self.root = Path(envs.root) / "testbeds"
        self.reuse = reuse  # False: every testbed runs its own install (benchmarks compare the two)

    def get(self, recipe: TestbedRecipe, repo_path: str | os.PathLike, mirrors: str | os.PathLike | None = None) -> Testbed:
        """The testbed of `recipe`, built now unless this node has it. Raises what
        EnvironmentCache.get raises, and EnvironmentBuildError for a failed checkout or install."""
        env = self.envs.get(recipe.env)
        check_system_packages(recipe.system_packages)
        check_system_locales(recipe.system_locales)
        key = recipe.key(env.key)
        folder = self.root / key
        repo_path = Path(repo_path).resolve()
        if (folder / "ready.json").is_file():
            info, seconds, built_now = locked_build(folder, lambda: {})
        else:
            donors = Donors(self.root, recipe.group(env.key))
            # The group's builds one at a time: a commit waits for another's install, then reuses it.
            with donors.lock():
                info, seconds, built_now = locked_build(folder, lambda: self._build(recipe, env, folder, repo_path, mirrors,
                                                                                   donors if self.reuse else None),
                                                        shared=self.envs.shared(TESTBEDS, key, env.interpreter))
                if info["obtained"] != CACHED and info.get("made") in (BUILT, REINSTALLED) and (folder / INPUTS_FILE).is_file():
                    donors.add(key)
        self.envs.arrived(folder, info["obtained"])
        objects = info["objects"]
        if not Path(objects).is_dir():
            objects = self._borrow_anew(folder, repo_path, recipe.commit)
        return Testbed(env, key, str(folder), objects, seconds, built_now, recipe.label or env.label,
                       info.get("made", BUILT), info.get("made_from", ""), info["obtained"], self.compilers)

    def _borrow_anew(self, folder: Path, repo_path: Path, commit: str) -> str:
        """The testbed outlived the repository it was built from (a temporary clone, a moved
        folder): its tree borrows the commit's objects from `repo_path` from now on, rather than
        being built again."""
        with folder_lock(folder):
            info = json.loads((folder / "ready.json").read_text())
            if Path(info["objects"]).is_dir():  # another process borrowed anew while we waited
                return info["objects"]
            try:
                info["objects"] = borrow_objects(folder / "tree", repo_path, commit)
            except WorkspaceError as exc:
                raise EnvironmentBuildError("checkout", f"the testbed's repository is gone and {exc}") from None
            write_ready(folder, info)
            return info["objects"]

    def _build(self, recipe: TestbedRecipe, env: Environment, folder: Path, repo_path: Path, mirrors,
               donors: Donors | None, earlier: tuple[str, ...] = ()) -> dict:
        identity = build_identity()
        tree = folder / "tree"
        try:
            missing = checkout(repo_path, recipe.commit, tree)
        except WorkspaceError as exc:
            raise EnvironmentBuildError("checkout", str(exc)) from None
        notes = [*earlier, f"checked out {recipe.commit} of {recipe.repo}"]
        if missing:
            notes.append(f"the repository lacks {len(missing)} file(s) of the commit: {', '.join(missing[:5])}")
        notes += check_out_submodules(tree, recipe.commit, mirrors)
        (folder / "logs").mkdir()
        (folder / "wheelhouse").mkdir()
        (folder / TRACE).mkdir()
        give_to(folder, identity)
        self.envs.prepare_writable(folder, self._dependency_installer(env))
        steps = self._steps(env, folder, repo_path)
        if recipe.pre_install:
            steps.run("pre_install", pre_install_script(recipe.pre_install), network=False)
        before = TreeState.of(tree)
        verdict, donor, record, why = donors.match(before) if donors is not None else (DIFFERENT, None, None, "")
        made = {"objects": objects_of(repo_path), "label": recipe.label}
        if donor is not None and verdict == SAME:
            info = self._reuse(donor, record, folder, notes + [f"reused the install of testbed {donor.name}: {why}"])
            return {**info, **made, "made": REUSED, "made_from": donor.name}
        if donor is not None and verdict == DIFFERENT and not all(PIP_INSTALL.match(command) for command in recipe.install):
            # Only pip uninstalls what an earlier install of the project left before it installs
            # (`setup.py install` would leave the donor's modules beside this commit's).
            why, donor = f"{why}, and its install is not pip's", None
        if (donor is not None and verdict == DIFFERENT and record.distributions and record.inputs.compiled is not None
                and requirements_may_differ(record, before)):
            # Its dependencies would have to be the donor's: not worth an install that compiles to
            # find out. Without a compiler the install is quick, and what it leaves is checked.
            why, donor = f"{why}; the files that declare its requirements differ and the donor's prefix has its own", None
        if donor is not None:
            try:
                info = self._reinstall(recipe, env, steps, donor, record, before, folder, verdict == INCREMENTAL,
                                       notes + [f"installed again on a copy of testbed {donor.name}: {why}"])
                return {**info, **made, "made": REINSTALLED, "made_from": donor.name}
            except EnvironmentBuildError as exc:
                # When in doubt, build: the install in full, as if there were no donor.
                for child in list(folder.iterdir()):
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
                return self._build(recipe, env, folder, repo_path, mirrors, None,
                                   (f"installing again on a copy of testbed {donor.name} did not give its dependencies "
                                    f"({exc}); built in full",))
        if why:
            notes.append(f"its own install: {why}")
        info = self._install(recipe, env, steps, before, folder, notes)
        return {**info, **made, "made": BUILT}

    def _steps(self, env: Environment, folder: Path, repo_path: Path) -> BuildSteps:
        prefix, tree = folder / "python", folder / "tree"
        path = f"{prefix}/bin:{env.venv}/bin:/usr/local/bin:/usr/bin:/bin"
        variables = {"PATH": path, "PIP_CACHE_DIR": str(self.envs.pip_cache), "PIP_NO_INPUT": "1",
                     "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_PROGRESS_BAR": "off", **_index_variables()}
        mounts = [*env.mounts(), Mount(str(folder), str(folder), writable=True), Mount(str(tree), TESTBED, writable=True),
                  Mount(objects_of(repo_path), objects_of(repo_path)),
                  Mount(str(self.envs.pip_cache), str(self.envs.pip_cache), writable=True)]
        cython = self.cython_cache
        cython.mkdir(exist_ok=True)
        _writable_by_builds(cython)
        mounts.append(Mount(str(cython), str(cython), writable=True))
        compilers = self.compilers
        if compilers is not None:
            variables.update(compilers.variables(tree, path))
            mounts += compilers.mounts(prefix)
        uv = self._dependency_installer(env)
        if uv is not None:
            variables.update(uv_variables(uv.cache))
            mounts += [Mount(str(uv.cache), str(uv.cache), writable=True), Mount(uv_binary(), uv_binary())]
        return BuildSteps(self.envs.sandbox, folder, mounts, variables, cwd=TESTBED)

    @functools.cached_property
    def compilers(self) -> CompilerCache | None:
        """The node's compiler cache (compiler_cache.py), writable by the builds' uid; None without
        ccache. Made ready once: every testbed this cache hands out carries it."""
        compilers = compiler_cache(self.envs.root)
        if compilers is not None:
            _writable_by_builds(compilers.folder)
        return compilers

    @property
    def cython_cache(self) -> Path:
        """The node's cache of Cython's generated C (cython_cache_hook.py); an install's steps make it."""
        return self.envs.root / CYTHON_CACHE

    def _install(self, recipe: TestbedRecipe, env: Environment, steps: BuildSteps, before: TreeState, folder: Path,
                 notes: list[str]) -> dict:
        """The install in full, traced: the testbed may then be a donor."""
        identity = build_identity()
        tree, prefix = folder / "tree", folder / "python"
        constraints = {"PIP_CONSTRAINT": env.constraints} if env.constraints else {}
        if held_by_system(env.interpreter_prefix):
            # --copies: its python is a file of its own, so a link to it is still this venv's.
            steps.run("venv", f"{shlex.quote(env.interpreter)} -m venv --copies --without-pip {shlex.quote(str(prefix))}",
                      network=False)
        else:
            make_prefix(Path(env.interpreter_prefix), prefix)
        chain(env, prefix)
        # An install may add folders to the prefix itself (man/, share/ of a package's data
        # files), besides its scripts, headers and packages.
        if identity.drop:
            os.chown(prefix, identity.uid, identity.gid)
        for writable in (prefix / "bin", prefix / "include", Path(site_packages_of(prefix))):
            if writable.is_dir():
                give_own_files(writable, identity)
        started = time.time()
        used: list[str] = []
        unpinned: list[int] = []
        _start_hooks(folder, prefix, self.cython_cache)
        try:
            for number, command in enumerate(recipe.install, 1):
                dated = self._resolve_install(recipe, env, steps, folder, number, command, notes) or constraints
                added: list[str] = []
                if dated.get("PIP_CONSTRAINT", "").startswith(str(folder)):
                    used.append(Path(dated["PIP_CONSTRAINT"]).name)
                    added = self._add_dependencies(env, steps, folder, number, Path(dated["PIP_CONSTRAINT"]), notes)
                outcome = steps.run(f"install-{number}", pinned(command, dated), extra=unpinned_env(command, dated),
                                    required=False)
                if not outcome.ok and dated and any(sign in outcome.output + _log_text(steps) for sign in CONFLICT_SIGNS):
                    # The date's pins against what this commit asks for: the harness pinned nothing
                    # here, so neither do we on a second try (nor keep what uv added by them).
                    notes.append(f"install step {number} conflicts with the date's pins; installed without them")
                    used = [name for name in used if name != f"install-{number}-constraints.txt"]
                    if added:
                        steps.run(f"install-{number}-dependencies-removed", "python -m pip uninstall --yes "
                                  + " ".join(shlex.quote(requirement_name(pin)) for pin in added))
                    outcome = steps.run(f"install-{number}-unpinned", command, required=False)
                    unpinned.append(number)
                if not outcome.ok:
                    unmirrored = [note for note in notes if "no local mirror" in note]
                    if unmirrored:
                        # The harness's image clones its submodules from GitHub; here they come from a
                        # local mirror, and without one the install fails for want of the network.
                        raise EnvironmentBuildError(f"install-{number}", f"needs the internet: {'; '.join(unmirrored)} "
                                                    f"(put a clone in the repositories folder as OWNER__NAME)", outcome.output)
                    tail = " | ".join(outcome.output.strip().splitlines()[-3:])
                    raise EnvironmentBuildError(f"install-{number}", f"{command!r} exit {outcome.exit_code}: {tail[-400:]} "
                                                f"(log: {steps.logs})", outcome.output)
        finally:
            _stop_hooks(prefix)
        requires = build_requirements(tree)
        self._fetch_wheelhouse(steps, folder, requires, notes)
        self._record(recipe, folder, before, started, used, unpinned, requires, notes)
        return {"notes": notes, "build_requires": list(requires)}

    def _dependency_installer(self, env: Environment) -> UvInstaller | None:
        """uv, where it built the environment and compiles bytecode for its Python (3.7 and
        later): it installs a testbed's dependencies too. None: pip installs them."""
        installer = self.envs.installer(env.installer, env.python_version)
        return installer if isinstance(installer, UvInstaller) and installer.compiles_bytecode else None

    def _add_dependencies(self, env: Environment, steps: BuildSteps, folder: Path, number: int, resolution: Path,
                          notes: list[str]) -> list[str]:
        """What install step `number` adds to the environment, as the date's `resolution` pinned
        it, installed by uv before pip runs the step: pip then finds every requirement installed at
        its resolved version and installs the project alone, as the spec's command says, in a
        fraction of the time. Outside the install's trace: it reads nothing of the tree. Returns
        the pins installed ([] when uv does not serve, or failed and leaves them to pip)."""
        uv = self._dependency_installer(env)
        if uv is None:
            return []
        present = installed_names(env.venv)
        pins = [pin for pin in pins_in(resolution) if requirement_name(pin) not in present]
        if not pins:
            return []
        prefix = folder / "python"
        _stop_hooks(prefix)
        try:
            outcome = steps.run(f"install-{number}-dependencies", uv.add_command(prefix / "bin" / "python", pins),
                                required=False)
        finally:
            _start_hooks(folder, prefix, self.cython_cache)
        if not outcome.ok:
            notes.append(f"install step {number}: uv could not install its dependencies, so pip does")
            return []
        notes.append(f"install step {number}: its {len(pins)} dependencies installed by uv at the resolved versions")
        return pins

    def _fetch_wheelhouse(self, steps: BuildSteps, folder: Path, requires: tuple[str, ...], notes: list[str]) -> None:
        """The build requirements as the install's own pip just chose them for its build isolation
        (the index's newest for this Python, free of the environment's pins), so that a test run
        installing again offline builds with the same tools. The harness's eval script, online,
        gets the index's newest too."""
        fetched = steps.run("wheelhouse", "python -m pip download --quiet -d " + shlex.quote(str(folder / "wheelhouse"))
                            + " " + " ".join(shlex.quote(r) for r in requires), required=False)
        if not fetched.ok:
            notes.append("the build requirements could not be fetched: a test run cannot install the project again offline")

    def _record(self, recipe: TestbedRecipe, folder: Path, before: TreeState, started: float, constraints: list[str],
                unpinned_steps: list[int], requires: tuple[str, ...], notes: list[str]) -> InstallRecord:
        """What the install read and left behind (the testbed is a donor from now on), its log.
        Returns once the clock is past the second of the compiled objects it left in the tree."""
        tree, prefix = folder / "tree", folder / "python"
        inputs = InstallInputs.from_trace(Trace.read(folder / TRACE), before, (TESTBED, str(tree)), str(prefix),
                                          editable=installs_in_place(recipe.install))
        if inputs.refusal:
            notes.append(f"other commits install again: {inputs.refusal}")
        made, removed = installed_files(tree, before)
        record = InstallRecord(inputs, made, removed, mentions_of(folder), before.files, started, constraints,
                               project_requirements(folder, made, requested_extras(recipe.install)), distributions(prefix), list(requires),
                               unpinned_steps)
        record.write(folder)
        (folder / "logs" / "testbed.log").write_text("\n".join(notes) + "\n")
        readable_by_all(tree)  # test runs copy it as uids of their own
        wait_past_the_second_of([tree / path for path in made if path.endswith(BUILT_OBJECTS)])
        return record

    def _reuse(self, donor: Path, record: InstallRecord, folder: Path, notes: list[str]) -> dict:
        """The donor's install, copied: its prefix and wheelhouse linked, what it wrote into its
        tree copied."""
        copy_prefix(donor, folder, record.mentions, copy_own=False)
        copy_installed(donor / "tree", folder / "tree", record.made, record.removed)
        link_folder(donor / "wheelhouse", folder / "wheelhouse")
        for name in record.constraints:
            shutil.copy2(donor / name, folder / name)
        (folder / "logs" / "testbed.log").write_text("\n".join(notes) + "\n")
        readable_by_all(folder / "tree")
        return {"notes": notes, "build_requires": record.build_requires}

    def _reinstall(self, recipe: TestbedRecipe, env: Environment, steps: BuildSteps, donor: Path, record: InstallRecord,
                   before: TreeState, folder: Path, incremental: bool, notes: list[str]) -> dict:
        """The install run again, traced, on a copy of the donor's prefix (and, `incremental`, of
        what it wrote into its tree): EnvironmentBuildError when it fails or when the project's
        requirements or the installed distributions are not the donor's."""
        tree, prefix = folder / "tree", folder / "python"
        copy_prefix(donor, folder, record.mentions, copy_own=True)
        copied = to_copy(record, incremental)
        copy_installed(donor / "tree", tree, copied)
        if incremental and record.inputs.compiled is not None:
            date_unchanged(tree, before, record)
        for name in record.constraints:
            shutil.copy2(donor / name, folder / name)
        base = {"PIP_CONSTRAINT": env.constraints} if env.constraints else {}
        started = time.time()
        _start_hooks(folder, prefix, self.cython_cache)
        try:
            for number, command in enumerate(recipe.install, 1):
                own = f"install-{number}-constraints.txt"
                if number in record.unpinned_steps:  # the donor's pins conflicted: this commit's would too
                    dated = {}
                elif own in record.constraints:
                    dated = {"PIP_CONSTRAINT": str(folder / own)}
                else:
                    dated = base
                steps.run(f"install-{number}", pinned(command, dated), extra=unpinned_env(command, dated))
        finally:
            _stop_hooks(prefix)
        drop_untouched(donor / "tree", tree, copied)
        found = distributions(prefix)
        if found != record.distributions:
            changed = sorted(f"{n} {record.distributions.get(n, '-')} -> {found.get(n, '-')}"
                             for n in set(found) | set(record.distributions) if found.get(n) != record.distributions.get(n))
            raise EnvironmentBuildError("reinstall", f"the install changed the dependencies: {'; '.join(changed[:3])}")
        if record.distributions:
            # The donor's prefix holds dependencies of its own (what the environment lacks or has in
            # other versions), which this commit's requirements might not ask for: they must be the same.
            made, _ = installed_files(tree, before)
            requirements = project_requirements(folder, made, requested_extras(recipe.install))
            if requirements != record.requirements:
                changed = sorted(set(requirements) ^ set(record.requirements))
                raise EnvironmentBuildError("reinstall", f"the project's requirements differ: {'; '.join(changed[:3])}")
        requires = build_requirements(tree)
        if list(requires) == record.build_requires:
            link_folder(donor / "wheelhouse", folder / "wheelhouse")
        else:
            self._fetch_wheelhouse(steps, folder, requires, notes)
        self._record(recipe, folder, before, started, list(record.constraints), list(record.unpinned_steps), requires,
                     notes)
        return {"notes": notes, "build_requires": list(requires)}

    def _resolve_install(self, recipe: TestbedRecipe, env: Environment, steps: BuildSteps, folder: Path, number: int,
                         command: str, notes: list[str]) -> dict[str, str]:
        """What a pip install step may add (this commit's own dependencies), resolved as of the
        environment's date on top of its pins: {"PIP_CONSTRAINT": file}, or {} (the step then
        keeps to the environment's pins alone). uv resolves where it installs the testbed's
        dependencies (Python 3.7 and later) and reads the step's arguments; else a pip that knows
        dates, or the environment's own pip and uv from wheels (_resolve_install_from_wheels)."""
        match = PIP_INSTALL.match(command)
        when = env.uploaded_before
        if not (when and env.constraints and match):
            return {}
        uv = self._dependency_installer(env)
        wanted = uv_requirements(match.group(1), folder / "tree") if uv is not None else None
        if wanted is not None:
            lines, options = wanted
            resolve = self._uv_resolution(uv, env, steps, folder, number, lines, options)
        elif env.resolver:
            resolve = self._pip_resolution(env, steps, folder, number, match.group(1))
        else:
            return self._resolve_install_from_wheels(env, steps, folder, number, match.group(1), notes)
        # First held to the environment as it is: what the install adds comes in versions that
        # agree with it (seaborn's dev extras would otherwise pull NumPy 2 beside its pandas).
        pins = resolve(True)
        how = "with the environment as it is"
        if pins is None:
            # The install asks for other versions of what the environment has (sphinx 3's setup.py
            # wants Jinja2<3.0 where the spec pins 3.0.3): pip replaces those, as in the harness's
            # image, and only what the environment lacks keeps to the date.
            pins = resolve(False)
            if pins is None:
                notes.append(f"install step {number}: no resolution as of {when}; the environment's pins alone")
                return {}
            installed = installed_names(env.venv)
            pins = [pin for pin in pins if requirement_name(pin) not in installed]
            how = "replacing what the environment has where it asks for other versions"
        path = folder / f"install-{number}-constraints.txt"
        path.write_text("\n".join(pins) + "\n")
        by = "uv" if wanted is not None else "pip"
        notes.append(f"install step {number}: resolved as of {when} by {by}, {how} (constraints: {path.name})")
        return {"PIP_CONSTRAINT": str(path)}

    def _uv_resolution(self, uv: UvInstaller, env: Environment, steps: BuildSteps, folder: Path, number: int,
                       lines: list[str], options: tuple[str, ...]):
        """resolve(held) for _resolve_install: uv's pins of the step's requirements for the
        environment's interpreter, held to its constraints or not; None when there are none."""
        wanted, output = folder / f"install-{number}-wanted.in", folder / f"install-{number}-resolved.txt"
        wanted.write_text("\n".join(lines) + "\n")
        # The spec's exact pins as files, which carry no upload time, as pip's resolution has them:
        # their other versions keep to the date (the environment's own resolution frees a pinned
        # name from it altogether, where the pin leaves no other version to choose).
        exact = Path(env.exact_pins)
        if exact.is_dir() and any(distribution_of(entry.name) for entry in exact.iterdir()):
            options = (*options, "--find-links", str(exact))

        def resolve(held: bool) -> list[str] | None:
            output.unlink(missing_ok=True)
            command = uv.resolve_command(Path(env.venv), wanted, output, env.uploaded_before, (),
                                         env.constraints if held else "", options)
            outcome = steps.run(f"install-{number}-era" + ("" if held else "-free"), command, required=False)
            return pins_in(output) if outcome.ok and output.is_file() else None
        return resolve

    def _pip_resolution(self, env: Environment, steps: BuildSteps, folder: Path, number: int, arguments: str):
        """resolve(held) for _resolve_install by the environment's resolver, a pip that knows dates."""
        report = folder / f"install-{number}-report.json"
        base = (f"{shlex.quote(env.resolver)} -m pip install --dry-run --ignore-installed --quiet --report {report} "
                f"--uploaded-prior-to {env.uploaded_before} --find-links {shlex.quote(env.exact_pins)} ")

        def resolve(held: bool) -> list[str] | None:
            report.unlink(missing_ok=True)
            constraints = f"-c {shlex.quote(env.constraints)} " if held else ""
            outcome = steps.run(f"install-{number}-era" + ("" if held else "-free"), base + constraints + arguments,
                                required=False)
            return constraints_from_report(report) if outcome.ok and report.is_file() else None
        return resolve

    def _resolve_install_from_wheels(self, env: Environment, steps: BuildSteps, folder: Path, number: int, arguments: str,
                                     notes: list[str]) -> dict[str, str]:
        """_resolve_install for a Python too old for a resolver (below 3.9): the environment's own
        pip says what the install asks for (it builds the project's metadata, in the sandbox), and
        what that adds to the environment is resolved as of the date from wheels (era.py)."""
        when, report = env.uploaded_before, folder / f"install-{number}-asks.json"
        asked = steps.run(f"install-{number}-asks", f"python -m pip install --dry-run --quiet --report {report} "
                          f"-c {shlex.quote(env.constraints)} {arguments}", required=False)
        if not (asked.ok and report.is_file()):
            notes.append(f"install step {number}: no resolution as of {when} (this pip cannot report what it would "
                         "install); the environment's pins alone")
            return {}
        requirements = project_requirements_for(report, env.python_version)
        if not requirements:
            return {}
        dated = folder / f"install-{number}-dated.txt"
        ok, error = resolve_from_wheels(requirements, env.python_version, when, env.exact_pins, dated, self.envs.pip_cache,
                                        constraints=env.constraints)
        if not ok:
            notes.append(f"install step {number}: no resolution as of {when} from wheels; the environment's pins alone "
                         f"({error.strip().splitlines()[-1][:200] if error.strip() else 'no report'})")
            return {}
        pins = Path(env.constraints).read_text().splitlines()
        held = {requirement_name(pin) for pin in pins}
        pins += [pin for pin in pins_in(dated) if requirement_name(pin) not in held]
        path = folder / f"install-{number}-constraints.txt"
        path.write_text("\n".join(pins) + "\n")
        notes.append(f"install step {number}: resolved as of {when} for Python {env.python_version}, from wheels "
                     f"(constraints: {path.name})")
        return {"PIP_CONSTRAINT": str(path)}


def uv_requirements(arguments: str, tree: Path) -> tuple[list[str], tuple[str, ...]] | None:
    """A pip install step's arguments as what `uv pip compile` resolves: (requirement lines, uv's
    options), or None for an argument this does not know (pip then resolves). The project is named
    by the tree's own path, not /testbed: uv keeps a local project's metadata in its cache by path,
    and every testbed's tree is /testbed in its sandbox. Verbosity and pip's choice of build
    interface change nothing that is resolved."""
    try:
        words = shlex.split(arguments)
    except ValueError:
        return None

    def located(requirement: str) -> str:
        if requirement == "." or requirement.startswith((".[", "./")):
            return str(tree) + requirement[1:]
        return requirement

    lines: list[str] = []
    options: list[str] = []
    words.reverse()
    while words:
        word = words.pop()
        if word in ("-v", "--verbose", "-q", "--quiet", "--no-use-pep517"):
            continue
        if word == "--no-build-isolation":
            options.append(word)
        elif word in ("-e", "--editable") and words:
            lines.append(f"-e {located(words.pop())}")
        elif word.startswith("-"):
            return None
        else:
            lines.append(located(word))
    return (lines, tuple(options)) if lines else None


def wait_past_the_second_of(objects: list[Path]) -> None:
    """Return once the clock is past the whole second in which the newest of `objects` was written.
    distutils takes an extension as up to date unless one of its sources is newer in whole seconds:
    a test run that patched a C source within the second the testbed's install wrote the extension
    would have the eval script's install keep the unpatched one. The harness's image is always
    older than the patch."""
    newest = max((path.stat().st_mtime for path in objects if path.is_file()), default=None)
    if newest is not None:
        time.sleep(max(0.0, math.floor(newest) + 1 - time.time()))


def pre_install_script(commands: tuple[str, ...]) -> str:
    """The spec's pre-install commands as lines of one script, as the harness's setup script has
    them (`set -eux`, its bash's pipefail aside): it stops at the first that fails, a `cd` or a
    variable carries to the next line, and the log shows each line as it runs."""
    return "\n".join(("set -eux", *commands))


def pinned(command: str, constraints: dict[str, str]) -> str:
    """A pip install step with the constraints on its command line: there they bind what it
    installs and not the build dependencies pip gets for it in an environment of their own (the
    harness's builds were free; pylint 2.15 asks for setuptools~=62.6 to build)."""
    if constraints and PIP_INSTALL.match(command):
        return f"{command} -c {shlex.quote(constraints['PIP_CONSTRAINT'])}"
    return command


def unpinned_env(command: str, constraints: dict[str, str]) -> dict[str, str]:
    """Another step (a user's own setup command) gets the constraints from the environment."""
    return {} if PIP_INSTALL.match(command) else constraints


def _writable_by_builds(folder: Path) -> None:
    """A cache folder of the node's that the builds' uid writes into."""
    identity = build_identity()
    if identity.drop and folder.stat().st_uid != identity.uid:
        give_to(folder, identity)


def _start_hooks(folder: Path, prefix: Path, cython_cache: Path) -> None:
    """The install's hooks in the prefix while its install runs, each started by its .pth line
    (every Python process of the install reads the .pth files): the trace hook, with where to
    write and what to watch, and the hook that gives Cython the node's cache of generated C."""
    site = Path(site_packages_of(prefix))
    here = Path(__file__).parent
    shutil.copy(here / "install_trace_hook.py", site / f"{TRACE_HOOK}.py")
    (site / f"{TRACE_HOOK}.pth").write_text(f"import {TRACE_HOOK}; {TRACE_HOOK}.start({str(folder / TRACE)!r}, [{TESTBED!r}])\n")
    shutil.copy(here / "cython_cache_hook.py", site / f"{CYTHON_HOOK}.py")
    (site / f"{CYTHON_HOOK}.pth").write_text(f"import {CYTHON_HOOK}; {CYTHON_HOOK}.start({str(cython_cache)!r})\n")


def _stop_hooks(prefix: Path) -> None:
    """The prefix without the install's hooks: test runs and other testbeds never see them."""
    site = Path(site_packages_of(prefix))
    for hook in (TRACE_HOOK, CYTHON_HOOK):
        for path in (site / f"{hook}.py", site / f"{hook}.pth", *(site / "__pycache__").glob(f"{hook}.*")):
            path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        (site / "__pycache__").rmdir()  # only when the hooks' was all it held


def readable_by_all(root: Path) -> None:
    """Every file readable and every folder enterable by anyone (git writes some files 0600)."""
    for folder, folders, files in os.walk(root):
        for name in folders:
            path = os.path.join(folder, name)
            os.chmod(path, os.stat(path).st_mode | 0o555)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)


def _log_text(steps: BuildSteps) -> str:
    logs = sorted(steps.logs.glob("*.log"))
    return logs[-1].read_text(errors="replace")[-20000:] if logs else ""


def _index_variables() -> dict[str, str]:
    from .era import index_variables

    return index_variables()


def installed_names(venv: str) -> set[str]:
    """The distributions a virtual environment has (normalized names)."""
    site = next((Path(venv) / "lib").glob("python*/site-packages"), None)
    if site is None:
        return set()
    return {requirement_name(entry.name.split("-")[0]) for entry in site.iterdir()
            if entry.name.endswith((".dist-info", ".egg-info"))}


def give_own_files(folder: Path, identity) -> None:
    """The build's uid may write in `folder`: the folder and the files made for it become its own,
    never a file linked from the interpreter (its owner is the interpreter's, read-only)."""
    if not identity.drop:
        return
    os.chown(folder, identity.uid, identity.gid)
    for root, folders, files in os.walk(folder):
        for name in (*folders, *files):
            path = os.path.join(root, name)
            info = os.lstat(path)
            if os.path.islink(path) or info.st_nlink == 1 or os.path.isdir(path):
                os.chown(path, identity.uid, identity.gid, follow_symlinks=False)


def site_packages_of(prefix: Path) -> str:
    found = next((Path(prefix) / "lib").glob("python*/site-packages"), None)
    if found is None:
        raise EnvironmentBuildError("prefix", f"no site-packages in {prefix}")
    return str(found)


def make_prefix(base: Path, prefix: Path) -> None:
    """An interpreter prefix at `prefix` made of `base`'s files, hard-linked (copied across file
    systems): its binaries and links under bin/ and lib/, its standard library, and an empty
    site-packages. Scripts (pip, idle) and installed packages stay behind."""
    def place(source: Path, target: Path) -> None:
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
            return
        try:
            os.link(source, target)
        except OSError:  # another file system
            shutil.copy2(source, target)

    prefix.mkdir()
    for top in ("bin", "lib", "include"):
        origin = base / top
        if not origin.is_dir():
            continue
        for folder, folders, files in os.walk(origin):
            here = Path(folder)
            relative = here.relative_to(base)
            (prefix / relative).mkdir(exist_ok=True)
            if here.name == "site-packages" and here.parent.parent.name == "lib":
                folders[:] = []
                continue
            for name in folders:
                if (here / name).is_symlink():
                    place(here / name, prefix / relative / name)
            folders[:] = [name for name in folders if not (here / name).is_symlink()]
            for name in files:
                source = here / name
                if top == "bin" and not source.is_symlink() and source.read_bytes()[:2] == b"#!":
                    continue  # a script of the base's own (pip, idle): not this prefix's
                place(source, prefix / relative / name)


def chain(env: Environment, prefix: Path) -> None:
    """Make the interpreter at `prefix` see the environment's packages and carry its console scripts."""
    site = Path(site_packages_of(prefix))
    base = next((Path(env.venv) / "lib").glob("python*/site-packages"), None)
    if base is None:
        raise EnvironmentBuildError("prefix", f"no site-packages in {env.venv}")
    # site.addsitedir, not a bare path: the environment's own .pth files (editable installs,
    # setuptools' distutils shim) must be read too, and after the testbed's. sys.real_prefix (the
    # mark of a virtualenv) makes pip treat the environment's packages as outside this prefix:
    # it installs another version here rather than uninstall one there.
    # Not inside pip's isolated build environments (their PYTHONPATH names pip-build-env-*): their
    # sitecustomize hides this interpreter's own site-packages, but not what a .pth adds, so the
    # environment's setuptools would build in place of the one the project asks for (pylint 2.15
    # asks for setuptools~=62.6 and gets a setup.py develop; 3.0 for ~=66.1 and its metadata).
    (site / "_magis_environment.pth").write_text(
        f"import os, site, sys; 'pip-build-env-' in os.environ.get('PYTHONPATH', '') or "
        f"(site.addsitedir({str(base)!r}), setattr(sys, 'real_prefix', {env.interpreter_prefix!r}))\n")
    own_bin, base_bin = prefix / "bin", Path(env.venv) / "bin"
    own_python = next((own_bin / name for name in (f"python{env.python_version.rsplit('.', 1)[0]}", "python3", "python")
                       if (own_bin / name).exists()), own_bin / "python")
    for name in ("python", "python3"):
        if not (own_bin / name).exists() and not (own_bin / name).is_symlink():
            (own_bin / name).symlink_to(own_python.name)
    for script in base_bin.iterdir():
        target = own_bin / script.name
        if target.exists() or target.is_symlink() or script.is_symlink() or not script.is_file():
            continue
        head = script.read_bytes()[:512]
        if not head.startswith(b"#!") or str(base_bin).encode() not in head:
            continue
        lines = script.read_bytes().split(b"\n", 3)
        lines[:3] = [line.replace(f"{base_bin}/python".encode(), str(own_python).encode()) for line in lines[:3]]
        target.write_bytes(b"\n".join(lines))
        target.chmod(0o755)


def build_requirements(tree: Path) -> tuple[str, ...]:
    """What building the project needs: its pyproject.toml's [build-system] requires, else pip's
    default; and wheel, which setuptools asks for when it builds an editable install."""
    text = ""
    try:
        text = (tree / "pyproject.toml").read_text()
    except OSError:
        pass
    requires: list[str] = []
    if text:
        try:
            import tomllib

            requires = list(tomllib.loads(text).get("build-system", {}).get("requires", []))
        except (ImportError, ValueError):
            match = re.search(r"\[build-system\][^\[]*?requires\s*=\s*\[(.*?)\]", text, re.S)
            requires = re.findall(r"[\"']([^\"']+)[\"']", match.group(1)) if match else []
    if not requires:
        requires = list(DEFAULT_BUILD_REQUIRES)
    if not any(re.match(r"wheel\b", r) for r in requires):
        requires.append("wheel")
    return tuple(requires)


def check_out_submodules(tree: Path, commit: str, mirrors) -> list[str]:
    """Check out the commit's git submodules from local mirrors (MIRRORS/owner__name: --repos-dir,
    or on a node the copy the commits arrived in); the notes say which have none (the install may
    then need the internet)."""
    notes = []
    for module in submodules_at(tree, commit):
        mirror = Path(mirrors) / folder_name(module.mirror) if mirrors and module.mirror else None
        if mirror is None or not mirror.is_dir():
            notes.append(f"submodule {module.path} ({module.url}): no local mirror (looked for {mirror})")
            continue
        for args in (["config", f"submodule.{module.name}.url", str(mirror.resolve())],
                     ["-c", "protocol.file.allow=always", "submodule", "update", "--init", "--", module.path]):
            done = subprocess.run(["git", *args], cwd=tree, env=git_env(), capture_output=True, text=True)
            if done.returncode != 0:
                notes.append(f"submodule {module.path}: {' '.join(done.stderr.split())[:300]}")
                break
        else:
            notes.append(f"submodule {module.path}: checked out from the local mirror {mirror}")
    return notes


class SystemPackagesMissing(EnvironmentUnsupported):
    pass


def system_packages_of(command: str) -> tuple[str, ...] | None:
    """The Debian packages an `apt-get install` command installs (None: it is no such command)."""
    if "apt-get" not in command and "apt " not in command:
        return None
    found: list[str] = []
    for part in re.split(r"&&|;", command):
        words = shlex.split(part)
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):  # DEBIAN_FRONTEND=noninteractive apt-get ...
            words = words[1:]
        if "install" in words and words and words[0] in ("apt-get", "apt"):
            found += [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
    return tuple(found)


def missing_system_packages(packages: tuple[str, ...]) -> list[str]:
    """The Debian packages of `packages` that this machine has not installed, nor any installed
    package provides (Debian's libfreetype-dev provides the libfreetype6-dev a spec names)."""
    if not packages:
        return []
    listed = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Provides}\n"], capture_output=True, text=True)
    present: set[str] = set()
    for line in listed.stdout.splitlines():
        name, status, provides = (line.split("\t") + ["", ""])[:3]
        if "install ok installed" in status:
            present.add(name.split(":")[0])
            present.update(p.strip().split(" ")[0].split(":")[0] for p in provides.split(",") if p.strip())
    return [p for p in packages if p not in present]


def check_system_packages(packages: tuple[str, ...]) -> None:
    """SystemPackagesMissing naming the Debian packages of `packages` this machine lacks, and their install."""
    missing = missing_system_packages(packages)
    if missing:
        raise SystemPackagesMissing(f"needs system packages not on this machine: {', '.join(missing)} "
                                    f"(apt-get install {' '.join(missing)})")


def _locale_name(name: str) -> str:
    """`locale -a` spells en_US.UTF-8 as en_US.utf8."""
    return name.lower().replace("utf-8", "utf8")


def check_system_locales(locales: tuple[str, ...]) -> None:
    """SystemPackagesMissing naming the locales of `locales` this machine has not generated, and how to
    generate them: the spec generates them in its image (locale-gen); a test run sees this machine's."""
    if not locales:
        return
    listed = subprocess.run(["locale", "-a"], capture_output=True, text=True)
    present = {_locale_name(line.strip()) for line in listed.stdout.splitlines()}
    missing = [name for name in locales if _locale_name(name) not in present]
    if missing:
        names = " ".join(missing)
        patterns = [name.replace(".", "[.]") for name in missing]
        setup = "; ".join(f"sed -i '/^# *{pattern} /s/^# *//' /etc/locale.gen" for pattern in patterns)
        prefix = "apt-get install locales && " if missing_system_packages(("locales",)) else ""
        raise SystemPackagesMissing(f"needs the locale {names}, which this machine has not generated "
                                    f"({prefix}{setup} && locale-gen)")


__all__ = ["TestbedRecipe", "Testbed", "TestbedCache", "TESTBED", "chain", "make_prefix", "build_requirements", "system_packages_of",
           "missing_system_packages", "check_system_packages", "check_system_locales",
           "SYSTEM_PREFIXES"]
