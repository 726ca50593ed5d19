"""SWE-bench instances and their patches: load a dataset, name the gold files, apply a diff to
a base commit the way the harness does, and run an instance's tests.

Diffs are applied with `git apply` itself, against a scratch index of the base commit (a
temporary GIT_INDEX_FILE, new objects in a temporary object folder): git's own parser and
checks on exactly the base tree, without writing a checkout. For text files that is what
`git apply` on a clean checkout does, it takes milliseconds on any repository, works in a
bare clone, and never touches the repository's working tree, index or objects.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from magis_ray.events.errors import BadInput
from magis_ray.actors.code.diffs import changed_line_ranges
from magis_ray.actors.runtime.issue import IssueRecord
from magis_ray.events.settings import process_environment

REQUIRED_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "patch")
OPTIONAL_TEXT_FIELDS = ("hints_text", "test_patch", "version")
TEST_LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")


@dataclass(frozen=True)
class Instance:
    """One SWE-bench task: the issue, the gold patch, the test patch and the tests that judge it."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    hints_text: str = ""
    test_patch: str = ""
    version: str = ""
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass: tuple[str, ...] = ()
    line: int = 0  # where it was in the dataset file (1-based; a .json list's item number)

    def record(self) -> dict:
        """As a SWE-bench record, with the fields grading reads."""
        return {"instance_id": self.instance_id, "repo": self.repo, "base_commit": self.base_commit, "patch": self.patch,
                "test_patch": self.test_patch, "version": self.version, "environment_setup_commit": self.base_commit,
                "FAIL_TO_PASS": json.dumps(list(self.fail_to_pass)), "PASS_TO_PASS": json.dumps(list(self.pass_to_pass))}

    def issue(self) -> IssueRecord:
        return IssueRecord(
            instance_id=self.instance_id, repo=self.repo, base_commit=self.base_commit,
            problem_statement=self.problem_statement, hints_text=self.hints_text,
        )


@dataclass(frozen=True)
class DatasetError:
    """A dataset entry that could not be used, and why; the rest of the dataset still loads."""

    line: int
    reason: str
    instance_id: str = ""


def parse_test_list(value: object) -> tuple[str, ...]:
    """FAIL_TO_PASS / PASS_TO_PASS as a tuple, whether a list or a JSON-encoded list (the Hub's form)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise ValueError("is a string but not a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ValueError("must be a list of test names")
    return tuple(value)


def instance_from(record: object, line: int) -> Instance | DatasetError:
    """One dataset record as an Instance, or the error that makes it unusable."""
    if not isinstance(record, dict):
        return DatasetError(line, f"not a JSON object but {type(record).__name__}")
    instance_id = record.get("instance_id") if isinstance(record.get("instance_id"), str) else ""
    for name in REQUIRED_FIELDS:
        value = record.get(name)
        if not isinstance(value, str) or not value.strip():
            what = "missing" if value is None else "empty" if isinstance(value, str) else f"not a string ({type(value).__name__})"
            return DatasetError(line, f"field `{name}` is {what}", instance_id)
    texts = {}
    for name in OPTIONAL_TEXT_FIELDS:
        value = record.get(name) or ""
        texts[name] = value if isinstance(value, str) else str(value)  # `version` is sometimes a number
    tests = {}
    for name in TEST_LIST_FIELDS:
        try:
            tests[name] = parse_test_list(record.get(name) or [])
        except ValueError as exc:
            return DatasetError(line, f"field `{name}` {exc}", instance_id)
    return Instance(
        instance_id=instance_id, repo=record["repo"], base_commit=record["base_commit"],
        problem_statement=record["problem_statement"], patch=record["patch"], **texts,
        fail_to_pass=tests["FAIL_TO_PASS"], pass_to_pass=tests["PASS_TO_PASS"], line=line,
    )


def load_dataset(path: str | os.PathLike) -> tuple[list[Instance], list[DatasetError]]:
    """The instances of a .jsonl file (one record a line) or a .json list, and an error for each
    entry that is not valid JSON, lacks a required field or repeats an instance id.
    An unreadable file, or a .json file that is not a list, raises (OSError, ValueError)."""
    path = Path(path)
    data = path.read_text(encoding="utf-8")
    entries: list[tuple[int, object]] = []
    errors: list[DatasetError] = []
    if path.suffix == ".json":
        try:
            records = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(records, list):
            raise ValueError(f"{path}: a .json dataset must be a list of instances")
        entries = list(enumerate(records, 1))
    else:
        for number, text in enumerate(data.splitlines(), 1):
            if not text.strip():
                continue
            try:
                entries.append((number, json.loads(text)))
            except json.JSONDecodeError as exc:
                errors.append(DatasetError(number, f"not valid JSON ({exc.msg})"))
    instances: list[Instance] = []
    first_line: dict[str, int] = {}
    for number, record in entries:
        item = instance_from(record, number)
        if isinstance(item, DatasetError):
            errors.append(item)
        elif item.instance_id in first_line:
            errors.append(DatasetError(number, f"repeats instance id (first on line {first_line[item.instance_id]})", item.instance_id))
        else:
            first_line[item.instance_id] = number
            instances.append(item)
    errors.sort(key=lambda e: e.line)
    return instances, errors


def gold_files(patch: str) -> list[str]:
    """The files a patch changes, in its order: the base path, or the new path of a created file."""
    return list(changed_line_ranges(patch))


# --- applying diffs to a base commit ----------------------------------------------------------


class PatchError(BadInput):
    """A diff that does not apply (or a repository that cannot be read); the message is git's, on one line."""


def _git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    # No user or system configuration: apply.whitespace or core.autocrlf must not change
    # what applies (the harness runs git unconfigured too).
    env = {**process_environment(), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}
    env.update(extra or {})
    return env


def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def _run_git(args: tuple[str, ...], cwd: Path, env: dict[str, str], stdin: bytes | None = None) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, env=env, input=stdin, capture_output=True)
    if result.returncode != 0:
        raise PatchError(_one_line(result.stderr.decode("utf-8", "replace")) or f"git {args[0]} failed")
    return result.stdout.decode("utf-8", "surrogateescape")


def _git_dir_of(repo_path: Path) -> str:
    """The repository's git folder (a clone or a bare repository); PatchError when it is none."""
    if not repo_path.is_dir():
        raise PatchError(f"no repository at {repo_path}")
    # The ceiling stops git from finding some enclosing repository instead.
    env = _git_env({"GIT_CEILING_DIRECTORIES": str(repo_path.resolve().parent)})
    try:
        return _run_git(("rev-parse", "--absolute-git-dir"), cwd=repo_path, env=env).strip()
    except PatchError:
        raise PatchError(f"not a git repository: {repo_path}") from None


class ScratchIndex:
    """The base commit in a temporary index; diffs applied here change nothing in the repository.

        with ScratchIndex(repo_path, base) as scratch:
            scratch.check(diff)            # None, or why it does not apply
            files = scratch.apply(diff)    # {path: new bytes, or None if deleted}
    """

    def __init__(self, repo_path: str | os.PathLike, commit: str) -> None:
        self.repo_path = Path(repo_path)
        self.commit = commit
        self._git_dir = _git_dir_of(self.repo_path)
        self._dir = Path(tempfile.mkdtemp(prefix="magis-apply-"))
        (self._dir / "objects").mkdir()
        self._env = _git_env({
            "GIT_DIR": self._git_dir,
            "GIT_INDEX_FILE": str(self._dir / "index"),
            "GIT_OBJECT_DIRECTORY": str(self._dir / "objects"),  # new blobs land here, not in the repository
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(Path(self._git_dir) / "objects"),
        })
        try:
            self.base_tree = self._git("rev-parse", "--verify", "--quiet", f"{commit}^{{tree}}").strip()
        except PatchError:
            self.close()
            raise PatchError(f"commit {commit} not found in {self.repo_path}") from None

    def __enter__(self) -> ScratchIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    def _git(self, *args: str, stdin: bytes | None = None) -> str:
        return _run_git(args, cwd=self._dir, env=self._env, stdin=stdin)

    def _reset(self) -> None:
        self._git("read-tree", self.base_tree)

    def check(self, diff: str) -> str | None:
        """None when `diff` applies to the base commit (`git apply --check`), else git's reason."""
        if not diff.strip():
            return "the diff is empty"
        self._reset()
        try:
            self._git("apply", "--cached", "--check", "-", stdin=diff.encode("utf-8", "surrogateescape"))
        except PatchError as exc:
            return str(exc)
        return None

    def apply(self, diff: str) -> dict[str, bytes | None]:
        """The files `diff` changes, as applying it to the base commit leaves them (None: deleted).
        Raises PatchError when it does not apply."""
        problem = self.check(diff)
        if problem is not None:
            raise PatchError(problem)
        self._git("apply", "--cached", "-", stdin=diff.encode("utf-8", "surrogateescape"))
        new_tree = self._git("write-tree").strip()
        raw = self._git("diff-tree", "-r", "-z", "--no-renames", self.base_tree, new_tree)
        fields = raw.split("\0")
        changed: dict[str, str] = {}  # path -> new blob id (all zeros: deleted)
        for meta, path in zip(fields[0::2], fields[1::2]):
            if meta:
                changed[path] = meta.split()[3]
        return {path: self._blob(blob) if set(blob) != {"0"} else None for path, blob in changed.items()}

    def _blob(self, blob_id: str) -> bytes:
        result = subprocess.run(["git", "cat-file", "blob", blob_id], cwd=self._dir, env=self._env, capture_output=True)
        if result.returncode != 0:
            raise PatchError(_one_line(result.stderr.decode("utf-8", "replace")))
        return result.stdout


def check_applies(repo_path: str | os.PathLike, commit: str, diff: str) -> str | None:
    """None when `diff` applies to `commit` of the repository, else the reason (one line)."""
    try:
        with ScratchIndex(repo_path, commit) as scratch:
            return scratch.check(diff)
    except PatchError as exc:
        return str(exc)


def apply_patch(repo_path: str | os.PathLike, commit: str, diff: str) -> dict[str, bytes | None]:
    """The files `diff` changes after applying it to `commit` (None: deleted); PatchError if it does not apply."""
    with ScratchIndex(repo_path, commit) as scratch:
        return scratch.apply(diff)


def docker_available() -> bool:
    """Whether `docker info` succeeds: the official SWE-bench harness can run here."""
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def harness_command(dataset: str | os.PathLike, predictions: str | os.PathLike, run_id: str = "magis-ray-eval") -> str:
    """The official harness's command for a predictions file (swebench >= 2 reads a local dataset file)."""
    return (
        f"python -m swebench.harness.run_evaluation --dataset_name {shlex.quote(str(Path(dataset).resolve()))} "
        f"--predictions_path {shlex.quote(str(Path(predictions).resolve()))} --max_workers 4 --run_id {run_id}"
    )
