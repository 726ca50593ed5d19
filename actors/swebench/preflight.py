"""What a machine has and lacks for what its user is about to do (a grading, or a batch with tests
on): the preflight `magis-ray doctor` prints, a row of checks per node.

What is asked (`Needs`) is read once, on the driver, from the dataset's SWE-bench specs and the
grading's settings: the Pythons, the Debian packages and the locales the specs need, the test runs
at once and their memory budget, the sandbox, the artifact store. Each node then checks itself
(`check_node`), with the execution layer's own functions, so that the doctor finds what a build or
a test run there would find: the sandbox, how a test run's memory budget is held, git, the
interpreters, the packages and locales, the free disk at its cache root and at the artifact store,
and its memory against the test runs it would take at once. On a cluster each node's checks are a
Ray task pinned to it (actors/runtime/remote.py, on_every_node)."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from magis_ray.events.settings import GradeSettings, node_settings, size_bytes

_GRADE = GradeSettings()
# The interpreters listed when no dataset says which are needed: those SWE-bench's specs name.
KNOWN_PYTHONS = ("2.7", "3.5", "3.6", "3.7", "3.8", "3.9", "3.10", "3.11", "3.12")


@dataclass(frozen=True)
class Needs:
    """What every node must have for the work at hand."""

    pythons: tuple[str, ...] = ()  # the Python versions the dataset's specs name (none: no dataset given)
    system_packages: tuple[str, ...] = ()  # Debian packages needed to build or to grade
    optional_packages: tuple[str, ...] = ()  # Debian packages only some tests use (those tests skip without them)
    locales: tuple[str, ...] = ()  # locales the specs generate in their images
    workers: int = _GRADE.workers  # test runs at once over the whole cluster
    memory_bytes: int = size_bytes(_GRADE.memory)  # each test run's memory budget (0: none)
    sandbox: str = _GRADE.sandbox
    artifact_store: str = ""
    pythons_given: dict[str, str] = field(default_factory=dict)  # --python: version ("" for any) -> path
    unknown: tuple[str, ...] = ()  # (repo, version) pairs the swebench package has no spec for, as "repo version"


@dataclass(frozen=True)
class Check:
    """One check on one node: its table cell, and what it found (for what is missing, how to get it)."""

    name: str
    state: Literal["ok", "missing", "note"]
    cell: str
    detail: str = ""


def needs_of(records: list[dict], **settings) -> Needs:
    """What the dataset's `records` need (their specs, read once for each repository and version),
    with the grading's `settings` (Needs' other fields). HarnessMissing without the swebench
    package."""
    from magis_ray.actors.code.commit_packs import folder_name
    from magis_ray.actors.execution.specs import NoSpec, instance_spec

    pythons, packages, optional, locales, unknown = {}, {}, {}, {}, []
    seen = set()
    for record in records:
        pair = (record.get("repo", ""), str(record.get("version", "")))
        if pair in seen:
            continue
        seen.add(pair)
        # no repository: it is read only for a requirements file, which none of these checks needs
        try:
            spec = instance_spec(record, Path(os.devnull) / folder_name(pair[0]))
        except NoSpec:
            unknown.append(" ".join(pair))
            continue
        pythons[spec.recipe.python] = None
        packages.update(dict.fromkeys(spec.testbed.system_packages))
        optional.update(dict.fromkeys(spec.optional_packages))
        locales.update(dict.fromkeys(spec.testbed.system_locales))
    return Needs(pythons=tuple(sorted(pythons, key=_version_key)), system_packages=tuple(packages),
                 optional_packages=tuple(p for p in optional if p not in packages), locales=tuple(locales),
                 unknown=tuple(unknown), **settings)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def check_node(needs: Needs, at_once: int) -> list[Check]:
    """This node's checks for `needs`, with `at_once` test runs here at once."""
    return [_sandbox(needs), _memory_control(), _git(), _pythons(needs), _system_packages(needs), _locales(needs),
            *_disks(needs), _memory(needs, at_once)]


def check_this_node(cores: float, needs: Needs) -> list[Check]:
    """A cluster node's checks: it takes at most its `cores` of the grading's test runs at once."""
    return check_node(needs, max(1, min(needs.workers, int(cores))))


def missing(rows: list[list[Check]]) -> bool:
    """Whether any node lacks something needed."""
    return any(check.state == "missing" for checks in rows for check in checks)


def _sandbox(needs: Needs) -> Check:
    from magis_ray.actors.execution.sandbox import SandboxUnavailable, bwrap_path, open_sandbox

    sandbox = open_sandbox(needs.sandbox)
    if not sandbox.isolated:
        return Check("sandbox", "note", needs.sandbox, f"--sandbox {needs.sandbox}: the tests run unconfined, as you")
    try:
        sandbox.check()
    except SandboxUnavailable as exc:
        return Check("sandbox", "missing", "MISSING", str(exc))
    return Check("sandbox", "ok", "bwrap", f"bubblewrap ({bwrap_path()}) makes a sandbox here: user namespaces work")


def _memory_control() -> Check:
    from magis_ray.actors.execution.sandbox.memory_budget import find_place

    place, why = find_place()
    if place is None:
        return Check("memory control", "ok", "watchdog", f"the memory watchdog holds each test run's budget ({why})")
    return Check("memory control", "ok", f"cgroup v{place.version}",
                 f"a cgroup under {place.folder} holds each test run's budget")


def _git() -> Check:
    path = shutil.which("git")
    if path is None:
        return Check("git", "missing", "MISSING", "git is not on PATH (apt-get install git)")
    return Check("git", "ok", "ok", f"git at {path}")


def _pythons(needs: Needs) -> Check:
    from magis_ray.actors.execution.environments.interpreters import InterpreterMissing, find_python

    wanted = needs.pythons or KNOWN_PYTHONS
    found, lacking = {}, {}
    for version in wanted:
        try:
            found[version] = find_python(version, needs.pythons_given)
        except InterpreterMissing as exc:
            lacking[version] = str(exc)
    where = "; ".join(f"{version}: {path}" for version, path in found.items())
    if not needs.pythons:
        return Check("pythons", "ok", " ".join(found) or "none", f"found {where or 'none'} (no dataset says which are needed)")
    if lacking:
        return Check("pythons", "missing", f"MISSING {' '.join(lacking)}",
                     "; ".join(lacking.values()) + (f" (found {where})" if found else ""))
    return Check("pythons", "ok", " ".join(found), f"every Python the dataset's specs need: {where}")


def _system_packages(needs: Needs) -> Check:
    from magis_ray.actors.execution.environments.system import SystemPackagesMissing, check_system_packages, missing_system_packages

    if not needs.system_packages and not needs.optional_packages:
        return Check("system packages", "ok", "-", "the dataset's specs need none" if needs.pythons else "no dataset given")
    optional = missing_system_packages(needs.optional_packages)
    only_some = (f"; only some tests use {', '.join(optional)}, which skip without them "
                 f"(apt-get install {' '.join(optional)})") if optional else ""
    try:
        check_system_packages(needs.system_packages)
    except SystemPackagesMissing as exc:
        return Check("system packages", "missing", f"MISSING {len(missing_system_packages(needs.system_packages))}",
                     f"a testbed of the dataset would be refused: it {exc}{only_some}")
    if optional:
        return Check("system packages", "note", f"{len(optional)} optional missing",
                     f"every package needed to build and grade is here{only_some}")
    return Check("system packages", "ok", "ok", f"all here: {', '.join((*needs.system_packages, *needs.optional_packages))}")


def _locales(needs: Needs) -> Check:
    from magis_ray.actors.execution.environments.system import SystemPackagesMissing, check_system_locales

    if not needs.locales:
        return Check("locales", "ok", "-", "the dataset's specs generate none" if needs.pythons else "no dataset given")
    try:
        check_system_locales(needs.locales)
    except SystemPackagesMissing as exc:
        return Check("locales", "missing", "MISSING", f"a testbed of the dataset would be refused: it {exc}")
    return Check("locales", "ok", "ok", f"generated here: {', '.join(needs.locales)}")


def _disks(needs: Needs) -> list[Check]:
    """The free disk under the node's cache root (against its bound, MAGIS_ENV_CACHE_GB, when one
    is set) and at the artifact store (a folder; a URL's space is not measured)."""
    from magis_ray.actors.execution.sharing.artifacts import ArtifactStoreUnusable, DirectoryBackend, open_artifact_store
    from magis_ray.actors.execution.sharing.cache_bound import GiB, entries
    from magis_ray.actors.execution.sandbox.capture import size_text
    from magis_ray.actors.execution.environments import default_cache_root

    root = default_cache_root()
    free = shutil.disk_usage(_existing(root)).free
    bound = int(node_settings().env_cache_gb * GiB)
    checks = []
    if bound:
        held = sum(entry.size for entry in entries(root)) if root.is_dir() else 0
        room = f"the cache at {root} holds {size_text(held)} of its bound {size_text(bound)} (MAGIS_ENV_CACHE_GB)"
        if free < bound - held:
            checks.append(Check("disk", "missing", f"MISSING: {size_text(free)} free",
                                f"{room}, but its disk has {size_text(free)} free: free more, or lower the bound"))
        else:
            checks.append(Check("disk", "ok", f"{size_text(free)} free", f"{room}; its disk has {size_text(free)} free"))
    else:
        checks.append(Check("disk", "ok", f"{size_text(free)} free",
                            f"{size_text(free)} free at the cache {root} (no bound: MAGIS_ENV_CACHE_GB sets one)"))
    if needs.artifact_store:
        try:
            store = open_artifact_store(needs.artifact_store)
        except ArtifactStoreUnusable as exc:
            checks.append(Check("artifact store", "missing", "MISSING", f"{needs.artifact_store}: {exc.reason}"))
        else:
            if isinstance(store.backend, DirectoryBackend):
                shared = shutil.disk_usage(store.backend.root).free
                checks.append(Check("artifact store", "ok", f"{size_text(shared)} free",
                                    f"{store.backend.root} is writable here, {size_text(shared)} free"))
            else:
                checks.append(Check("artifact store", "ok", "reached", f"{needs.artifact_store} opens here (its space is not measured)"))
    return checks


def _existing(path: Path) -> Path:
    """`path`, or its nearest folder that exists (a cache root not made yet)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _memory(needs: Needs, at_once: int) -> Check:
    from magis_ray.actors.execution.sandbox.capture import size_text
    from magis_ray.actors.execution.sandbox.memory_budget import host_memory, workers_within_memory

    host = host_memory()
    if not needs.memory_bytes:
        return Check("memory", "note", f"{size_text(host)}, no budget", "--memory 0: the test runs have no memory budget")
    fit, note = workers_within_memory(at_once, needs.memory_bytes)
    if not fit:
        return Check("memory", "missing", "MISSING", note)
    if fit < at_once:
        return Check("memory", "note", f"{fit} of {at_once} fit", note)
    runs = f"{at_once} test run{'s' if at_once != 1 else ''}"
    return Check("memory", "ok", f"{at_once} x {size_text(needs.memory_bytes)} fit",
                 f"{runs} at once at {size_text(needs.memory_bytes)} each fit in {size_text(host)}")
