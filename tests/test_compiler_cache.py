"""Compiled code built once: a testbed install compiles through the node's ccache, so another
commit's testbed, in a folder of its own, recompiles only the C source that changed. On a real C
extension project (two .c files) in a real git repository, real environments, the real sandbox;
the counts are ccache's own. Once with headers from stable paths, once with numpy's headers from
pip's build isolation (numpy's wheel from the package index), as astropy 4 and later build, and
once with a .pyx on Python 3.6, as scikit-learn 0.2x builds (Cython's output from its cache). Each
time, a test run that installs again with a patched C source reads the cache without writing it."""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from gitfixtures import commit_files, make_repo
from magis_ray.actors.execution.testbeds import compiler_cache as compiler_cache_module
from magis_ray.actors.execution.testbeds.compiler_cache import COMPILER_LINKS, compiler_cache, compiler_front
from magis_ray.actors.execution.environments import EnvironmentCache, Recipe
from magis_ray.actors.execution.environments.interpreters import InterpreterMissing, find_python
from magis_ray.actors.execution.runner import TestRunner
from magis_ray.actors.execution.sandbox import GiB, Limits, BubblewrapSandbox, bwrap_path
from magis_ray.actors.execution.testbeds import BUILT, REINSTALLED, TestbedCache, TestbedRecipe

SETUP = """from setuptools import Extension, setup

setup(name="duo", version="1.0", packages=["duo"],
      ext_modules=[Extension("duo._fast", ["duo/one.c", "duo/two.c"])])
"""
PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
"""
ONE = """#include <Python.h>
long two_value(void);
static PyObject *value(PyObject *self, PyObject *args) { return PyLong_FromLong(two_value()); }
static PyMethodDef methods[] = {{"value", value, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fast", NULL, -1, methods};
PyMODINIT_FUNC PyInit__fast(void) { return PyModule_Create(&module); }
"""
TWO = """#include <Python.h>
long two_value(void) { return %d; }
"""
TEST = """from duo._fast import value


def test_value():
    assert value() == %d


if __name__ == "__main__":
    test_value()
    print("test_value passed")
"""
# Built in pip's build isolation with numpy among the build requirements: the compiler is given
# numpy's headers in a folder pip names at random at every install (/tmp/pip-build-env-<random>).
NUMPY_SETUP = """from numpy import get_include
from setuptools import Extension, setup

setup(name="duo", version="1.0", packages=["duo"],
      ext_modules=[Extension("duo._fast", ["duo/one.c", "duo/two.c"], include_dirs=[get_include()])])
"""
NUMPY_PYPROJECT = """[build-system]
requires = ["setuptools>=61", "numpy==1.26.4"]
build-backend = "setuptools.build_meta"
"""
NUMPY_HEADERS = """#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
"""
NUMPY_ONE = NUMPY_HEADERS + ONE.removeprefix("#include <Python.h>\n")
NUMPY_TWO = NUMPY_HEADERS + """long two_value(void) { return (long)(npy_intp)%d; }
"""


def counts(cache) -> dict[str, int]:
    found = cache.statistics()
    return {"hits": found.get("direct_cache_hit", 0) + found.get("preprocessed_cache_hit", 0),
            "misses": found.get("cache_miss", 0)}


compiling = pytest.mark.skipif(
    bwrap_path() is None or shutil.which("ccache") is None or not (COMPILER_LINKS / "gcc").exists()
    or shutil.which("gcc") is None,
    reason="needs bubblewrap (bwrap), ccache (apt-get install ccache) and a C compiler (gcc)")


@compiling
def test_a_changed_c_source_recompiles_only_that_file_and_the_verdict_holds(tmp_path):
    two_commits_recompile_only_the_changed_file(tmp_path, {"setup.py": SETUP, "pyproject.toml": PYPROJECT},
                                                ONE, TWO)


# slow: it runs the recompiling checks above with numpy in the build isolation, whose naming alike
# at every install is test_the_front_names_a_build_isolation_the_same_at_every_install_and_apart_from_other_ones
@pytest.mark.slow
@compiling
def test_a_build_isolations_headers_hit_the_cache_at_another_testbed(tmp_path):
    """numpy's headers come from a build isolation named at random by each install: the front names
    it the same at both, so one.c, which did not change, is still a hit."""
    two_commits_recompile_only_the_changed_file(tmp_path, {"setup.py": NUMPY_SETUP, "pyproject.toml": NUMPY_PYPROJECT},
                                                NUMPY_ONE, NUMPY_TWO)


def two_commits_recompile_only_the_changed_file(tmp_path: Path, build: dict[str, str], one: str, two: str) -> None:
    repo, base = make_repo(tmp_path / "repos" / "duo__duo", {
        **build, "duo/__init__.py": "", "duo/one.c": one, "duo/two.c": two % 1, "tests/test_duo.py": TEST % 1,
    })
    changed = commit_files(repo, {"duo/two.c": two % 2, "tests/test_duo.py": TEST % 2}, "two.c gives 2")
    testbeds = TestbedCache(EnvironmentCache(tmp_path / "envs"))
    env = Recipe(python="3.11", label="duo")
    recipes = [TestbedRecipe(env=env, repo="duo/duo", commit=commit, install=("python -m pip install -e .",), label="duo")
               for commit in (base, changed)]
    cache = testbeds.compilers
    runner = TestRunner(BubblewrapSandbox(), Limits(wall_seconds=300, memory_bytes=8 * GiB))

    first = testbeds.get(recipes[0], repo.workdir)
    assert first.made == BUILT
    assert counts(cache) == {"hits": 0, "misses": 2}  # one.c and two.c, compiled for the first time
    second = testbeds.get(recipes[1], repo.workdir)
    assert second.made == REINSTALLED and Path(second.path) != Path(first.path)
    # The install ran again in another folder: one.c came from the cache, two.c was compiled.
    assert counts(cache) == {"hits": 1, "misses": 3}

    # The verdict holds: each commit's own test passes on its testbed, the changed C included.
    for testbed, expected in ((first, 1), (second, 2)):
        run = runner.run(testbed, "python tests/test_duo.py", None)
        assert run.exit_code == 0 and "test_value passed" in run.output, (expected, run.output[-2000:])

    a_test_runs_install_reads_the_cache(runner, second, cache, two % 3, recipes[1].install[0])


def a_test_runs_install_reads_the_cache(runner: TestRunner, testbed, cache, two: str, install: str) -> None:
    """A test run that installs again, as the harness's eval script does, with a patch to two.c: its
    install reads the cache (the other source is a hit) and compiles the patched two.c, whose value
    the test then sees; the cache is left as it was, the patch's object in it nowhere."""
    kept = cache_contents(cache.folder), counts(cache)
    run = runner.run(testbed, "cp /.magis-inputs/two.c duo/two.c && cp /.magis-inputs/test_duo.py tests/ && "
                     f"CCACHE_LOGFILE=/tmp/ccache.log {install} && python tests/test_duo.py && "
                     "grep -o 'Result: [a-z_]*' /tmp/ccache.log", None,
                     inputs={"two.c": two, "test_duo.py": TEST % 3})
    assert run.exit_code == 0 and "test_value passed" in run.output, run.output[-3000:]
    outcomes = [found for found in re.findall(r"Result: ([a-z_]+)", run.output)
                if found in ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")]
    assert sorted(outcomes) == ["cache_miss", "direct_cache_hit"], run.output[-3000:]
    assert (cache_contents(cache.folder), counts(cache)) == kept


def cache_contents(folder: Path) -> dict[str, int]:
    """ccache's stored results (file -> size), its counters and temporary files left out."""
    return {str(path.relative_to(folder)): path.stat().st_size for path in folder.rglob("*")
            if path.is_file() and not path.name.startswith("stats") and "tmp" not in path.relative_to(folder).parts}


# As scikit-learn 0.2x builds: Python 3.6 (no audit hooks, so no install is ever reused), Cython
# from the environment, no build isolation, distutils giving the compiler the testbed's own
# python/include.
CYTHON_SETUP = """from Cython.Build import cythonize
from setuptools import Extension, setup

setup(name="duo", version="1.0", packages=["duo"],
      ext_modules=cythonize([Extension("duo._fast", ["duo/fast.pyx", "duo/two.c"])], language_level=3))
"""
CYTHON_ONE = """cdef extern long two_value()


def value():
    return two_value()
"""


def has_python(version: str) -> bool:
    try:
        find_python(version)
    except InterpreterMissing:
        return False
    return True


@compiling
@pytest.mark.skipif(not has_python("3.6"), reason="needs CPython 3.6 (pyenv install 3.6)")
def test_an_untraced_install_takes_cythons_output_and_the_compiles_from_the_caches(tmp_path):
    """On Python 3.6 the second commit's install runs again in full: Cython finds its C by
    fingerprint in the node's cache, and the compile of it, given the testbed's own python/include,
    is a ccache hit; only the changed two.c is compiled."""
    repo, base = make_repo(tmp_path / "repos" / "duo__duo", {
        "setup.py": CYTHON_SETUP, "duo/__init__.py": "", "duo/fast.pyx": CYTHON_ONE, "duo/two.c": TWO % 1,
        "tests/test_duo.py": TEST % 1,
    })
    changed = commit_files(repo, {"duo/two.c": TWO % 2, "tests/test_duo.py": TEST % 2}, "two.c gives 2")
    testbeds = TestbedCache(EnvironmentCache(tmp_path / "envs"))
    env = Recipe(python="3.6", packages=("Cython==0.29.37", "setuptools==59.6.0", "wheel==0.37.1"), label="duo")
    recipes = [TestbedRecipe(env=env, repo="duo/duo", commit=commit, install=(
        "python -m pip install -v --no-use-pep517 --no-build-isolation -e .",), label="duo") for commit in (base, changed)]
    cache = testbeds.compilers

    first = testbeds.get(recipes[0], repo.workdir)
    assert first.made == BUILT
    assert "Cythonizing duo/fast.pyx" in install_log(first)
    assert counts(cache) == {"hits": 0, "misses": 2}  # fast.c (Cython's) and two.c
    second = testbeds.get(recipes[1], repo.workdir)
    assert second.made == REINSTALLED and "no audit hooks" in " ".join(notes_of(second))
    log = install_log(second)
    assert "Found compiled duo/fast.pyx in cache" in log and "Cythonizing" not in log
    assert counts(cache) == {"hits": 1, "misses": 3}
    # Handed out only once the clock is past the second its extension was written in: distutils
    # compares whole seconds, and a run's patched two.c must be newer.
    newest = max(path.stat().st_mtime for path in Path(second.tree).rglob("*.so"))
    assert time.time() >= math.floor(newest) + 1

    runner = TestRunner(BubblewrapSandbox(), Limits(wall_seconds=300, memory_bytes=8 * GiB))
    for testbed, expected in ((first, 1), (second, 2)):
        run = runner.run(testbed, "python tests/test_duo.py", None)
        assert run.exit_code == 0 and "test_value passed" in run.output, (expected, run.output[-2000:])
    # The compiler is given the testbed's own python/include here: its relative name (../python)
    # is the same in the test run only where the run's copy of the tree has the tree's name too.
    a_test_runs_install_reads_the_cache(runner, second, cache, TWO % 3, recipes[1].install[0])


def install_log(testbed) -> str:
    return "".join(path.read_text(errors="replace") for path in sorted((Path(testbed.path) / "logs").glob("*-install-*.log")))


def notes_of(testbed) -> list[str]:
    return json.loads((Path(testbed.path) / "ready.json").read_text()).get("notes", [])


def test_without_ccache_installs_compile_as_before_with_one_notice(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no ccache on it
    monkeypatch.setattr(compiler_cache_module, "_told", False)
    assert compiler_cache(tmp_path / "envs") is None
    assert compiler_cache(tmp_path / "envs") is None
    told = capsys.readouterr()
    assert (told.out + told.err).count(compiler_cache_module.ABSENT) == 1
    assert not (tmp_path / "envs").exists()


def isolation(parent: Path, name: str, distributions: tuple[str, ...], layout: str = "overlay/") -> Path:
    """A build isolation as pip (layout overlay/) or uv (a virtual environment: layout "") makes it,
    with a header of its numpy."""
    site = parent / name / f"{layout}lib/python3.11/site-packages"
    for distribution in distributions:
        (site / f"{distribution}.dist-info").mkdir(parents=True)
        header = "numpy/include/npy.h,sha256=x,27\n" if distribution.startswith("numpy-") else ""
        (site / f"{distribution}.dist-info/RECORD").write_text(f"{distribution.split('-')[0]}/__init__.py,,\n{header}")
    (site / "numpy/include").mkdir(parents=True)
    (site / "numpy/include/npy.h").write_text("typedef long npy_intp;\n")
    return parent / name


def through_front(front: Path, compiler: str, *arguments: str, cwd: Path) -> str:
    done = subprocess.run([compiler, *arguments], cwd=cwd, capture_output=True, text=True, check=True,
                          env={"PATH": f"{front}:/usr/bin:/bin", "LC_ALL": "C"})
    return done.stdout + done.stderr


@pytest.mark.skipif(not (COMPILER_LINKS / "gcc").exists() or shutil.which("g++") is None,
                    reason="needs ccache's links (apt-get install ccache) and g++")
def test_the_front_names_a_build_isolation_the_same_at_every_install_and_apart_from_other_ones(tmp_path):
    front = compiler_front(tmp_path / "front")
    assert {link.name for link in COMPILER_LINKS.iterdir()} <= {entry.name for entry in front.iterdir()}
    (tmp_path / "source.c").write_text('#include "npy.h"\nnpy_intp value(void) { return 1; }\n')
    built = ("numpy-1.26.4", "setuptools-69.0.0")
    first, second = (isolation(tmp_path, name, built) for name in ("pip-build-env-ab12cd34", "pip-build-env-zz98yy76"))
    other = isolation(tmp_path, "pip-build-env-qq11ww22", ("numpy-1.21.6", "setuptools-69.0.0"))
    # A test run's install isolates other versions of the distributions without headers.
    other_tools = isolation(tmp_path, "pip-build-env-tt55uu66", ("numpy-1.26.4", "setuptools-82.0.0", "wheel-0.48.0"))
    uv = isolation(tmp_path / "uv/builds-v0", ".tmpAbC123", built, layout="")

    def line_markers(folder: Path, compiler: str = "gcc", layout: str = "overlay/") -> str:
        include = f"{folder}/{layout}lib/python3.11/site-packages/numpy/include"
        out = through_front(front, compiler, "-E", "-x", "c", f"-I{include}", "source.c", cwd=tmp_path)
        return "\n".join(line for line in out.splitlines() if line.startswith("#") and "npy.h" in line)

    # The preprocessor names the headers of two installs' isolations by the same stable name...
    named = line_markers(first)
    assert named and first.name not in named and "/build-env." in named
    assert line_markers(second, "x86_64-linux-gnu-g++") == named
    assert line_markers(other_tools) == named
    # ... while the two isolations are there at once (one install building two packages); another
    # isolation's distributions give another name, and uv's isolation one of its own too.
    assert line_markers(other) not in ("", named) and line_markers(other).count("/build-env.") == 1
    assert line_markers(uv, "cc", layout="") not in ("", named) and str(uv.parent) in line_markers(uv, "cc", layout="")

    # Every argument naming the isolation, in every form, is given its stable name; the rest as they were.
    commands = through_front(front, "gcc", "-###", f"-I{first}/overlay/a", "-I", f"{first}/overlay/b",
                             "-isystem", f"{first}/overlay/c", f"-L{first}/overlay/lib",
                             f"-Wl,-rpath,{first}/overlay/lib", "-Ilocal", "source.c", cwd=tmp_path)
    stable = re.search(r"(/\S*/build-env\.\d+)/overlay/a", commands).group(1)
    assert first.name not in commands and Path(stable).resolve() == first.resolve()
    for expected in (f"-I {stable}/overlay/a", f"-I {stable}/overlay/b", f"-isystem {stable}/overlay/c",
                     f"-L{stable}/overlay/lib", f"-rpath {stable}/overlay/lib", "-I local"):
        assert expected in commands, (expected, commands)

    # A link left by an earlier install (its isolation gone) is pointed at the isolation of now.
    shutil.rmtree(first)
    assert line_markers(second) == named and Path(stable).resolve() == second.resolve()
