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
}
# C libraries: the wheels of h5py, netCDF4, cftime... bundle them.
BUNDLED = {"hdf5", "libnetcdf", "netcdf-fortran", "proj", "geos", "gdal", "libgdal", "eccodes", "udunits2", "zlib", "blas",
           "openblas", "mkl", "libblas", "liblapack"}
# conda packages that cannot come from PyPI: none there, or no wheel there carries the C library
# they load at import (which conda installs beside them); left out, their tests skip.
NOT_FROM_PYPI = {"cdms2": "on conda-forge only", "cfgrib": "needs the ecCodes C library, which no wheel of its time carries"}
SKIPPED = {"python", "pip"}  # the venv's own


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
