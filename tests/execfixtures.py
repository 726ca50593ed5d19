"""The execution layer's fixture: the calc project (a real bug, real tests) made installable, as a
git repository under REPOS/calc__calc, with SWE-bench-shaped records that grade it: the gold fix,
the test patch that adds the failing test, FAIL_TO_PASS and PASS_TO_PASS."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Sequence

from gitfixtures import make_repo
from scenarios import FILES


def pyproject(package: str, dependencies: Sequence[str] | None = None) -> str:
    """A setuptools pyproject.toml installing the folder `package` as version 0.1, with a
    `dependencies` line only when `dependencies` is given (`[]` writes an empty one)."""
    listed = "" if dependencies is None else f"dependencies = [{', '.join(json.dumps(d) for d in dependencies)}]\n"
    return f"""[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{package}"
version = "0.1"
{listed}
[tool.setuptools]
packages = ["{package}"]
"""


GOLD = """diff --git a/calc/stats.py b/calc/stats.py
--- a/calc/stats.py
+++ b/calc/stats.py
@@ -6,7 +6,7 @@ def mean(values):
     total = 0
     for value in values:
         total += value
-    return total / (len(values) - 1)
+    return total / len(values)
 
 
 def median(values):
"""

TEST_PATCH = """diff --git a/tests/test_more.py b/tests/test_more.py
new file mode 100644
--- /dev/null
+++ b/tests/test_more.py
@@ -0,0 +1,9 @@
+from calc.stats import mean, median
+
+
+def test_mean_of_two():
+    assert mean([1, 3]) == 2
+
+
+def test_median_of_one():
+    assert median([7]) == 7
"""


def files() -> dict[str, str]:
    found = {k: v for k, v in FILES.items() if k != "setup.cfg"}
    found["pyproject.toml"] = pyproject("calc")
    return found


def make_calc_repos(repos_dir: Path) -> tuple[Path, str]:
    """REPOS/calc__calc (a clone-able repository) and its base commit."""
    path = repos_dir / "calc__calc"
    _, base = make_repo(path, files(), "calc: statistics and text helpers")
    return path, base


def record(base: str, number: int = 1, patch: str = GOLD) -> dict:
    return {
        "repo": "calc/calc", "instance_id": f"calc__calc-{number}", "base_commit": base, "patch": patch,
        "test_patch": TEST_PATCH, "problem_statement": "mean() divides by one less than the count",
        "hints_text": "", "created_at": "", "version": "0.1",
        "FAIL_TO_PASS": json.dumps(["tests/test_more.py::test_mean_of_two"]),
        "PASS_TO_PASS": json.dumps(["tests/test_more.py::test_median_of_one"]),
        "environment_setup_commit": base,
    }


def write_dataset(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def new_file_patch(path: str, text: str) -> str:
    """A diff that creates `path` with `text` (what `git diff` writes for a new file)."""
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1,{len(lines)} @@\n{body}")


def tree_fingerprint(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` with its size and modification time (what a change would move)."""
    found = {}
    for path in sorted(Path(root).rglob("*")):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


def git_status(path: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=path, capture_output=True, text=True).stdout


HELPERS_URL = "https://github.com/calc/helpers.git"  # its mirror in a repositories folder: calc__helpers
# The repository's conftest.py puts its vendor/helpers submodule on the path; the tests import from it.
SUBMODULE_CONFTEST = ("import os\nimport sys\n\n"
                      "sys.path.insert(0, os.path.join(os.path.dirname(__file__), 'vendor', 'helpers'))\n")
SUBMODULE_TEST_PATCH = new_file_patch("tests/test_more.py", """from calc.stats import mean, median
from helpers import expected_mean


def test_mean_of_two():
    assert mean([1, 3]) == expected_mean(1, 3)


def test_median_of_one():
    assert median([7]) == 7
""")


def make_calc_repos_with_submodule(repos_dir: Path) -> tuple[Path, str, str]:
    """REPOS/calc__helpers, and REPOS/calc__calc whose vendor/helpers is a submodule of it: added
    with `git submodule add` from its local path, then named by the URL it would have on GitHub.
    Returns calc's path, its base commit and the helpers' commit."""
    helpers_path = repos_dir / "calc__helpers"
    _, helpers = make_repo(helpers_path, {"helpers.py": "def expected_mean(a, b):\n    return (a + b) / 2\n"}, "helpers")
    path = repos_dir / "calc__calc"
    git = ["git", "-c", "user.name=Test Author", "-c", "user.email=test@example.com", "-c", "protocol.file.allow=always"]
    subprocess.run([*git, "init", "--quiet", str(path)], check=True, capture_output=True)
    for name, text in {**files(), "conftest.py": SUBMODULE_CONFTEST}.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    for args in (["submodule", "add", "--quiet", str(helpers_path), "vendor/helpers"],
                 ["config", "-f", ".gitmodules", "submodule.vendor/helpers.url", HELPERS_URL],
                 ["add", "-A"], ["commit", "--quiet", "-m", "calc, with the helpers as a submodule"]):
        subprocess.run([*git, *args], cwd=path, check=True, capture_output=True)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, check=True, capture_output=True, text=True).stdout.strip()
    return path, base, helpers


def submodule_record(base: str, number: int = 1, patch: str = GOLD) -> dict:
    """A record of calc with its helpers submodule, whose tests import the submodule's module."""
    return {**record(base, number, patch), "test_patch": SUBMODULE_TEST_PATCH}
