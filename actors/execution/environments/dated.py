"""Packages as of a date: SWE-bench's test lists were made with the releases of their time, and
today's break older code and tests (NumPy 2 removed np.Inf; pytest 8 dropped nose-style setup();
pip 25 dropped `setup.py develop`, so an editable install no longer puts the checkout on sys.path).

An environment's packages, pip, setuptools and wheel included, are resolved once as of the date,
and the resolution becomes a constraints file for every later install step. An exact pin of the
spec (`name==version`) wins over the date: the flask spec pins setuptools==70.0.0, released after
it, so exact pins are offered to the resolver as local files, which carry no upload time.

Only the index counts: a resolution reads no pip configuration file and no local find-links
(this machine's, for one, hold today's wheels with no upload time, which the date would not stop)."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from magis_ray.events.settings import process_environment

# The testbeds' resolver: pip 26.0.1 is the last pip that knows --uploaded-prior-to and runs on
# Python 3.9; newer Pythons take the newest pip. Older Pythons are resolved by uv from this process
# for their version, from wheels only (resolve_from_wheels).
RESOLVER_FOR_39 = "pip==26.0.1"
TOOLS = ("pip", "setuptools", "wheel")
# A date no upload reaches (dated_arguments).
ANY_TIME = "2999-01-01T00:00:00Z"
PYPI = "https://pypi.org/simple"  # the index where the user's environment names none
# Distributions whose files PyPI dates later than their releases, with the date of that upload:
# atomicwrites' maintainer deleted it and uploaded every release again in July 2022. As of an
# earlier date none is offered, so a resolution falls back to the releases that did without it:
# pytest 3.5 for a commit of 2019 (pytest 3.6 to 5.2 need it), with pytest 3's test ids.
UPLOADED_AGAIN = {"atomicwrites": "2022-07-10T00:00:00Z"}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*$")
_EXACT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([A-Za-z0-9._+!-]+)\s*(;.*)?$")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str:
    """The distribution a requirement line names ("" for an option or a URL)."""
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line.split(" #")[0])
    return normalized(match.group(1)) if match and not line.lstrip().startswith("-") else ""


def exact_pins(requirements: str, packages: tuple[str, ...] = ()) -> list[str]:
    """The `name==version` requirements among a requirements file's lines and package arguments."""
    found = []
    for line in [*requirements.splitlines(), *packages]:
        match = _EXACT.match(line.split(" #")[0])
        if match and "*" not in match.group(3):
            found.append(f"{match.group(1)}=={match.group(3)}")
    return found


@dataclass(frozen=True)
class Stages:
    """An environment's install steps in their order (the requirements file, the packages, the pip
    packages): a later step's exact pin overrides an earlier step's requirement of the same name,
    as installing them one after the other does."""

    requirements: str = ""
    packages: tuple[str, ...] = ()
    pip_packages: tuple[str, ...] = ()

    def _later_pins(self, stage: int) -> set[str]:
        later = [("", self.packages), ("", self.pip_packages)][stage:]
        return {requirement_name(pin) for text, args in later for pin in exact_pins(text, args)}

    def final(self) -> tuple[list[str], list[str], list[str]]:
        """Each step's requirements without those a later step pins exactly."""
        requirements = [line for line in self.requirements.splitlines() if requirement_name(line) not in self._later_pins(0)]
        packages = [p for p in self.packages if requirement_name(p) not in self._later_pins(1)]
        return requirements, packages, list(self.pip_packages)

    def pins(self) -> list[str]:
        """The exact pins the finished environment has."""
        requirements, packages, pip_packages = self.final()
        return exact_pins("\n".join(requirements), (*packages, *pip_packages))

    def own_pins(self, stage: int) -> set[str]:
        """Names a step pins exactly itself: its constraints leave them to it."""
        text, args = [(self.requirements, ()), ("", self.packages), ("", self.pip_packages)][stage]
        return {requirement_name(pin) for pin in exact_pins(text, args)}


def constraints_without(pins: list[str], names: set[str]) -> list[str]:
    return [pin for pin in pins if requirement_name(pin) not in names]


def resolver_pip(version: tuple[int, int]) -> str | None:
    """What to install into a venv of Python `version` to resolve there (None: too old for any)."""
    if version >= (3, 10):
        return "pip"
    if version == (3, 9):
        return RESOLVER_FOR_39
    return None


def index_variables(environ: dict[str, str] | None = None) -> dict[str, str]:
    """pip's variables for a resolution or a build: the user's index (else PyPI's, named: a pip
    before 10 names pypi.python.org, which only redirects, and which a network that lets PyPI
    through may not know), certificates and proxies, no configuration file, no find-links."""
    environ = process_environment() if environ is None else environ
    kept = ("PIP_INDEX_URL", "PIP_CERT", "PIP_CLIENT_CERT", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES")
    found = {"PIP_INDEX_URL": PYPI, **{name: environ[name] for name in kept if environ.get(name)}}
    extra = " ".join(url for url in environ.get("PIP_EXTRA_INDEX_URL", "").split() if not url.startswith("file:"))
    if extra:
        found["PIP_EXTRA_INDEX_URL"] = extra
    for name in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        if environ.get(name):
            found[name] = environ[name]
    found["PIP_CONFIG_FILE"] = os.devnull
    return found


def pip_environment(pip_cache: str | os.PathLike) -> dict[str, str]:
    """This process's environment for a pip of its own: none of the caller's PIP_ settings but
    the index's (index_variables), and the cache given."""
    return {**{k: v for k, v in process_environment().items() if not k.startswith("PIP_")}, **index_variables(),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CACHE_DIR": str(pip_cache)}


def uv_binary() -> str:
    """The uv executable of the installed `uv` package (its real path, to show in a sandbox)."""
    from uv import find_uv_bin

    return os.path.realpath(find_uv_bin())


def uv_variables(cache: str | os.PathLike, environ: dict[str, str] | None = None) -> dict[str, str]:
    """uv's variables for a resolution or a build: the user's index, certificates and proxies as
    pip's (index_variables), no configuration file, no interpreter downloads, the cache given."""
    found = index_variables(environ)
    found.pop("PIP_CONFIG_FILE", None)
    uv = {"UV_CACHE_DIR": str(cache), "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
    for pip_name, uv_name in (("PIP_INDEX_URL", "UV_DEFAULT_INDEX"), ("PIP_EXTRA_INDEX_URL", "UV_INDEX"),
                              ("PIP_CERT", "SSL_CERT_FILE"), ("PIP_CLIENT_CERT", "SSL_CLIENT_CERT")):
        if found.get(pip_name):
            uv[uv_name] = found[pip_name]
    return {name: value for name, value in found.items() if not name.startswith("PIP_")} | uv


def dated_arguments(when: str, exact_names: set[str] | list[str]) -> list[str]:
    """uv's arguments for packages as of `when`, except the exact pins' names: all of their files
    are offered, whatever the date (the harness installed the pinned release with whichever of its
    files fitted); and a distribution uploaded again (UPLOADED_AGAIN) as of that upload."""
    if not when:
        return []
    names = sorted({normalized(name) for name in exact_names} - {""})
    again = [f"--exclude-newer-package={name}={date}" for name, date in sorted(UPLOADED_AGAIN.items())
             if name not in names and date > when]
    return ["--exclude-newer", when, *(f"--exclude-newer-package={name}={ANY_TIME}" for name in names), *again]


def resolve_from_wheels(requested: list[str], python_version: str, when: str, exact: str, output: str | os.PathLike,
                        cache: str | os.PathLike, constraints: str = "", timeout: float = 900.0) -> tuple[bool, str]:
    """Resolve `requested` as of `when` for a Python that no resolution can run in (too old for a
    pip that knows dates, or built by pip): uv from this process, for that Python's version and
    markers, from wheels only (so no package's code runs here), the exact pins of the folder
    `exact` offered whatever their date. Writes the pins to `output` (pins_in reads them).
    (True, "") or (False, uv's error's end)."""
    import subprocess
    import sys

    offered = {name for name in (distribution_of(path) for path in os.listdir(exact)) if name} if os.path.isdir(exact) else set()
    wanted = os.path.join(os.path.dirname(os.path.abspath(output)), os.path.basename(output) + ".in")
    with open(wanted, "w") as handle:
        handle.write("\n".join(requested) + "\n")
    command = [uv_binary(), "pip", "compile", "--python", sys.executable, "--python-version", python_version,
               "--only-binary", ":all:", *dated_arguments(when, offered), *(["--find-links", exact] if offered else []),
               *(["-c", str(constraints)] if constraints else []), "--no-header", "--no-annotate", "--quiet",
               "-o", str(output), wanted]
    environ = {k: v for k, v in process_environment().items() if not k.startswith(("PIP_", "UV_"))}
    done = subprocess.run(command, capture_output=True, text=True, env={**environ, **uv_variables(Path(cache) / "uv")},
                          timeout=timeout)
    return done.returncode == 0 and os.path.isfile(output), done.stderr[-1500:]


def pins_in(path: str | os.PathLike) -> list[str]:
    """`name==version` for every distribution of a `uv pip compile` output (those given by URL or
    path have no version to pin)."""
    with open(path) as handle:
        found = [line.strip() for line in handle if _PIN.match(line.strip())]
    return sorted(found, key=str.lower)


def distribution_of(filename: str) -> str:
    """The distribution a wheel's or an sdist's file name names ("" for another file)."""
    for ext in (".whl", ".tar.gz", ".zip", ".tar.bz2", ".egg"):
        if filename.endswith(ext):
            stem = filename[: -len(ext)]
            return normalized(stem.split("-")[0] if ext in (".whl", ".egg") else stem.rpartition("-")[0])
    return ""


def project_requirements_for(report_path: str | os.PathLike, python_version: str) -> list[str]:
    """What a `pip install --dry-run --report` was asked for, as requirements without markers for
    Python `python_version`: a local project's Requires-Dist (its markers decided, the extras asked
    for included), and a package from the index by its name."""
    from packaging.requirements import InvalidRequirement, Requirement

    with open(report_path) as handle:
        report = json.load(handle)
    target = {"python_version": ".".join(python_version.split(".")[:2]), "python_full_version": python_version}
    found: list[str] = []
    for item in report.get("install", []):
        if not item.get("requested"):
            continue
        extras = ["", *item.get("requested_extras", [])]
        if not item.get("download_info", {}).get("dir_info"):
            found.append(item["metadata"]["name"] + (f"[{','.join(extras[1:])}]" if extras[1:] else ""))
            continue
        for line in item.get("metadata", {}).get("requires_dist", []):
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if requirement.marker is None or any(requirement.marker.evaluate({**target, "extra": e}) for e in extras):
                requirement.marker = None
                found.append(str(requirement))
    return sorted(set(found), key=str.lower)


def _version_of(filename: str, name: str) -> str:
    """The version a distribution file's name carries ("" when it is not one of `name`'s)."""
    for ext in (".whl", ".tar.gz", ".zip", ".tar.bz2", ".egg"):
        if filename.endswith(ext):
            stem = filename[: -len(ext)]
            break
    else:
        return ""
    if ext == ".whl" or ext == ".egg":
        parts = stem.split("-")
        return parts[1] if len(parts) > 1 and normalized(parts[0]) == name else ""
    head, _, version = stem.rpartition("-")
    return version if normalized(head) == name else ""


def index_files(name: str, environ: dict[str, str] | None = None, timeout: float = 30.0) -> list[dict] | None:
    """The files the package index has of distribution `name`, from its JSON simple API (each with
    its filename and upload-time); None when the index has no such name or does not answer."""
    import urllib.request

    index = (environ or process_environment()).get("PIP_INDEX_URL", PYPI).rstrip("/")
    request = urllib.request.Request(f"{index}/{normalized(name)}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.load(answer).get("files", [])
    except (OSError, ValueError):
        return None


def on_the_index(name: str, environ: dict[str, str] | None = None) -> bool:
    """Whether the package index has a release of distribution `name`."""
    return bool(index_files(name, environ))


def released(pin: str, environ: dict[str, str] | None = None, timeout: float = 30.0) -> str:
    """When `name==version` was first uploaded to the index (ISO 8601), from the index's JSON
    simple API; "" when the index does not say."""
    name, _, version = pin.partition("==")
    files = index_files(name, environ, timeout) or []
    times = [f.get("upload-time", "") for f in files if _version_of(f.get("filename", ""), normalized(name)) == version.lower()]
    return min((t for t in times if t), default="")


def effective_date(date: str, pins: list[str], environ: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """The date an environment resolves at: `date`, or the release of its newest exact pin when
    that is later. The harness built it no earlier than that release, with what its dependencies
    were then (tox 4.16.0 of July 2024 needs a cachetools of February 2024)."""
    notes, latest = [], date
    for pin in pins:
        when = released(pin, environ)
        if when and when > latest:
            latest = when
            notes.append(f"{pin} was released {when}, after {date}: the environment resolves as of then")
    return latest, notes


def constraints_from_report(report_path: str | os.PathLike) -> list[str]:
    """`name==version` for every distribution a `pip install --dry-run --report` would install
    (those given by URL or path have no version to pin: the project itself, from its folder,
    whose `dir_info` is empty unless the install is editable)."""
    with open(report_path) as handle:
        report = json.load(handle)
    pins = []
    for item in report.get("install", []):
        info = item.get("download_info", {})
        if "dir_info" in info or "vcs_info" in info:
            continue
        pins.append(f"{item['metadata']['name']}=={item['metadata']['version']}")
    return sorted(pins, key=str.lower)
