"""Testbeds made from others of their environment: a commit whose install inputs are the same
reuses another's install (no install run), and a changed install input (setup.py, a requirement
pin, a C source) makes the install run at that commit. On a real fixture project (a C extension,
a pinned requirement, a console script), real environments, the real sandbox; and the trace's
reading and judging on its own."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from execfixtures import tree_fingerprint
from gitfixtures import commit_files, make_repo
from magis_ray.actors.execution.environments import EnvironmentCache, Recipe
from magis_ray.actors.execution.testbeds.install_inputs import DIFFERENT, INCREMENTAL, SAME, InstallInputs, Trace, TreeState
from magis_ray.actors.execution.runner import TestRunner
from magis_ray.actors.execution.sandbox import GiB, Limits, BubblewrapSandbox, bwrap_path
from magis_ray.actors.execution.testbeds.reuse import distributions, installs_in_place
from magis_ray.actors.execution.testbeds import BUILT, REINSTALLED, REUSED, TestbedCache, TestbedRecipe
from magis_ray.actors.swebench.grading_batch import GradeJob, next_job

SETUP = """from setuptools import Extension, setup

with open("requirements.txt") as f:
    requirements = [line.strip() for line in f if line.strip()]
about = {}
with open("widget/version.py") as f:
    exec(f.read(), about)

setup(name="widget", version=about["version"], packages=["widget"], install_requires=requirements,
      ext_modules=[Extension("widget._speed", ["widget/_speed.c"])],
      entry_points={"console_scripts": ["widget-cli = widget.core:main"]})
"""
SPEED = """#include <Python.h>
static PyObject *value(PyObject *self, PyObject *args) { return PyLong_FromLong(%d); }
static PyMethodDef methods[] = {{"value", value, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speed", NULL, -1, methods};
PyMODINIT_FUNC PyInit__speed(void) { return PyModule_Create(&module); }
"""
CORE = """def greeting():
    return %r


def main():
    from widget._speed import value
    print(greeting(), value())
"""
PYPROJECT = """[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
"""
CHECK = ("python -c 'import iniconfig, importlib.metadata as m; print(\"iniconfig\", m.version(\"iniconfig\"))' && "
         "widget-cli")


@pytest.fixture(scope="module")
def widget(tmp_path_factory):
    """The widget repository: a base commit and one commit per kind of change."""
    root = tmp_path_factory.mktemp("reuse")
    repo, base = make_repo(root / "repos" / "widget__widget", {
        "setup.py": SETUP, "pyproject.toml": PYPROJECT, "requirements.txt": "iniconfig==2.0.0\n",
        "widget/__init__.py": "", "widget/version.py": "version = '1.0'\n", "widget/core.py": CORE % "hello",
        "widget/_speed.c": SPEED % 1,
        "tests/test_core.py": "def test_greeting():\n    from widget.core import greeting\n    assert greeting()\n",
    })
    commits = {"base": base}
    commits["code"] = commit_files(repo, {"widget/core.py": CORE % "hi", "tests/test_more.py": "def test_x():\n    pass\n"},
                                   "code and tests only")
    commits["c source"] = commit_files(repo, {"widget/_speed.c": SPEED % 2}, "a C source")
    commits["version"] = commit_files(repo, {"widget/version.py": "version = '1.1'\n"}, "a version read by setup.py")
    commits["setup.py"] = commit_files(repo, {"setup.py": SETUP + "# the same setup\n"}, "setup.py")
    commits["pin"] = commit_files(repo, {"requirements.txt": "iniconfig==1.1.1\n"}, "a requirement pin")
    cache = TestbedCache(EnvironmentCache(root / "envs"))
    env = Recipe(python="3.11", label="widget")

    def recipe(name: str) -> TestbedRecipe:
        return TestbedRecipe(env=env, repo="widget/widget", commit=commits[name], install=("python -m pip install -e .",),
                             label="widget")

    return {"repo": Path(repo.workdir), "cache": cache, "recipe": recipe}


def check(testbed) -> str:
    run = TestRunner(BubblewrapSandbox(), Limits(wall_seconds=120, memory_bytes=8 * GiB)).run(testbed, CHECK, None)
    assert run.exit_code == 0, run.output[-3000:]
    return run.output.strip()


def install_logs(testbed) -> list[str]:
    return sorted(p.name for p in (Path(testbed.path) / "logs").glob("*install*"))


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")
def test_an_unchanged_install_is_reused_and_a_changed_input_installs_again(widget):
    cache, recipe, repo = widget["cache"], widget["recipe"], widget["repo"]
    # Two commits at once: the second waits for the first one's install, then reuses it.
    made = {}
    threads = [threading.Thread(target=lambda n=n: made.__setitem__(n, cache.get(recipe(n), repo))) for n in ("base", "code")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(t.made for t in made.values()) == [BUILT, REUSED]
    donor, reused = sorted(made.values(), key=lambda t: t.made)
    assert reused.made_from == donor.key and install_logs(reused) == [] and install_logs(donor)
    assert reused.build_seconds < donor.build_seconds
    # The reused testbed is its own commit's, with the donor's install: the editable link, the
    # compiled extension, the pinned requirement, a console script naming its own interpreter.
    expected = {"base": "hello", "code": "hi"}
    for name, testbed in made.items():
        assert check(testbed).splitlines()[-2:] == ["iniconfig 2.0.0", f"{expected[name]} 1"]
    script = (Path(reused.prefix) / "bin" / "widget-cli").read_text().splitlines()[0]
    assert script.startswith(f"#!{reused.prefix}/bin/python")
    before = tree_fingerprint(Path(donor.path))

    c_source = cache.get(recipe("c source"), repo)  # the extension compiled again, nothing else
    assert c_source.made == REINSTALLED and install_logs(c_source) == ["01-install-1.log"]
    assert "the same, but not the compiled sources" in (Path(c_source.path) / "logs" / "testbed.log").read_text()
    assert check(c_source).splitlines()[-1] == "hi 2"

    version = cache.get(recipe("version"), repo)  # another file setup.py reads: the install again, its version
    assert version.made == REINSTALLED and install_logs(version) == ["01-install-1.log"]
    assert check(version).splitlines()[-2:] == ["iniconfig 2.0.0", "hi 2"]
    assert "Version: 1.1" in next(Path(version.prefix).glob("lib/python3.11/site-packages/widget-1.1*/METADATA")).read_text()

    # setup.py, where requirements are declared, on a donor whose prefix has a dependency of its
    # own (iniconfig): the install in full, as if there were no donor.
    setup_py = cache.get(recipe("setup.py"), repo)
    assert setup_py.made == BUILT and install_logs(setup_py) == ["01-install-1.log"]
    assert "the files that declare its requirements differ" in (Path(setup_py.path) / "logs" / "testbed.log").read_text()
    assert check(setup_py).splitlines()[-2:] == ["iniconfig 2.0.0", "hi 2"]

    pin = cache.get(recipe("pin"), repo)  # other dependencies: the install in full
    assert pin.made == BUILT and "01-install-1.log" in install_logs(pin)
    assert check(pin).splitlines()[-2:] == ["iniconfig 1.1.1", "hi 2"]
    assert "requirements.txt differs; the files that declare its requirements differ" in (
        Path(pin.path) / "logs" / "testbed.log").read_text()
    assert tree_fingerprint(Path(donor.path)) == before  # nothing made from it changed it


PLAIN_SETUP = """from setuptools import setup

setup(name="plain", version="1.0", packages=["plain"], install_requires=%r)
"""


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")
def test_a_project_with_nothing_to_compile_installs_again_when_its_setup_py_changes(tmp_path):
    """A pure Python project whose setup.py asks for a version of iniconfig the environment's date
    (late 2022) does not have: no resolution as of the date, the environment's pins conflict, and
    its install runs unpinned, leaving iniconfig 2 of its own in the prefix. A commit that changes
    setup.py but not what it asks for installs again on a copy of that prefix, unpinned as the
    donor's was; one that asks for more installs again, finds other distributions, and is built."""
    asks = ["iniconfig>=2"]
    repo, base = make_repo(tmp_path / "repos" / "plain__plain", {
        "setup.py": PLAIN_SETUP % asks, "plain/__init__.py": "import iniconfig\n"})
    commits = {"base": base,
               "setup.py": commit_files(repo, {"setup.py": PLAIN_SETUP % asks + "# the same requirements\n"}, "setup.py"),
               "asks more": commit_files(repo, {"setup.py": PLAIN_SETUP % (asks + ["tomli"])}, "a requirement more")}
    cache = TestbedCache(EnvironmentCache(tmp_path / "envs"))
    env = Recipe(python="3.11", pip_packages=("iniconfig==1.1.1",), uploaded_before="2022-11-01T00:00:00Z", label="plain")

    def made(name: str):
        testbed = cache.get(TestbedRecipe(env=env, repo="plain/plain", commit=commits[name],
                                          install=("python -m pip install -e .",), label="plain"), Path(repo.workdir))
        found = distributions(Path(testbed.prefix))
        return testbed, found, (Path(testbed.path) / "logs" / "testbed.log").read_text()

    donor, found, notes = made("base")
    assert donor.made == BUILT and "conflicts with the date's pins; installed without them" in notes, notes
    assert found["iniconfig"].startswith("2."), found

    again, found, notes = made("setup.py")
    assert again.made == REINSTALLED and again.made_from == donor.key, notes
    assert install_logs(again) == ["01-install-1.log"]  # one install, unpinned as the donor's was
    assert found["iniconfig"].startswith("2.") and "tomli" not in found

    more, found, notes = made("asks more")
    assert more.made == BUILT and "did not give its dependencies" in notes and "tomli" in notes, notes
    assert "tomli" in found


def write_trace(folder: Path, pid: int, lines: list[str]) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{pid}.trace").write_text("".join(line + "\n" for line in lines))


def state(files: dict[str, str]) -> TreeState:
    return TreeState(dict(files))


BASE = {"setup.py": "s1", "pkg/__init__.py": "i1", "pkg/version.py": "v1", "pkg/core.py": "c1", "pkg/sub/__init__.py": "i2",
        "scripts/tool": "t1", "README": "r1", "src/fast.c": "f1"}


def test_the_trace_gives_what_the_install_reads_and_judges_other_trees(tmp_path):
    write_trace(tmp_path, 10, ["start\t3.9.18", "read\tsetup.py", "read\tpkg/__pycache__/version.cpython-39.pyc",
                               "list\tpkg", "listall\tscripts", "read\tpkg.egg-info/PKG-INFO", "write\tpkg.egg-info/PKG-INFO",
                               "run\t['uname', ['uname', '-rs'], '/testbed']"])
    write_trace(tmp_path, 11, ["start\t3.9.18", "run\t['/p/bin/python', ['/p/bin/python', '-c', 'x'], '/testbed']"])
    inputs = InstallInputs.from_trace(Trace.read(tmp_path), state(BASE), ("/testbed",), "/p")
    assert inputs.refusal == "" and not inputs.asks_git and inputs.compiled is None
    # The cached module stands for its source; a file it looked for and did not find counts too.
    assert inputs.files["pkg/version.py"] == "v1" and inputs.files["pkg.egg-info/PKG-INFO"] is None
    assert "pkg/__pycache__/version.cpython-39.pyc" not in inputs.files
    assert inputs.compare(state(BASE))[0] == SAME
    assert inputs.compare(state({**BASE, "pkg/core.py": "c2", "README": "r2", "pkg/new.py": "n"}))[0] == SAME
    assert inputs.compare(state({**BASE, "src/fast.c": "f2"}))[0] == SAME  # no compiler ran
    for changed, why in [({"pkg/version.py": "v2"}, "pkg/version.py differs"),
                         ({"setup.py": "s2"}, "setup.py differs"),
                         ({"pyproject.toml": "p"}, "pyproject.toml differs"),  # read or not, a build's own files count
                         ({"pkg/other/__init__.py": "o"}, "the folders in pkg differ"),  # a new package
                         ({"scripts/tool2": "t"}, "the files in scripts differ"),  # setup.py globbed there
                         ({"top.py": "x"}, "the files in the top folder differ")]:
        assert inputs.compare(state({**BASE, **changed})) == (DIFFERENT, why)


def test_an_install_in_place_counts_only_the_top_folders_the_tools_listed(tmp_path):
    # setuptools' manifest walks the whole tree; in place, only the top folders' structure counts.
    files = {**BASE, "tests/roots/a/conf.py": "a"}
    write_trace(tmp_path, 12, ["start\t3.9.18", "read\tsetup.py", "list\t.", "list\tpkg", "list\ttests", "list\ttests/roots"])
    in_place = InstallInputs.from_trace(Trace.read(tmp_path), state(files), ("/testbed",), "/p", editable=True)
    copied = InstallInputs.from_trace(Trace.read(tmp_path), state(files), ("/testbed",), "/p")
    new_root = state({**files, "tests/roots/b/conf.py": "b"})
    assert in_place.compare(new_root)[0] == SAME
    assert copied.compare(new_root) == (DIFFERENT, "the folders in tests/roots differ")
    for inputs in (in_place, copied):
        assert inputs.compare(state({**files, "pkg/other/__init__.py": "o"})) == (DIFFERENT, "the folders in pkg differ")
        assert inputs.compare(state({**files, "tests/unit/x.py": "x"})) == (DIFFERENT, "the folders in tests differ")
    assert installs_in_place(("python -m pip install -e .[test]",)) and installs_in_place(("python setup.py develop",))
    assert not installs_in_place(("python -m pip install .",)) and not installs_in_place(("python setup.py install",))


def test_the_version_from_git_or_a_compiler_installs_again_and_untraced_programs_are_never_the_same(tmp_path):
    write_trace(tmp_path / "git", 1, ["start\t3.10.13", "read\tsetup.py",
                                      "run\t['git', ['git', 'describe', '--tags', '--long'], '/testbed']"])
    versioned = InstallInputs.from_trace(Trace.read(tmp_path / "git"), state(BASE), ("/testbed",), "/p")
    assert versioned.compare(state(BASE))[0] == INCREMENTAL
    write_trace(tmp_path / "cc", 1, ["start\t3.10.13", "read\tsetup.py",
                                     "run\t['x86_64-linux-gnu-gcc', ['x86_64-linux-gnu-gcc', '-c', 'src/fast.c'], '/testbed']"])
    compiled = InstallInputs.from_trace(Trace.read(tmp_path / "cc"), state(BASE), ("/testbed",), "/p")
    assert compiled.compare(state(BASE))[0] == SAME
    assert compiled.compare(state({**BASE, "src/fast.c": "f2"}))[0] == INCREMENTAL
    assert compiled.compare(state({**BASE, "src/fast.h": "h"}))[0] == INCREMENTAL
    refused = {"make": ["start\t3.9.18", "run\t['make', ['make'], '/testbed']"],
               "old": ["untraced\t3.6.15"],
               "other": ["start\t3.9.18", "run\t['/usr/bin/python3', ['/usr/bin/python3', 'x.py'], '/testbed']"],
               "nosite": ["start\t3.9.18", "run\t['/p/bin/python', ['/p/bin/python', '-S', 'x.py'], '/testbed']"],
               "none": []}
    for name, lines in refused.items():
        write_trace(tmp_path / name, 1, lines)
        inputs = InstallInputs.from_trace(Trace.read(tmp_path / name), state(BASE), ("/testbed",), "/p")
        assert inputs.refusal and inputs.compare(state(BASE)) == (DIFFERENT, inputs.refusal), name


def test_the_next_job_is_one_of_an_environment_no_worker_builds():
    def job(repo: str, version: str, number: int) -> GradeJob:
        return GradeJob({"instance_id": f"{repo}-{number}", "repo": repo, "version": version}, "diff")

    todo = [job("a/a", "1", 1), job("a/a", "1", 2), job("b/b", "1", 3), job("a/a", "2", 4)]
    assert next_job(todo, []) == 0
    assert next_job(todo, [todo[0]]) == 2  # not a second one of a/a 1 while b/b waits
    assert next_job(todo, [todo[0], todo[2]]) == 3
    assert next_job(todo[:2], [todo[0]]) == 0  # nothing else waits: the queue's first


def test_what_an_install_run_again_must_leave_as_the_donor_left_it(tmp_path):
    """The distributions of a prefix but the project's own (an editable or local install), and the
    project's requirements that its install steps install (the base ones and the extras asked for)."""
    from magis_ray.actors.execution.testbeds.reuse import distributions, project_requirements, requested_extras

    site = tmp_path / "python" / "lib" / "python3.9" / "site-packages"
    for name in ("Jinja2-2.11.3.dist-info", "mpmath-1.3.0-py3.9.egg-info", "widget-1.0.dist-info", "widget-1.1.dist-info"):
        (site / name).mkdir(parents=True)
    (site / "widget-1.0.dist-info" / "direct_url.json").write_text('{"url": "file:///testbed", "dir_info": {"editable": true}}')
    (site / "widget-1.0.dist-info" / "METADATA").write_text(
        "Name: widget\nVersion: 1.0\nRequires-Dist: iniconfig==2.0.0\nRequires-Dist: pytest; extra == \"test\"\n"
        "Requires-Dist: sphinx; extra == \"docs\"\n\nA description\nRequires-Dist: not a header\n")
    (site / "widget-1.1.dist-info" / "direct_url.json").write_text('{"url": "https://example.org/widget.tar.gz"}')
    assert distributions(tmp_path / "python") == {"jinja2": "2.11.3", "mpmath": "1.3.0", "widget": "1.1"}
    (tmp_path / "tree" / "widget.egg-info").mkdir(parents=True)
    (tmp_path / "tree" / "widget.egg-info" / "requires.txt").write_text("numpy>=1.15\n\n[:python_version < \"3.8\"]\nimportlib-metadata\n\n[test]\npytest\n\n[docs]\nsphinx\n")
    made = ["widget.egg-info/requires.txt", "widget.egg-info/PKG-INFO"]
    found = project_requirements(tmp_path, made, requested_extras(("python -m pip install -e .[test] --verbose",)))
    assert found == sorted(["widget.egg-info/requires.txt [] numpy>=1.15", "widget.egg-info/requires.txt [] importlib-metadata",
                            "widget.egg-info/requires.txt [test] pytest", "widget: Requires-Dist: iniconfig==2.0.0",
                            "widget: Requires-Dist: pytest; extra == \"test\""])
    assert len(project_requirements(tmp_path, made, requested_extras(("python setup.py develop",)))) == 7  # all count
