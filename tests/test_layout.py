"""The tree explains the system: every module imports in a fresh process, and the imports run
one way (roles know no Ray and no store; runtime knows roles; the cli knows the runtime; no
module imports one that imports it back). The layering is import-linter's contracts in
pyproject.toml ([tool.importlinter]), checked here over the real import graph, lazy imports
inside functions too."""
# relayout: skip (names the new packages themselves)
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import grimp
import pytest
from importlinter import api
from importlinter.cli import lint_imports
from importlinter.contracts.acyclic_siblings import AcyclicSiblingsContract
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.independence import IndependenceContract
from importlinter.contracts.layers import LayersContract

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
FOLDERS = ("actors", "events", "store", "cli")  # each installs as magis_ray.<folder>
CONTRACT_TYPES = {"layers": LayersContract, "forbidden": ForbiddenContract, "independence": IndependenceContract,
                  "acyclic_siblings": AcyclicSiblingsContract}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["magis_ray", *parts])


def modules() -> dict[str, Path]:
    return {module_name(p): p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))}


@pytest.fixture(scope="module")
def config() -> dict:
    return api.read_configuration(str(PYPROJECT))


@pytest.fixture(scope="module")
def graph(config) -> grimp.ImportGraph:
    """The import graph the contracts are checked on, as import-linter builds it."""
    return grimp.build_graph(*config["session_options"]["root_packages"], include_external_packages=True, cache_dir=None)


@pytest.fixture(scope="module")
def contracts(config) -> list:
    return [CONTRACT_TYPES[options["type"]](options["name"], config["session_options"], options)
            for options in config["contracts_options"]]


def test_the_graph_is_read_whole(graph, contracts):
    # guards the contracts against passing on an empty or misread graph
    assert set(modules()) <= graph.modules
    assert graph.direct_import_exists(importer="magis_ray.actors.runtime.remote", imported="magis_ray.actors.runtime.supervisor")  # inside a function
    assert graph.direct_import_exists(importer="magis_ray.actors.runtime.remote", imported="ray")
    assert graph.direct_import_exists(importer="magis_ray.actors.roles.developer", imported="magis_ray.actors.model.asking")
    assert [type(c) for c in contracts] == [LayersContract, IndependenceContract, ForbiddenContract, ForbiddenContract,
                                           LayersContract, ForbiddenContract, AcyclicSiblingsContract]


def test_imports_run_one_way():
    """lint-imports on this tree; on failure its report (which import breaks which contract) is in
    pytest's captured output."""
    assert lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True) == 0


# (importer, imported): an import that one of the contracts must refuse
WRONG = [
    ("magis_ray.events.schema", "magis_ray.store.base"),
    ("magis_ray.store.sqlite", "magis_ray.actors.runtime.journal"),
    ("magis_ray.store.sqlite", "ray"),
    ("magis_ray.actors.roles.custodian", "magis_ray.store.base"),
    ("magis_ray.actors.roles.custodian", "ray"),
    ("magis_ray.actors.roles.qa", "magis_ray.actors.runtime.team"),
    ("magis_ray.actors.model.asking", "magis_ray.actors.code.diffs"),
    ("magis_ray.actors.runtime.team", "magis_ray.actors.swebench.grading"),
    ("magis_ray.actors.swebench.instances", "magis_ray.cli.main"),
    ("magis_ray.actors.runtime.journal", "magis_ray.actors.runtime.replay"),  # replay imports journal: a cycle
    ("magis_ray.cli.errors", "magis_ray.cli.main"),  # main imports errors: a cycle
    # the execution layer's rooms
    ("magis_ray.actors.execution.sandbox.bubblewrap", "magis_ray.actors.execution.testbeds.recipe"),
    ("magis_ray.actors.execution.sandbox.process", "magis_ray.actors.execution.environments.recipe"),
    ("magis_ray.actors.execution.sandbox.base", "magis_ray.actors.execution.sharing.builds"),
    ("magis_ray.actors.execution.sharing.builds", "magis_ray.actors.execution.testbeds.build"),
    ("magis_ray.actors.execution.sharing.artifacts", "magis_ray.actors.execution.environments.cache"),
    ("magis_ray.actors.execution.sharing.cache_bound", "magis_ray.actors.execution.sandbox.limits"),
    ("magis_ray.actors.execution.environments.cache", "magis_ray.actors.execution.testbeds.cache"),
    ("magis_ray.actors.execution.testbeds.build", "magis_ray.actors.execution.runner"),
    ("magis_ray.actors.execution.testbeds.cache", "magis_ray.actors.execution.specs"),
    # what a project declares is read from its files alone
    ("magis_ray.actors.execution.environments.declared.reader", "magis_ray.actors.execution.sandbox.process"),
    ("magis_ray.actors.execution.environments.declared.files", "magis_ray.actors.execution.sharing.builds"),
    ("magis_ray.actors.execution.environments.declared.tox", "magis_ray.actors.execution.testbeds.recipe"),
]


@pytest.mark.parametrize("importer,imported", WRONG, ids=[f"{a} -> {b}" for a, b in WRONG])
def test_the_contracts_refuse_a_wrong_import(graph, contracts, importer, imported):
    wrong = copy.deepcopy(graph)
    wrong.add_import(importer=importer, imported=imported)
    broken = [contract.name for contract in contracts if not contract.check(wrong, verbose=False).kept]
    assert broken, f"no contract refuses {importer} -> {imported}"


def test_ray_is_applied_in_one_place():
    applied = [p.relative_to(ROOT).as_posix() for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
               if "ray.remote(" in p.read_text(encoding="utf-8")]
    assert applied == ["actors/runtime/remote.py"]


def test_actors_holds_only_sub_packages():
    loose = sorted(p.name for p in (ROOT / "actors").iterdir() if p.is_file() and p.name != "__init__.py")
    assert loose == []


def test_every_module_imports_in_a_fresh_process():
    names = sorted(modules())
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\nprint(len(sys.argv) - 1)"
    done = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(len(names))


def test_every_folder_that_installs_is_a_declared_package():
    """setuptools treats every folder under a package as a package: one holding only data (the
    inspector's templates and static files) must be declared too, or `pip install` warns that it is
    "absent from the `packages` configuration". Every file it holds must match its package-data."""
    import fnmatch
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    declared, data = set(config["packages"]), config["package-data"]
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_dir() or path.name == "__pycache__":
                continue
            package = ".".join(["magis_ray", *path.relative_to(ROOT).parts])
            assert package in declared, f"{package} is installed but not in pyproject's packages"
            for file in path.iterdir():
                if file.is_file() and file.suffix not in (".py", ".pyc"):
                    assert any(fnmatch.fnmatch(file.name, pattern) for pattern in data.get(package, [])), \
                        f"{file.relative_to(ROOT)} is not in {package}'s package-data"


HARNESS_ADAPTER = "magis_ray.actors.code.swebench_harness"


def test_only_the_harness_adapter_imports_swebench(graph):
    """The SWE-bench harness is an optional extra (`grade`): one module imports it, which grading
    and the SWE-bench instances' recipes use; everything else (the team's tests on a user's
    repository among it) runs on a plain install."""
    assert graph.find_modules_that_directly_import("swebench") == {HARNESS_ADAPTER}


def test_the_modules_the_suite_starts_with_are_its_own():
    """conftest.py's LONGEST_FIRST names test modules that exist, each once: a renamed module
    would otherwise drop silently to the end of the workers' order."""
    from conftest import LONGEST_FIRST

    assert [name for name in LONGEST_FIRST if not (ROOT / "tests" / f"{name}.py").is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
