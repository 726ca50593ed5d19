"""Stand-in repositories for Django, scikit-learn and matplotlib, rebuilt from PyPI source releases.

These three repositories are too large to fetch here, so their SWE-bench instances are graded on a
stand-in: a source release made after the instance usually already holds the fix (Django's `X.Y`;
for scikit-learn and matplotlib a release of the version's series or of the next minor series:
their version field often names the last release before the fix). Its tree is committed (the new
environment_setup_commit), then the gold patch and the test patch are reverse-applied to it
(`git apply -R`) and that is committed (the new base_commit). The files the instance touches are then as at its base, the rest
as at the release. This is a test and benchmark helper: a figure from such a tree is not a figure
from the real clone.

An instance is kept on the first candidate release where both patches reverse-apply and every FAIL_TO_PASS and PASS_TO_PASS
test is still defined in the release (a test renamed or removed between base and release would fail
for the tree's reasons, not the grader's); every other instance is written to the excluded file with
its reason.

The commits are deterministic (fixed author, the release's upload time, the instance's creation
time), so a rebuild anywhere gives the same commit ids. Each release commit is tagged as the project
tags its releases (setuptools-scm and versioneer read the version from `git describe`), and each
base commit has a branch named after its instance.

Usage: python benchmarks/rebuild_big3.py [--dataset D] [--out /work/big3] [--repo django/django ...]
                                         [--instances ID ...] [--sdist-cache DIR]
Writes OUT/repos/OWNER__NAME (bare git repositories), OUT/verified-big3-rebuilt.jsonl,
OUT/excluded.jsonl, and touches OUT/READY-NAME when a repository is done.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

# the team's shared data folder: beside the repository, or beside the folder of its worktrees
DEFAULT_DATASET = next((p / "shared" / "swebench" / "verified-big3.jsonl" for p in Path(__file__).resolve().parents
                        if (p / "shared" / "swebench").is_dir()), Path("verified-big3.jsonl"))
DEFAULT_SDIST_CACHE = Path.home() / ".cache" / "magis-ray" / "sdists"
REPOSITORIES = ("django/django", "scikit-learn/scikit-learn", "matplotlib/matplotlib")  # Django first
PYPI_NAME = {"django/django": "Django", "scikit-learn/scikit-learn": "scikit-learn", "matplotlib/matplotlib": "matplotlib"}
AUTHOR = ("magis-ray rebuild", "rebuild@magis-ray.invalid")


class RebuildError(Exception):
    """Why a release or an instance cannot be rebuilt (one line)."""


@dataclass(frozen=True)
class Release:
    repo: str
    version: str  # the PyPI version, e.g. "3.0" (Django), "0.20.0", "3.5.0"
    sdist: Path
    uploaded: str  # ISO time of the sdist's upload: the release commit's date

    @property
    def tag(self) -> str:
        # Django tags its releases "3.0"; scikit-learn and matplotlib "v0.20.0"
        return self.version if self.repo == "django/django" else f"v{self.version}"


def repo_dir_name(repo: str) -> str:
    return repo.replace("/", "__")


# --- PyPI --------------------------------------------------------------------------------------

# How many releases after an instance's creation are tried, oldest first. Django's version field
# names the release its main branch was preparing, and that release holds the fix; a later one only
# drifts further. matplotlib's and scikit-learn's often name the last release before the fix, which
# then came in a patch release of that series or in the next minor release.
CANDIDATES = {"django/django": 1, "scikit-learn/scikit-learn": 4, "matplotlib/matplotlib": 6}
FINAL_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


@dataclass(frozen=True)
class Sdist:
    version: str
    url: str
    filename: str
    uploaded: str


def sdists(project: str) -> list[Sdist]:
    """A project's source releases (.tar.gz, final versions), from PyPI's simple index in its JSON
    form (PEP 691: one request lists every file)."""
    request = urllib.request.Request(f"https://pypi.org/simple/{project.lower()}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            files = json.load(response)["files"]
    except (OSError, ValueError, KeyError) as exc:
        raise RebuildError(f"cannot list {project}'s files on PyPI ({exc})") from None
    found = []
    for item in files:
        name = item["filename"]
        for stem in (project, project.lower(), project.replace("-", "_")):
            if name.startswith(f"{stem}-") and name.endswith(".tar.gz"):
                version = name[len(stem) + 1:-len(".tar.gz")]
                if FINAL_VERSION.match(version) and not item.get("yanked"):
                    found.append(Sdist(version, item["url"], name, item["upload-time"]))
                break
    return found


def series(version: str) -> tuple[int, int]:
    major, minor = FINAL_VERSION.match(version).groups()[:2]
    return int(major), int(minor)


def candidate_releases(repo: str, version: str, created_at: str, available: list[Sdist]) -> list[Sdist]:
    """The releases that may hold an instance's fix, in the order to try them: those of its version's
    series and of the next minor series, uploaded after the instance was created, oldest first."""
    major, minor = series(version)
    created = parse_time(created_at)
    fitting = [s for s in available if series(s.version) in ((major, minor), (major, minor + 1))
               and parse_time(s.uploaded) > created]
    return sorted(fitting, key=lambda s: parse_time(s.uploaded))[:CANDIDATES[repo]]


def parse_time(iso: str) -> datetime:
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def fetch_release(repo: str, sdist: Sdist, cache: Path) -> Release:
    """The release's sdist, downloaded once into `cache` (the file directly: no metadata build)."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / sdist.filename
    if not path.exists():
        partial = path.with_suffix(path.suffix + ".part")
        with urllib.request.urlopen(sdist.url, timeout=600) as response, open(partial, "wb") as out:
            shutil.copyfileobj(response, out)
        partial.rename(path)
    return Release(repo, sdist.version, path, sdist.uploaded)


# --- the release's tree ------------------------------------------------------------------------


def extract(release: Release, into: Path) -> Path:
    """The sdist unpacked into `into`, without its top folder; returns `into`."""
    with tarfile.open(release.sdist) as tar:
        members = []
        for member in tar.getmembers():
            parts = member.name.split("/", 1)
            if len(parts) < 2 or not parts[1]:
                continue
            if member.islnk():  # a hard link names its target by the archive's path, top folder included
                member.linkname = member.linkname.split("/", 1)[-1]
            member.name = parts[1]
            members.append(member)
        tar.extractall(into, members=members, filter="tar")
    strip_generated(release.repo, into)
    return into


CYTHON_HEADER = re.compile(rb"^/\* Generated by Cython")


def strip_generated(repo: str, tree: Path) -> None:
    """Remove what only the sdist holds, so the tree builds as a checkout does. scikit-learn's sdist
    carries the C files Cython generated from its .pyx sources, and its PKG-INFO makes the build use
    them instead of running Cython: a .pyx the gold patch changes would then build as released (with
    the fix). Without them the build cythonizes, as from the real clone."""
    if repo != "scikit-learn/scikit-learn":
        return
    (tree / "PKG-INFO").unlink(missing_ok=True)
    for pyx in tree.rglob("*.pyx"):
        for suffix in (".c", ".cpp"):
            generated = pyx.with_suffix(suffix)
            if generated.exists():
                with open(generated, "rb") as fh:
                    if CYTHON_HEADER.match(fh.read(64)):
                        generated.unlink()


# --- git ---------------------------------------------------------------------------------------


def git(git_dir: Path, *args: str, env: dict[str, str] | None = None, stdin: bytes | None = None, cwd: Path | None = None) -> str:
    full_env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C",
                "GIT_DIR": str(git_dir), **(env or {})}
    result = subprocess.run(["git", *args], env=full_env, input=stdin, capture_output=True, cwd=cwd)
    if result.returncode != 0:
        message = " ".join(result.stderr.decode("utf-8", "replace").split())[:300]
        raise RebuildError(message or f"git {args[0]} failed")
    return result.stdout.decode("utf-8", "surrogateescape")


def commit_env(when: str) -> dict[str, str]:
    name, email = AUTHOR
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}


def git_date(iso: str) -> str:
    """An ISO time (PyPI's, or a dataset's created_at) as git's `@SECONDS +0000`."""
    return f"@{int(parse_time(iso).timestamp())} +0000"


def init_repository(path: Path) -> Path:
    if not (path / "HEAD").exists():
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "--bare", "-q", "-b", "main", str(path)], check=True)
    return path


def commit_release(git_dir: Path, release: Release, tree_dir: Path) -> str:
    """The release's tree as a root commit, tagged; returns its id."""
    with tempfile.TemporaryDirectory(prefix="rebuild-index-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index"), "GIT_WORK_TREE": str(tree_dir)}
        # -f: the sdist's own .gitignore must not drop files the release ships
        git(git_dir, "add", "-A", "-f", ".", env=env, cwd=tree_dir)
        tree = git(git_dir, "write-tree", env=env).strip()
    message = f"{PYPI_NAME[release.repo]} {release.version}: the tree of its PyPI source release ({release.sdist.name})\n"
    commit = git(git_dir, "commit-tree", tree, env=commit_env(git_date(release.uploaded)), stdin=message.encode()).strip()
    git(git_dir, "tag", "-f", release.tag, commit)
    git(git_dir, "update-ref", "refs/heads/main", commit)
    return commit


def commit_base(git_dir: Path, release: Release, release_commit: str, record: dict) -> str:
    """The release less the instance's test patch and gold patch (reverse-applied), as a child of
    the release commit; RebuildError naming the patch that does not reverse-apply."""
    with tempfile.TemporaryDirectory(prefix="rebuild-index-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        git(git_dir, "read-tree", release_commit, env=env)
        for field, what in (("test_patch", "test patch"), ("patch", "gold patch")):
            diff = record.get(field) or ""
            if not diff.strip():
                continue
            if not diff.endswith("\n"):
                diff += "\n"
            try:
                git(git_dir, "apply", "--cached", "-R", "-", env=env, stdin=diff.encode("utf-8", "surrogateescape"))
            except RebuildError as exc:
                raise RebuildError(f"the {what} does not reverse-apply to the release: {exc}") from None
        tree = git(git_dir, "write-tree", env=env).strip()
    message = (f"{record['instance_id']}: {PYPI_NAME[record['repo']]} {release.version} "
               f"less its gold patch and test patch (a stand-in for its base commit)\n")
    commit = git(git_dir, "commit-tree", tree, "-p", release_commit,
                 env=commit_env(git_date(record["created_at"])), stdin=message.encode()).strip()
    git(git_dir, "update-ref", f"refs/heads/{record['instance_id']}", commit)
    return commit


# --- are the instance's tests defined in the release? -------------------------------------------


DJANGO_TEST = re.compile(r"^(\w+) \(([\w.]+)\)$")


class TestIndex:
    """Where the release defines tests: its test files' text, read once."""

    def __init__(self, repo: str, tree: Path) -> None:
        self.repo = repo
        self.tree = tree
        self._texts: dict[Path, str] = {}
        self._all: str | None = None

    def text(self, path: Path) -> str | None:
        if path not in self._texts:
            try:
                self._texts[path] = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                return None
        return self._texts[path]

    def all_tests_text(self) -> str:
        """Every .py file under Django's tests/ (where docstrings and mixins live), concatenated."""
        if self._all is None:
            self._all = "\n".join(self.text(p) or "" for p in sorted((self.tree / "tests").rglob("*.py")))
        return self._all

    def missing(self, test: str) -> str | None:
        """None when `test` is defined in the release, else why not."""
        return self._django(test) if self.repo == "django/django" else self._pytest(test)

    def _django(self, test: str) -> str | None:
        match = DJANGO_TEST.match(test)
        if not match:
            # unittest names a test by its docstring's first line when it has one
            return None if test.strip() in self.all_tests_text() else f"no test has the docstring {test!r}"
        name, dotted = match.groups()
        parts = dotted.split(".")
        if parts[-1] == name:  # Python 3.11's form: module.Class.test_name
            parts = parts[:-1]
        for cut in range(len(parts) - 1, 0, -1):
            module, qualname = parts[:cut], parts[cut:]
            for candidate in (self.tree / "tests" / Path(*module)).with_suffix(".py"), self.tree / "tests" / Path(*module) / "__init__.py":
                text = self.text(candidate)
                if text is None:
                    continue
                if not re.search(rf"^\s*class {re.escape(qualname[-1])}\b", text, re.M):
                    return f"{test}: no class {qualname[-1]} in {candidate.relative_to(self.tree)}"
                method = re.compile(rf"^\s*(async )?def {re.escape(name)}\(", re.M)
                if method.search(text) or method.search(self.all_tests_text()):  # a mixin's test counts
                    return None
                return f"{test}: no method {name} in {candidate.relative_to(self.tree)}"
        return f"{test}: no module {dotted} under tests/"

    def _pytest(self, test: str) -> str | None:
        path, _, rest = test.partition("::")
        text = self.text(self.tree / path)
        if text is None:
            return f"{test}: no file {path}"
        names = [re.sub(r"\[.*$", "", part) for part in rest.split("::") if part] if rest else []
        for name in names:
            if not re.search(rf"^\s*(async )?(def|class) {re.escape(name)}\b", text, re.M):
                return f"{test}: no {name} in {path}"
        return None


# --- the whole rebuild -------------------------------------------------------------------------


@dataclass
class Outcome:
    kept: list[dict]
    excluded: list[dict]


def rebuild_repository(repo: str, records: list[dict], repos_dir: Path, sdist_cache: Path, log=print) -> Outcome:
    """Rebuild one repository's stand-in for these records (all of `repo`): each instance on the
    first of its candidate releases where it can be kept."""
    git_dir = init_repository(repos_dir / repo_dir_name(repo))
    available = sdists(PYPI_NAME[repo])
    candidates = {r["instance_id"]: candidate_releases(repo, r["version"], r["created_at"], available) for r in records}
    tried: dict[str, list[str]] = {r["instance_id"]: [] for r in records}  # "VERSION: why not"
    kept: dict[str, dict] = {}
    for sdist in sorted({s for c in candidates.values() for s in c}, key=lambda s: parse_time(s.uploaded)):
        pending = [r for r in records if r["instance_id"] not in kept and sdist in candidates[r["instance_id"]]]
        if not pending:
            continue
        started = time.monotonic()
        release = fetch_release(repo, sdist, sdist_cache)
        with tempfile.TemporaryDirectory(prefix="rebuild-tree-") as scratch:
            tree = extract(release, Path(scratch))
            release_commit = commit_release(git_dir, release, tree)
            index = TestIndex(repo, tree)
            for record in pending:
                reason = keep_on(git_dir, release, release_commit, record, index)
                if reason is None:
                    kept[record["instance_id"]] = {**record, "base_commit": git(git_dir, "rev-parse", f"refs/heads/{record['instance_id']}").strip(),
                                                   "environment_setup_commit": release_commit}
                else:
                    tried[record["instance_id"]].append(f"{release.version}: {reason}")
        log(f"{repo} {release.version}: {release_commit[:10]}, kept {sum(1 for r in pending if r['instance_id'] in kept)} "
            f"of {len(pending)} tried ({time.monotonic() - started:.1f} s)")
    excluded = []
    for record in records:
        if record["instance_id"] in kept:
            continue
        reasons = tried[record["instance_id"]]
        if not reasons:
            reason = f"no source release of {record['version']} or the next minor version on PyPI after the instance was created"
        else:
            reason = reasons[0] + (f" (also not at {', '.join(r.split(':')[0] for r in reasons[1:])})" if len(reasons) > 1 else "")
        excluded.append(exclusion(record, reason))
    git(git_dir, "gc", "--auto", "-q")
    return Outcome([kept[r["instance_id"]] for r in records if r["instance_id"] in kept], excluded)


def keep_on(git_dir: Path, release: Release, release_commit: str, record: dict, index: TestIndex) -> str | None:
    """Commit the instance's base on this release (its branch), or say why it cannot be kept there."""
    try:
        commit_base(git_dir, release, release_commit, record)
    except RebuildError as exc:
        return str(exc)
    tests = [*json.loads(record["FAIL_TO_PASS"]), *json.loads(record["PASS_TO_PASS"])]
    missing = [why for why in map(index.missing, tests) if why]
    if missing:
        git(git_dir, "update-ref", "-d", f"refs/heads/{record['instance_id']}")
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return f"a test is not defined in the release: {missing[0]}{more}"
    return None


def exclusion(record: dict, reason: str) -> dict:
    return {"instance_id": record["instance_id"], "repo": record["repo"], "version": record["version"], "reason": reason}


def load_records(dataset: Path) -> list[dict]:
    return [json.loads(line) for line in dataset.read_text().splitlines() if line.strip()]


def rebuild(records: list[dict], out: Path, repos: tuple[str, ...] = REPOSITORIES, sdist_cache: Path = DEFAULT_SDIST_CACHE,
            log=print) -> Outcome:
    """Rebuild the stand-ins of `records` under OUT/repos, and write the kept and excluded records
    (merged with those of other repositories already written there, so one repository can be redone)."""
    out.mkdir(parents=True, exist_ok=True)
    kept_path, excluded_path = out / "verified-big3-rebuilt.jsonl", out / "excluded.jsonl"
    previous_kept = [r for r in load_records(kept_path) if r["repo"] not in repos] if kept_path.exists() else []
    previous_excluded = [r for r in load_records(excluded_path) if r["repo"] not in repos] if excluded_path.exists() else []
    total = Outcome([], [])
    for repo in repos:
        outcome = rebuild_repository(repo, [r for r in records if r["repo"] == repo], out / "repos", sdist_cache, log)
        total.kept += outcome.kept
        total.excluded += outcome.excluded
        order = {r["instance_id"]: i for i, r in enumerate(records)}
        for path, rows in ((kept_path, previous_kept + total.kept), (excluded_path, previous_excluded + total.excluded)):
            rows = sorted(rows, key=lambda r: order.get(r["instance_id"], len(order)))
            partial = path.with_suffix(".part")
            partial.write_text("".join(json.dumps(r) + "\n" for r in rows))
            partial.rename(path)
        (out / f"READY-{repo.split('/')[1]}").touch()
        log(f"{repo}: kept {len(outcome.kept)}, excluded {len(outcome.excluded)}")
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--out", type=Path, default=Path("/work/big3"))
    parser.add_argument("--repo", action="append", choices=REPOSITORIES, help="only these repositories (default: all three)")
    parser.add_argument("--instances", nargs="*", help="only these instances")
    parser.add_argument("--sdist-cache", type=Path, default=DEFAULT_SDIST_CACHE)
    args = parser.parse_args(argv)
    try:
        records = load_records(args.dataset)
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {args.dataset}: {exc}", file=sys.stderr)
        return 2
    if args.instances:
        records = [r for r in records if r["instance_id"] in set(args.instances)]
    repos = tuple(args.repo) if args.repo else REPOSITORIES
    outcome = rebuild(records, args.out, repos, args.sdist_cache)
    print(f"kept {len(outcome.kept)}, excluded {len(outcome.excluded)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
