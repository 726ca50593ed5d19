"""A conda environment.yml as pip packages, where the harness builds an environment with conda.

Conda-forge names that differ on PyPI are renamed; C libraries that conda installs on their own
are left out because the PyPI wheels of the packages that use them carry them; a package with no
PyPI equivalent at all is left out and named (its tests skip, as they do wherever it is missing).
Version specifications keep their meaning: conda's `name=1.2` (any 1.2.x) becomes `name==1.2.*`."""
from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

# conda-forge name -> PyPI name
RENAMED = {
    "matplotlib-base": "matplotlib",
    "iris": "scitools-iris",
    "dask-core": "dask",
    "netcdf4": "netCDF4",
    "pytables": "tables",
    "python-graphviz": "graphviz",
    "pytorch": "torch",
    "py-cpuinfo": "py-cpuinfo",
    "pseudonetcdf": "PseudoNetCDF",
    "pyqt": "PyQt5",
}
# C libraries: the wheels of h5py, netCDF4, cftime... bundle them.
BUNDLED = {"hdf5", "libnetcdf", "netcdf-fortran", "proj", "geos", "gdal", "libgdal", "eccodes", "udunits2", "zlib", "blas",
           "openblas", "mkl", "libblas", "liblapack"}
# conda packages that cannot come from PyPI: none there, or no wheel there carries the C library
# they load at import (which conda installs beside them); left out, their tests skip.
NOT_FROM_PYPI = {
    "cdms2": "on conda-forge only", "cfgrib": "needs the ecCodes C library, which no wheel of its time carries",
    # matplotlib's environment.yml: GUI toolkits for its interactive backends, whose tests skip
    # without them (and without a display, as in the harness's container)
    "gtk3": "a C library, on conda-forge only", "gtk4": "a C library, on conda-forge only",
    "pygobject": "PyPI has only its source, which needs the system's GObject introspection to build",
    "wxpython": "PyPI has no Linux wheel; its source takes an hour to build",
    # the Graphviz program (matplotlib's docs draw with it), not PyPI's Python binding of that name
    "graphviz": "the Graphviz program, Debian's graphviz package",
}
SKIPPED = {"python", "pip"}  # the venv's own
# PyPI's first wheel for a Python in a release line whose earlier releases conda-forge built for that
# Python itself: a conda pin of such an earlier release becomes this bugfix release of the same line,
# where pip would otherwise compile it (SciPy 1.5.2 needs Fortran and BLAS; scikit-learn 1.3's spec
# pins it, and NumPy 1.19.2, on Python 3.9).
FIRST_WHEEL = {("numpy", "3.9"): "1.19.3", ("scipy", "3.9"): "1.5.4"}
# conda's channels never built Cython 3 (July 2023) for the Pythons that had reached their end of
# life by then: an unpinned `cython` of a conda list on one of them is Cython 0.29 (scikit-learn
# 0.20-0.22's .pyx files need it; Cython 3 rejects them), where pip as of the era would take 3.0.
CONDA_NEVER_BUILT = {("cython", "3.5"): "<3", ("cython", "3.6"): "<3", ("cython", "3.7"): "<3"}


@dataclass(frozen=True)
class PipEquivalent:
    packages: tuple[str, ...]  # pip install arguments
    notes: tuple[str, ...]  # what was renamed or left out, for the build's log


def _name_and_spec(entry: str) -> tuple[str, str]:
    entry = entry.split("#")[0].strip()
    if "::" in entry:  # channel::name
        entry = entry.split("::", 1)[1]
    match = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", entry)
    if not match:
        return entry, ""
    name, spec = match.group(1), match.group(2).replace(" ", "")
    if re.fullmatch(r"=[^=<>!].*", spec):  # conda's single "=": that version, any patch level
        version = spec[1:]
        spec = f"=={version}" if "*" in version or version.count(".") >= 2 else f"=={version}.*"
    return name, spec


def pip_equivalent(yml_text: str) -> PipEquivalent:
    """The pip packages of an environment.yml's dependencies (its `pip:` list included)."""
    data = yaml.safe_load(yml_text) or {}
    packages: list[str] = []
    notes: list[str] = []
    for entry in data.get("dependencies") or []:
        if isinstance(entry, dict):
            for pip_entry in entry.get("pip") or []:
                packages.append(str(pip_entry).split("#")[0].strip())
            continue
        name, spec = _name_and_spec(str(entry))
        lowered = name.lower()
        if lowered in SKIPPED:
            continue
        if lowered in BUNDLED:
            notes.append(f"{name}: a C library the wheels carry (left out)")
            continue
        if lowered in NOT_FROM_PYPI:
            notes.append(f"{name}: {NOT_FROM_PYPI[lowered]} (left out; its tests skip)")
            continue
        if lowered in RENAMED:
            notes.append(f"{name} -> {RENAMED[lowered]}")
            name = RENAMED[lowered]
        packages.append(f"{name}{spec}")
    return PipEquivalent(tuple(p for p in packages if p), tuple(notes))


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def as_conda_has_it(requirement: str, python: str) -> str:
    """A package of a spec's conda list (already in pip's form) as conda would install it on
    `python`: bounded where conda never built newer releases for it, and an exact pin of a release
    PyPI has no wheel of for it moved to the first that has one."""
    bound = CONDA_NEVER_BUILT.get((requirement.lower(), python))
    return requirement + bound if bound else with_wheel(requirement, python)


def with_wheel(requirement: str, python: str) -> str:
    """`name==X.Y.Z` as the first release of its line with a wheel for `python` (FIRST_WHEEL), when
    X.Y.Z is older; any other requirement as it is."""
    match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\d+(?:\.\d+)*)", requirement)
    if not match:
        return requirement
    name, version = match.groups()
    first = FIRST_WHEEL.get((name.lower(), python))
    if first and _release(version) < _release(first) and _release(version)[:2] == _release(first)[:2]:
        return f"{name}=={first}"
    return requirement
