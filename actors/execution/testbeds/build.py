"""One testbed being made, in its folder: a method per phase.

    build = TestbedBuild(cache, recipe, env, folder, repo_path, mirrors, group)
    record = build.make()

`make` checks the commit out (its submodules from local mirrors), makes the folder ready for the
builds' uid, runs the spec's pre-install edits, and then takes the cheapest way to the install
that gives the same testbed as the harness's image: the install of a donor of its group reused
(the same inputs), the install run again on a copy of a donor's prefix (other inputs), or the
install run in full. An install run again that does not give the donor's dependencies is started
over in full, once. What it decided is in `notes` (and logs/testbed.log); the record it returns is
what the cache writes as ready.json."""
from __future__ import annotations

import math
import os
import shlex
import shutil
import time
from pathlib import Path

from magis_ray.actors.code.workspaces import WorkspaceError, check_out_submodules, checkout, objects_of
from magis_ray.actors.execution.environments import BuildFailed, BuildSteps, Environment, held_by_system
from magis_ray.actors.execution.environments.dated import distribution_of, pins_in, project_requirements_for, requirement_name
from magis_ray.actors.execution.environments.installers import UvInstaller
from magis_ray.actors.execution.environments.resolver import DatedResolver
from magis_ray.actors.execution.sandbox.identities import build_identity, give_to

from .install_inputs import DIFFERENT, INCREMENTAL, SAME, InstallInputs, Trace, TreeState
from .install_steps import (CONFLICT_SIGNS, PIP_INSTALL, build_requirements, pinned, pre_install_script, unpinned_env,
                            uv_requirements, without_version_tags)
from .prefix import TRACE, chain, give_own_files, installed_names, make_prefix, readable_by_all, site_packages_of, start_hooks, stop_hooks
from .recipe import BUILT, REINSTALLED, REUSED, TESTBED, TestbedRecipe, TestbedRecord
from .reuse import (InstallRecord, TestbedGroup, copy_installed, copy_prefix, date_unchanged, distributions, drop_untouched,
                    installed_files, installs_in_place, link_folder, mentions_of, project_requirements, requested_extras,
                    requirements_may_differ, to_copy)

# What a compiler leaves in the tree, which distutils dates against its sources
BUILT_OBJECTS = (".so", ".pyd", ".o", ".a", ".dylib")
UNTAGGED_TREE = "untagged-tree"  # the tree as uv reads the project's requirements where setup.cfg tags the version


class TestbedBuild:
    """The making of one testbed of `recipe` on `env` in `folder`, from the repository at
    `repo_path` (its submodules' mirrors under `mirrors`); `group` offers donors (None: the
    install runs in full)."""

    __test__ = False

    def __init__(self, cache, recipe: TestbedRecipe, env: Environment, folder: Path, repo_path: Path, mirrors,
                 group: TestbedGroup | None) -> None:
        self.cache = cache  # the TestbedCache: the node's caches the build reads and writes
        self.recipe, self.env, self.folder = recipe, env, folder
        self.repo_path, self.mirrors, self.group = repo_path, mirrors, group
        self.tree, self.prefix, self.wheelhouse = folder / "tree", folder / "python", folder / "wheelhouse"
        self.notes: list[str] = []
        self.steps: BuildSteps | None = None
        self.uv = cache.dependency_installer(env)  # uv installs the testbed's dependencies (None: pip does)

    # --- the phases, in order -----------------------------------------------------------------

    def make(self) -> TestbedRecord:
        before = self.check_out()
        verdict, donor, record, why = self.group.match(before) if self.group is not None else (DIFFERENT, None, None, "")
        if donor is not None and verdict == SAME:
            self.notes.append(f"reused the install of testbed {donor.name}: {why}")
            return self.reuse(donor, record)
        if donor is not None and verdict == DIFFERENT and not all(PIP_INSTALL.match(c) for c in self.recipe.install):
            # Only pip uninstalls what an earlier install of the project left before it installs
            # (`setup.py install` would leave the donor's modules beside this commit's).
            why, donor = f"{why}, and its install is not pip's", None
        if (donor is not None and verdict == DIFFERENT and record.distributions and record.inputs.compiled is not None
                and requirements_may_differ(record, before)):
            # Its dependencies would have to be the donor's: not worth an install that compiles to
            # find out. Without a compiler the install is quick, and what it leaves is checked.
            why, donor = f"{why}; the files that declare its requirements differ and the donor's prefix has its own", None
        if donor is not None:
            self.notes.append(f"installed again on a copy of testbed {donor.name}: {why}")
            try:
                return self.reinstall(donor, record, before, incremental=verdict == INCREMENTAL)
            except BuildFailed as exc:
                # When in doubt, build: the install in full, as if there were no donor.
                before = self.start_over(f"installing again on a copy of testbed {donor.name} did not give its "
                                         f"dependencies ({exc}); built in full")
        elif why:
            self.notes.append(f"its own install: {why}")
        return self.install(before)

    def check_out(self) -> TreeState:
        """The commit in tree/ with its submodules, the folder ready for the builds' uid, and the
        spec's pre-install edits run: the tree's state before the install."""
        try:
            missing = checkout(self.repo_path, self.recipe.commit, self.tree)
        except WorkspaceError as exc:
            raise BuildFailed("checkout", str(exc)) from None
        self.notes.append(f"checked out {self.recipe.commit} of {self.recipe.repo}")
        if missing:
            self.notes.append(f"the repository lacks {len(missing)} file(s) of the commit: {', '.join(missing[:5])}")
        self.notes += check_out_submodules(self.tree, self.recipe.commit, self.mirrors)
        for name in ("logs", "wheelhouse", TRACE):
            (self.folder / name).mkdir()
        give_to(self.folder, build_identity())
        self.cache.envs.prepare_writable(self.folder, self.uv)
        self.steps = self.cache.steps_for(self.env, self.folder, self.repo_path, self.uv)
        if self.recipe.pre_install:
            self.steps.run("pre_install", pre_install_script(self.recipe.pre_install), network=False)
        return TreeState.of(self.tree)

    def start_over(self, why: str) -> TreeState:
        """The folder emptied and the commit checked out again, for the install in full; `why` leads
        the notes."""
        for child in list(self.folder.iterdir()):
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        self.notes = [why]
        return self.check_out()

    def reuse(self, donor: Path, record: InstallRecord) -> TestbedRecord:
        """The donor's install, copied: its prefix and wheelhouse linked, what it wrote into its
        tree copied."""
        copy_prefix(donor, self.folder, record.mentions, copy_own=False)
        copy_installed(donor / "tree", self.tree, record.made, record.removed)
        link_folder(donor / "wheelhouse", self.wheelhouse)
        for name in record.constraints:
            shutil.copy2(donor / name, self.folder / name)
        self._write_log()
        readable_by_all(self.tree)
        return self._record(REUSED, record.build_requires, made_from=donor.name)

    def reinstall(self, donor: Path, record: InstallRecord, before: TreeState, incremental: bool) -> TestbedRecord:
        """The install run again, traced, on a copy of the donor's prefix (and, `incremental`, of
        what it wrote into its tree): BuildFailed when it fails or when the project's requirements
        or the installed distributions are not the donor's."""
        copy_prefix(donor, self.folder, record.mentions, copy_own=True)
        copied = to_copy(record, incremental)
        copy_installed(donor / "tree", self.tree, copied)
        if incremental and record.inputs.compiled is not None:
            date_unchanged(self.tree, before, record)
        for name in record.constraints:
            shutil.copy2(donor / name, self.folder / name)
        base = {"PIP_CONSTRAINT": self.env.constraints} if self.env.constraints else {}
        started = time.time()
        start_hooks(self.folder, self.prefix, self.cache.cython_cache)
        try:
            for number, command in enumerate(self.recipe.install, 1):
                own = f"install-{number}-constraints.txt"
                if number in record.unpinned_steps:  # the donor's pins conflicted: this commit's would too
                    dated = {}
                elif own in record.constraints:
                    dated = {"PIP_CONSTRAINT": str(self.folder / own)}
                else:
                    dated = base
                self.steps.run(f"install-{number}", pinned(command, dated), extra=unpinned_env(command, dated))
        finally:
            stop_hooks(self.prefix)
        drop_untouched(donor / "tree", self.tree, copied)
        found = distributions(self.prefix)
        if found != record.distributions:
            changed = sorted(f"{n} {record.distributions.get(n, '-')} -> {found.get(n, '-')}"
                             for n in set(found) | set(record.distributions) if found.get(n) != record.distributions.get(n))
            raise BuildFailed("reinstall", f"the install changed the dependencies: {'; '.join(changed[:3])}")
        if record.distributions:
            # The donor's prefix holds dependencies of its own (what the environment lacks or has in
            # other versions), which this commit's requirements might not ask for: they must be the same.
            made, _ = installed_files(self.tree, before)
            requirements = project_requirements(self.folder, made, requested_extras(self.recipe.install))
            if requirements != record.requirements:
                changed = sorted(set(requirements) ^ set(record.requirements))
                raise BuildFailed("reinstall", f"the project's requirements differ: {'; '.join(changed[:3])}")
        requires = build_requirements(self.tree)
        if list(requires) == record.build_requires:
            link_folder(donor / "wheelhouse", self.wheelhouse)
        else:
            self.fetch_wheelhouse(requires)
        self.write_install_record(before, started, list(record.constraints), list(record.unpinned_steps), requires)
        return self._record(REINSTALLED, list(requires), made_from=donor.name)

    def install(self, before: TreeState) -> TestbedRecord:
        """The install in full, traced: the testbed may then be a donor."""
        identity = build_identity()
        env = self.env
        constraints = {"PIP_CONSTRAINT": env.constraints} if env.constraints else {}
        if held_by_system(env.interpreter_prefix):
            # --copies: its python is a file of its own, so a link to it is still this venv's.
            self.steps.run("venv", f"{shlex.quote(env.interpreter)} -m venv --copies --without-pip "
                           f"{shlex.quote(str(self.prefix))}", network=False)
        else:
            make_prefix(Path(env.interpreter_prefix), self.prefix)
        chain(env, self.prefix)
        # An install may add folders to the prefix itself (man/, share/ of a package's data
        # files), besides its scripts, headers and packages.
        if identity.drop:
            os.chown(self.prefix, identity.uid, identity.gid)
        for writable in (self.prefix / "bin", self.prefix / "include", Path(site_packages_of(self.prefix))):
            if writable.is_dir():
                give_own_files(writable, identity)
        started = time.time()
        used: list[str] = []
        unpinned: list[int] = []
        start_hooks(self.folder, self.prefix, self.cache.cython_cache)
        try:
            for number, command in enumerate(self.recipe.install, 1):
                dated = self.resolve_step(number, command) or constraints
                added: list[str] = []
                if dated.get("PIP_CONSTRAINT", "").startswith(str(self.folder)):
                    used.append(Path(dated["PIP_CONSTRAINT"]).name)
                    added = self.add_dependencies(number, Path(dated["PIP_CONSTRAINT"]))
                outcome = self.steps.run(f"install-{number}", pinned(command, dated), extra=unpinned_env(command, dated),
                                         required=False)
                if not outcome.ok and dated and any(sign in outcome.output + self._last_log() for sign in CONFLICT_SIGNS):
                    # The date's pins against what this commit asks for: the harness pinned nothing
                    # here, so neither do we on a second try (nor keep what uv added by them).
                    self.notes.append(f"install step {number} conflicts with the date's pins; installed without them")
                    used = [name for name in used if name != f"install-{number}-constraints.txt"]
                    if added:
                        self.steps.run(f"install-{number}-dependencies-removed", "python -m pip uninstall --yes "
                                       + " ".join(shlex.quote(requirement_name(pin)) for pin in added))
                    outcome = self.steps.run(f"install-{number}-unpinned", command, required=False)
                    unpinned.append(number)
                if not outcome.ok:
                    self._install_failed(number, command, outcome)
        finally:
            stop_hooks(self.prefix)
            shutil.rmtree(self.folder / UNTAGGED_TREE, ignore_errors=True)
        requires = build_requirements(self.tree)
        self.fetch_wheelhouse(requires)
        self.write_install_record(before, started, used, unpinned, requires)
        return self._record(BUILT, list(requires))

    # --- what the phases share ----------------------------------------------------------------

    def _install_failed(self, number: int, command: str, outcome) -> None:
        unmirrored = [note for note in self.notes if "no local mirror" in note]
        if unmirrored:
            # The harness's image clones its submodules from GitHub; here they come from a local
            # mirror, and without one the install fails for want of the network.
            raise BuildFailed(f"install-{number}", f"needs the internet: {'; '.join(unmirrored)} "
                              f"(put a clone in the repositories folder as OWNER__NAME)", outcome.output)
        tail = " | ".join(outcome.output.strip().splitlines()[-3:])
        raise BuildFailed(f"install-{number}", f"{command!r} exit {outcome.exit_code}: {tail[-400:]} "
                          f"(log: {self.steps.logs})", outcome.output)

    def resolve_step(self, number: int, command: str) -> dict[str, str]:
        """What a pip install step may add (this commit's own dependencies), resolved as of the
        environment's date on top of its pins: {"PIP_CONSTRAINT": file}, or {} (the step then
        keeps to the environment's pins alone). uv resolves where it installs the testbed's
        dependencies (Python 3.7 and later) and reads the step's arguments; else a pip that knows
        dates; else, for an older Python, the environment's own pip says what the step asks for and
        that is resolved from wheels (resolve_step_from_wheels)."""
        env = self.env
        match = PIP_INSTALL.match(command)
        when = env.uploaded_before
        if not (when and env.constraints and match):
            return {}
        wanted = uv_requirements(match.group(1), self.tree) if self.uv is not None else None
        if wanted is not None and any(line.startswith(str(self.tree)) for line in wanted[0]):
            wanted = uv_requirements(match.group(1), self.metadata_tree())
        if wanted is None and not env.resolver:
            return self.resolve_step_from_wheels(number, match.group(1))
        if wanted is not None:
            requested, options = wanted
            # The spec's exact pins as files, which carry no upload time, as pip's resolution has
            # them: their other versions keep to the date (the environment's own resolution frees a
            # pinned name from it altogether, where the pin leaves no other version to choose).
            exact = Path(env.exact_pins)
            if exact.is_dir() and any(distribution_of(entry.name) for entry in exact.iterdir()):
                options = (*options, "--find-links", str(exact))
        else:
            requested, options = shlex.split(match.group(1)), ()
        resolving = self._resolver(uv=self.uv if wanted is not None else None)

        def resolve(held: bool) -> list[str] | None:
            step = f"install-{number}-era" + ("" if held else "-free")
            return resolving.resolve(step, requested, constraints=env.constraints if held else "", options=options)[0]

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
                self.notes.append(f"install step {number}: no resolution as of {when}; the environment's pins alone")
                return {}
            installed = installed_names(env.venv)
            pins = [pin for pin in pins if requirement_name(pin) not in installed]
            how = "replacing what the environment has where it asks for other versions"
        path = self.folder / f"install-{number}-constraints.txt"
        path.write_text("\n".join(pins) + "\n")
        self.notes.append(f"install step {number}: resolved as of {when} by {resolving.by}, {how} (constraints: {path.name})")
        return {"PIP_CONSTRAINT": str(path)}

    def metadata_tree(self) -> Path:
        """Where uv reads the project's requirements: the tree, or, where its setup.cfg tags the
        version (install_steps.without_version_tags), a copy without the tags (its git too, for a
        version read from git), made once and removed when the install ends."""
        copy = self.folder / UNTAGGED_TREE
        if copy.is_dir():
            return copy
        try:
            untagged = without_version_tags((self.tree / "setup.cfg").read_text())
        except (OSError, UnicodeDecodeError):
            return self.tree
        if untagged is None:
            return self.tree
        try:
            shutil.copytree(self.tree, copy, symlinks=True)
            (copy / "setup.cfg").write_text(untagged)
            give_to(copy, build_identity())  # the build writes its egg-info there
        except (OSError, shutil.Error) as exc:
            shutil.rmtree(copy, ignore_errors=True)
            self.notes.append(f"setup.cfg tags the version, which uv cannot read, and no copy without the tags was made "
                              f"({exc}); the requirements are read from the tree")
            return self.tree
        self.notes.append("setup.cfg tags the version, which uv cannot read: the requirements are read from a copy "
                          "of the tree without the tags")
        return copy

    def resolve_step_from_wheels(self, number: int, arguments: str) -> dict[str, str]:
        """resolve_step for a Python too old for a resolver (below 3.9): the environment's own pip
        says what the install asks for (it builds the project's metadata, in the sandbox), and what
        that adds to the environment is resolved as of the date from wheels."""
        env = self.env
        when, report = env.uploaded_before, self.folder / f"install-{number}-asks.json"
        asked = self.steps.run(f"install-{number}-asks", f"python -m pip install --dry-run --quiet --report {report} "
                               f"-c {shlex.quote(env.constraints)} {arguments}", required=False)
        if not (asked.ok and report.is_file()):
            self.notes.append(f"install step {number}: no resolution as of {when} (this pip cannot report what it would "
                              "install); the environment's pins alone")
            return {}
        requirements = project_requirements_for(report, env.python_version)
        if not requirements:
            return {}
        resolved, error = self._resolver().resolve(f"install-{number}-dated", requirements, constraints=env.constraints)
        if resolved is None:
            self.notes.append(f"install step {number}: no resolution as of {when} from wheels; the environment's pins alone "
                              f"({error.strip().splitlines()[-1][:200] if error.strip() else 'no report'})")
            return {}
        pins = Path(env.constraints).read_text().splitlines()
        held = {requirement_name(pin) for pin in pins}
        pins += [pin for pin in resolved if requirement_name(pin) not in held]
        path = self.folder / f"install-{number}-constraints.txt"
        path.write_text("\n".join(pins) + "\n")
        self.notes.append(f"install step {number}: resolved as of {when} for Python {env.python_version}, from wheels "
                          f"(constraints: {path.name})")
        return {"PIP_CONSTRAINT": str(path)}

    def _resolver(self, uv: UvInstaller | None = None) -> DatedResolver:
        """The environment's resolver as of its date, for this testbed's steps."""
        env = self.env
        return DatedResolver(self.steps, self.folder, env.uploaded_before, env.python_version, Path(env.venv),
                             Path(env.exact_pins), self.cache.envs.pip_cache, uv=uv, pip=env.resolver)

    def add_dependencies(self, number: int, resolution: Path) -> list[str]:
        """What install step `number` adds to the environment, as the date's `resolution` pinned
        it, installed by uv before pip runs the step: pip then finds every requirement installed at
        its resolved version and installs the project alone, as the spec's command says, in a
        fraction of the time. Outside the install's trace: it reads nothing of the tree. Returns
        the pins installed ([] when uv does not serve, or failed and leaves them to pip)."""
        if self.uv is None:
            return []
        present = installed_names(self.env.venv)
        pins = [pin for pin in pins_in(resolution) if requirement_name(pin) not in present]
        if not pins:
            return []
        stop_hooks(self.prefix)
        try:
            outcome = self.steps.run(f"install-{number}-dependencies", self.uv.add_command(self.prefix / "bin" / "python", pins),
                                     required=False)
        finally:
            start_hooks(self.folder, self.prefix, self.cache.cython_cache)
        if not outcome.ok:
            self.notes.append(f"install step {number}: uv could not install its dependencies, so pip does")
            return []
        self.notes.append(f"install step {number}: its {len(pins)} dependencies installed by uv at the resolved versions")
        return pins

    def fetch_wheelhouse(self, requires: tuple[str, ...]) -> None:
        """The build requirements as the install's own pip just chose them for its build isolation
        (the index's newest for this Python, free of the environment's pins), so that a test run
        installing again offline builds with the same tools. The harness's eval script, online,
        gets the index's newest too."""
        fetched = self.steps.run("wheelhouse", "python -m pip download --quiet -d " + shlex.quote(str(self.wheelhouse))
                                 + " " + " ".join(shlex.quote(r) for r in requires), required=False)
        if not fetched.ok:
            self.notes.append("the build requirements could not be fetched: a test run cannot install the project again offline")

    def write_install_record(self, before: TreeState, started: float, constraints: list[str], unpinned_steps: list[int],
                             requires: tuple[str, ...]) -> InstallRecord:
        """What the install read and left behind (the testbed is a donor from now on), its log.
        Returns once the clock is past the second of the compiled objects it left in the tree."""
        inputs = InstallInputs.from_trace(Trace.read(self.folder / TRACE), before, (TESTBED, str(self.tree)), str(self.prefix),
                                          editable=installs_in_place(self.recipe.install))
        if inputs.refusal:
            self.notes.append(f"other commits install again: {inputs.refusal}")
        made, removed = installed_files(self.tree, before)
        record = InstallRecord(inputs=inputs, made=made, removed=removed, mentions=mentions_of(self.folder),
                               before=before.files, started=started, constraints=constraints,
                               requirements=project_requirements(self.folder, made, requested_extras(self.recipe.install)),
                               distributions=distributions(self.prefix), build_requires=list(requires),
                               unpinned_steps=unpinned_steps)
        record.write(self.folder)
        self._write_log()
        readable_by_all(self.tree)  # test runs copy it as uids of their own
        wait_past_the_second_of([self.tree / path for path in made if path.endswith(BUILT_OBJECTS)])
        return record

    def _write_log(self) -> None:
        (self.folder / "logs" / "testbed.log").write_text("\n".join(self.notes) + "\n")

    def _record(self, made: str, build_requires: list[str], made_from: str = "") -> TestbedRecord:
        return TestbedRecord(objects=objects_of(self.repo_path), label=self.recipe.label, made=made, made_from=made_from,
                             notes=list(self.notes), build_requires=build_requires)

    def _last_log(self) -> str:
        logs = sorted(self.steps.logs.glob("*.log"))
        return logs[-1].read_text(errors="replace")[-20000:] if logs else ""


def wait_past_the_second_of(objects: list[Path]) -> None:
    """Return once the clock is past the whole second in which the newest of `objects` was written.
    distutils takes an extension as up to date unless one of its sources is newer in whole seconds:
    a test run that patched a C source within the second the testbed's install wrote the extension
    would have the eval script's install keep the unpatched one. The harness's image is always
    older than the patch."""
    newest = max((path.stat().st_mtime for path in objects if path.is_file()), default=None)
    if newest is not None:
        time.sleep(max(0.0, math.floor(newest) + 1 - time.time()))
