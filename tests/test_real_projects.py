"""The team's tests on real projects no one wrote an environment down for: a project's release from
the package index (its source distribution, tests included) committed as a repository, a real bug
put into it, and a scripted run with tests on. The environment comes from what the project
declares; the reproduction test the team writes fails at the base for the bug's reason, never for
a module its environment lacks, and passes with the fix.

    cachetools 5.3.1   setuptools (setup.cfg), tox's deps
    more-itertools 10.1.0   flit, a tox environment that runs unittest
    packaging 23.2     flit, its tests' requirements named nowhere it declares (nox): the
                       collection finds `pretend` missing, and it is added

The whole team runs in this process, with the real bench (its sandbox, its testbeds) and the
scripted model over HTTP. Each needs its sdist from the package index."""
from __future__ import annotations

import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from gitfixtures import commit_files, make_repo

from magis_ray.actors.execution.sandbox import bwrap_path
from magis_ray.events import schema as ev
from magis_ray.events.schema import Edit, LineRange

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed (apt-get install bubblewrap)")


@dataclass(frozen=True)
class Bug:
    """A release, a line of it made wrong, the issue a user would write, and the reproduction test
    that shows it."""

    release: str  # NAME==VERSION
    path: str  # the file, in the repository
    right: str  # the line as released
    wrong: str  # the line with the bug
    issue: str
    reproduction: str
    reason: str  # what the reproduction's failure says at the base


BUGS = {
    "cachetools": Bug(
        "cachetools==5.3.1", "src/cachetools/__init__.py", "        return self.__maxsize\n",
        "        return self.__maxsize + 1\n",
        "Cache.maxsize is one more than the maxsize given\n\n`cachetools.LRUCache(maxsize=2).maxsize` is 3: "
        "the maxsize property of Cache in cachetools/__init__.py adds one to the maximum size.",
        "import cachetools\n\n\ndef test_maxsize_is_the_one_given():\n    assert cachetools.LRUCache(maxsize=2).maxsize == 2\n",
        "assert 3 == 2"),
    "more-itertools": Bug(
        "more-itertools==10.1.0", "more_itertools/more.py", "        return next(iter(iterable))\n",
        "        return next(iter(iterable[1:]))\n",
        "first() skips the first item\n\n`more_itertools.first([1, 2, 3])` returns 2 instead of 1: first in "
        "more_itertools/more.py takes the items after the first.",
        "from more_itertools import first\n\n\ndef test_first_is_the_first_item():\n    assert first([1, 2, 3]) == 1\n",
        "assert 2 == 1"),
    "packaging": Bug(
        "packaging==23.2", "src/packaging/utils.py", '    value = _canonicalize_regex.sub("-", name).lower()\n',
        '    value = _canonicalize_regex.sub("-", name)\n',
        "canonicalize_name keeps capitals\n\n`packaging.utils.canonicalize_name('Foo_Bar')` returns 'Foo-Bar'; "
        "PEP 503 normalizes names to lowercase, canonicalize_name in packaging/utils.py does not.",
        "from packaging.utils import canonicalize_name\n\n\ndef test_names_are_lowercased():\n"
        "    assert canonicalize_name('Foo_Bar') == 'foo-bar'\n",
        "AssertionError"),
}


def released_repository(bug: Bug, where: Path) -> tuple[str, str]:
    """The release's sdist committed as it is, then the bug: (the repository's folder, the buggy commit)."""
    downloads = where / "sdist"
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                           bug.release, "-d", str(downloads)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    [sdist] = downloads.glob("*.tar.gz")
    files: dict[str, bytes] = {}
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            relative = member.name.split("/", 1)[1] if "/" in member.name else ""
            if member.isfile() and relative and ".pytest_cache" not in relative:
                files[relative] = archive.extractfile(member).read()
    repo, _ = make_repo(where / "repo", files, "the release")
    text = files[bug.path].decode()
    assert text.count(bug.right) == 1, bug.path
    base = commit_files(repo, {bug.path: text.replace(bug.right, bug.wrong)}, "a bug")
    return str(where / "repo"), base


def run_with_tests(bug: Bug, repo_path: str, base: str, tmp_path: Path):
    """The team on the issue, in this process, with tests on (tests/teamruns.py): the run's end and events."""
    from teamruns import run_team, settings_for

    from magis_ray.actors.model.scripted_server import ScriptedServer
    from magis_ray.actors.model.scripted_team import ScriptedTeam
    from magis_ray.actors.runtime.issue import IssueRecord

    buggy = subprocess.run(["git", "-C", repo_path, "show", f"{base}:{bug.path}"], capture_output=True, text=True).stdout
    number = buggy.splitlines().index(bug.wrong.rstrip("\n")) + 1
    team = ScriptedTeam({bug.path: [Edit(LineRange(number, number), bug.right)]}, reproductions=[bug.reproduction])
    issue = IssueRecord(instance_id=f"{bug.release.split('==')[0]}-1", repo=f"example/{bug.release.split('==')[0]}",
                        base_commit=base, problem_statement=bug.issue, repo_path=repo_path)
    with ScriptedServer(team) as server:
        run = run_team(issue, settings_for(repo_path, base_url=server.base_url, tests="on"), tmp_path / "store")
    return run.end, [record.event for record in run.events]


@pytest.mark.parametrize("name", [
    "cachetools",
    pytest.param("more-itertools", marks=pytest.mark.slow),  # the same path as cachetools', another packaging
    pytest.param("packaging", marks=pytest.mark.slow),  # a missing module added: also test_test_environments
])
def test_the_reproduction_fails_at_the_base_for_the_bugs_reason(name, tmp_path, monkeypatch):
    monkeypatch.setenv("MAGIS_ENV_CACHE", str(tmp_path / "envs"))
    bug = BUGS[name]
    repo_path, base = released_repository(bug, tmp_path)
    end, events = run_with_tests(bug, repo_path, base, tmp_path)
    ran = [e for e in events if isinstance(e, ev.TestsRan)]
    prepared = next(e for e in ran if e.purpose == "prepare")
    assert prepared.outcome == "passed" and prepared.suite is not None and prepared.suite.collected > 0, prepared.output
    assert prepared.suite.collection_errors == [], prepared.suite.collection_errors
    reproduced = next(e for e in ran if e.purpose == "reproduce")
    assert reproduced.outcome == "failed" and reproduced.failed, reproduced.output[-2000:]
    assert bug.reason in reproduced.output and "ImportError" not in reproduced.output \
        and "ModuleNotFoundError" not in reproduced.output, reproduced.output[-2000:]
    checks = [e for e in ran if e.purpose == "check"]
    assert checks and checks[-1].outcome == "passed", [c.output[-1000:] for c in checks]
    assert isinstance(end, ev.RunFinished) and end.outcome == "patched"
