"""The compiler cache of testbed installs: Debian's ccache, optional like bubblewrap is required.

Every testbed install runs with ccache's compiler links (/usr/lib/ccache: gcc, cc, g++, c++ and
their x86_64-linux-gnu- names) on its PATH, behind the compiler front (compiler_front.sh, under
the same names, first on the PATH), so whatever compiles through the PATH (distutils,
numpy.distutils, a Makefile, CMake) goes through the cache without a change of its flags: the
object files are those the compiler makes without it, but for the name of a build isolation's
folder. One cache for the node, under its cache root, shared by the testbeds of every repository,
written by the builds' uid.

Cache entries of two testbeds must match although each installs from a folder of its own
(TESTBEDS/KEY, whose python/include the compiler is given with -I on Pythons before 3.9): the
front gives ccache PWD = TESTBEDS/KEY/tree (MAGIS_TESTBED_TREE), the same directory as the
working directory /testbed (a bind mount of it), which ccache takes as the directory to make
paths relative to, and base_dir is the node's cache root. ccache keeps a relative path only where
it leads to the same file from the real working directory, so the testbed's prefix is mounted at
/python as well: ../python/include/python3.6m is then the same for every testbed. An
environment's paths stay absolute, the same for every testbed of the environment. The working
directory itself is not hashed (hash_dir off: only debug information names it) and the compiler
is known by its content, not its time stamp (a reinstalled gcc package hits the same entries
when it is the same).

A project built in pip's build isolation (pyproject.toml's build requirements, numpy's headers
among them: astropy 4 and later) compiles with -I/tmp/pip-build-env-<random>/overlay/...,
a folder named at random by every install; the name would reach the preprocessor's line markers
and ccache's manifests, and every source including those headers would miss. The front gives
ccache the compile with that folder named through a link whose name depends only on the
distributions the isolation holds (/tmp/build-env.KEY, in the sandbox's private /tmp; uv's
isolations likewise), so the same build requirements give the same names at every testbed.

A commit whose compiled sources did not change then compiles nothing: each compile is a hit.
Without ccache the installs compile as before (no front either), and one line says so.

A test run that installs again (the harness's eval script ends its set-up with the spec's
install, which for astropy 4.3 and later builds every extension anew in a temporary folder) reads
the cache and never writes it: the run holds the patch under test, and what it compiles must not
reach another testbed. Its copy of the tree is mounted at TESTBEDS/KEY/tree as well, so its
compiles name the paths the testbed's own install named: a source the patch did not touch is a
hit, one it changed is compiled."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from magis_ray.actors.execution.sandbox import Mount

COMPILER_LINKS = Path("/usr/lib/ccache")  # Debian's ccache package: links named after the compilers
CACHE_FOLDER = "ccache"  # under the node's cache root
FRONT_FOLDER = "compiler-front"  # under the node's cache root: the front's script and its links
FRONT_SCRIPT = Path(__file__).with_name("compiler_front.sh")
PREFIX_FROM_TESTBED = "/python"  # ../python from /testbed: the testbed's prefix, beside its tree
MAX_SIZE = "20G"  # scikit-learn and astropy at a few versions each fit many times over
READER_TEMP = "/tmp/ccache"  # a test run's ccache files of its own, in its private /tmp
ABSENT = "ccache is not installed (apt-get install ccache): testbed installs compile their C in full"

log = structlog.get_logger()
_told = False


@dataclass(frozen=True)
class CompilerCache:
    """ccache for the installs of the testbeds under one cache root."""

    folder: Path  # CCACHE_DIR
    base: Path  # CCACHE_BASEDIR: the node's cache root, which holds every testbed and environment
    front: Path  # the compiler front: its script and a link to it under each name of ccache's links

    def variables(self, tree: Path, path: str, read_only: bool = False) -> dict[str, str]:
        """An install's variables, for the testbed whose tree is `tree` (mounted at /testbed) and
        whose PATH is `path`; `read_only` for a test run's install."""
        found = {"PATH": f"{self.front}:{COMPILER_LINKS}:{path}", "MAGIS_TESTBED_TREE": str(tree),
                 "CCACHE_DIR": str(self.folder), "CCACHE_BASEDIR": str(self.base), "CCACHE_NOHASHDIR": "1",
                 "CCACHE_COMPILERCHECK": "content", "CCACHE_MAXSIZE": MAX_SIZE,
                 "CCACHE_TEMPDIR": str(self.folder / "tmp")}
        if read_only:
            found.update(CCACHE_READONLY="1", CCACHE_TEMPDIR=READER_TEMP)
        return found

    def mounts(self, prefix: Path, read_only: bool = False) -> list[Mount]:
        """The cache and the front; and the testbed's interpreter prefix (TESTBEDS/KEY/python) at
        /python too, where the relative path ccache makes of it (../python, from the tree) leads
        from the working directory /testbed: ccache keeps a relative path only if it does. The
        install makes the prefix: the steps before it (a spec's pre-install edits) run without."""
        return [Mount(str(self.folder), str(self.folder), writable=not read_only), Mount(str(self.front), str(self.front)),
                Mount(str(prefix), PREFIX_FROM_TESTBED, optional=True)]

    def statistics(self) -> dict[str, int]:
        """ccache's counters for this cache (--print-stats): direct_cache_hit,
        preprocessed_cache_hit, cache_miss, ..."""
        done = subprocess.run(["ccache", "--print-stats"], env={**os.environ, "CCACHE_DIR": str(self.folder)},
                              capture_output=True, text=True, check=True)
        found = {}
        for line in done.stdout.splitlines():
            name, _, value = line.partition("\t")
            if value.strip().isdigit():
                found[name] = int(value)
        return found


def compiler_cache(root: Path) -> CompilerCache | None:
    """The node's compiler cache under `root`, or None (with a one-line notice, once) when ccache
    is not installed."""
    global _told
    if shutil.which("ccache") is None or not (COMPILER_LINKS / "gcc").exists():
        if not _told:
            _told = True
            log.warning(ABSENT)
        return None
    folder = Path(root) / CACHE_FOLDER
    (folder / "tmp").mkdir(parents=True, exist_ok=True)
    return CompilerCache(folder, Path(root), compiler_front(Path(root) / FRONT_FOLDER))


def compiler_front(folder: Path) -> Path:
    """`folder` holding the front's script and, under each name of ccache's links, a link to it;
    brought up to date in place (by renames: installs running at the time see the old or the new)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / FRONT_SCRIPT.name
    wanted = FRONT_SCRIPT.read_bytes()

    def write_script(path: Path) -> None:
        path.write_bytes(wanted)
        path.chmod(0o755)

    if not script.is_file() or script.read_bytes() != wanted:
        _replace(script, write_script)
    for name in sorted(link.name for link in COMPILER_LINKS.iterdir()):
        link = folder / name
        if not (link.is_symlink() and os.readlink(link) == script.name):
            _replace(link, lambda path: path.symlink_to(script.name))
    return folder


def _replace(path: Path, make: Callable[[Path], object]) -> None:
    """`path` made anew by `make` beside it, then renamed over it."""
    new = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    new.unlink(missing_ok=True)
    make(new)
    os.replace(new, path)


__all__ = ["CompilerCache", "compiler_cache", "ABSENT", "COMPILER_LINKS"]
