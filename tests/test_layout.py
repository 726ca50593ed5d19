"""The tree explains the system: every module imports in a fresh process, no module imports one
that imports it back, and the imports run one way (roles know no Ray; runtime knows roles; the
cli knows the runtime). Checked over the real import graph, lazy imports inside functions too."""
# relayout: skip (names the new packages themselves)
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("actors", "events", "store", "cli")  # each installs as magis_ray.<folder>


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["magis_ray", *parts])


def modules() -> dict[str, Path]:
    return {module_name(p): p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The magis_ray modules (and third-party top-level packages) `name` imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            # `from pkg import mod` imports the module pkg.mod
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known)
    return {m for m in found if m and (m in known or not m.startswith("magis_ray"))}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read_whole(graph):
    # guards the checks below against passing on an empty or misread graph
    assert "magis_ray.actors.runtime.remote" in graph
    assert "magis_ray.actors.runtime.supervisor" in graph["magis_ray.actors.runtime.remote"]
    assert "ray" in graph["magis_ray.actors.runtime.remote"]
    assert "magis_ray.actors.model.asking" in graph["magis_ray.actors.roles.developer"]


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back(graph):
    assert cycles(graph) == []


# (importer prefix, imported prefixes it must not reach)
FORBIDDEN = [
    ("magis_ray.events", ["magis_ray.actors", "magis_ray.store", "magis_ray.cli", "ray"]),
    ("magis_ray.store", ["magis_ray.actors", "magis_ray.cli", "ray"]),
    ("magis_ray.actors.roles", ["magis_ray.actors.runtime", "magis_ray.actors.swebench", "magis_ray.store", "magis_ray.cli", "ray"]),
    ("magis_ray.actors.model", ["magis_ray.actors.roles", "magis_ray.actors.runtime", "magis_ray.actors.swebench", "magis_ray.actors.code", "magis_ray.store", "magis_ray.cli", "ray"]),
    ("magis_ray.actors.code", ["magis_ray.actors.roles", "magis_ray.actors.runtime", "magis_ray.actors.swebench", "magis_ray.actors.model", "magis_ray.store", "magis_ray.cli", "ray"]),
    ("magis_ray.actors.execution", ["magis_ray.actors.roles", "magis_ray.actors.runtime", "magis_ray.actors.swebench", "magis_ray.actors.model", "magis_ray.store", "magis_ray.cli", "ray"]),
    ("magis_ray.actors.runtime", ["magis_ray.actors.swebench", "magis_ray.cli"]),
    ("magis_ray.actors.swebench", ["magis_ray.cli"]),
]


@pytest.mark.parametrize("importer,forbidden", FORBIDDEN, ids=[f for f, _ in FORBIDDEN])
def test_imports_run_one_way(graph, importer, forbidden):
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items() if module == importer or module.startswith(importer + ".")
        for target in targets if any(target == f or target.startswith(f + ".") for f in forbidden)
    )
    assert wrong == []


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


HARNESS_ADAPTER = "magis_ray.actors.execution.swebench_harness"


def test_only_the_harness_adapter_imports_swebench(graph):
    """The SWE-bench harness is an optional extra (`grade`): one module imports it, which grading
    and the SWE-bench instances' recipes use; everything else (the team's tests on a user's
    repository among it) runs on a plain install."""
    importers = sorted(module for module, targets in graph.items()
                       if any(t == "swebench" or t.startswith("swebench.") for t in targets))
    assert importers == [HARNESS_ADAPTER]

