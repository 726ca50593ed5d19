"""Workspaces: a scratch checkout of a commit, never the user's working tree, with patches applied
as `git apply` applies them. The checkout is a clone sharing the repository's objects, so making
one costs a checkout, not a copy of the history."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from magis_ray.events.errors import MagisError
from magis_ray.events.settings import process_environment

from .commit_packs import folder_name, submodules_at


class WorkspaceError(MagisError):
    """A checkout or a patch that failed; the message is git's, on one line."""


def git_env() -> dict[str, str]:
    # No user or system configuration: apply.whitespace, core.autocrlf or a filter must not
    # change what applies (the harness runs git unconfigured too).
    return {**process_environment(), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C",
            "GIT_TERMINAL_PROMPT": "0"}


def one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def _git(args: list[str], cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, env=git_env(), input=stdin, capture_output=True)


class Workspace:
    """A scratch checkout of `commit` under `parent` (a temporary folder by default).

        with Workspace(repo_path, commit) as ws:
            ws.apply(diff)          # WorkspaceError with git's reason when it does not apply
            ws.path                 # the checkout
    """

    def __init__(self, repo_path: str | os.PathLike, commit: str, parent: str | os.PathLike | None = None) -> None:
        self.repo_path = Path(repo_path).resolve()
        self.commit = commit
        self._root = Path(tempfile.mkdtemp(prefix="magis-ws-", dir=parent))
        self.path = self._root / "repo"
        self.logs = self._root / "logs"
        self.logs.mkdir()
        self.missing: list[str] = []  # files of the commit whose content the repository lacks
        try:
            self._checkout()
        except BaseException:
            self.close()
            raise

    def _checkout(self) -> None:
        self.missing = checkout(self.repo_path, self.commit, self.path)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)

    def check(self, diff: str) -> str | None:
        """None when `diff` applies to the checkout as it is now, else git's reason."""
        if not diff.strip():
            return "the diff is empty"
        result = _git(["apply", "--check", "-"], self.path, diff.encode("utf-8", "surrogateescape"))
        return None if result.returncode == 0 else (one_line(result.stderr.decode("utf-8", "replace")) or "git apply failed")

    def apply(self, diff: str, name: str = "patch") -> None:
        """Apply `diff` to the checkout (`git apply`); the log keeps git's words."""
        data = diff if diff.endswith("\n") else diff + "\n"
        result = _git(["apply", "-v", "-"], self.path, data.encode("utf-8", "surrogateescape"))
        (self.logs / f"apply-{name}.log").write_bytes(result.stdout + result.stderr)
        if result.returncode != 0:
            raise WorkspaceError(one_line(result.stderr.decode("utf-8", "replace")) or "git apply failed")

    def restore(self, paths: list[str]) -> None:
        """Put `paths` back as they are at the commit (those it does not have are removed)."""
        for path in paths:
            if _git(["cat-file", "-e", f"{self.commit}:{path}"], self.path).returncode == 0:
                _git(["checkout", self.commit, "--", path], self.path)
            else:
                (self.path / path).unlink(missing_ok=True)

    def file_at_commit(self, path: str) -> str | None:
        result = _git(["show", f"{self.commit}:{path}"], self.path)
        return result.stdout.decode("utf-8", "replace") if result.returncode == 0 else None


def checkout(repo_path: str | os.PathLike, commit: str, path: str | os.PathLike) -> list[str]:
    """A clone of `repo_path` at `path` that shares its objects, checked out at `commit`; the files
    of the commit whose content the repository lacks (a clone cut by a size limit), if any.
    WorkspaceError with git's reason when it cannot be made."""
    repo_path, path = Path(repo_path), Path(path)
    if not repo_path.is_dir():
        raise WorkspaceError(f"no repository at {repo_path}")
    clone = _git(["clone", "--quiet", "--shared", "--no-checkout", str(repo_path), str(path)], path.parent)
    if clone.returncode != 0:
        raise WorkspaceError(f"cannot clone {repo_path}: {one_line(clone.stderr.decode('utf-8', 'replace'))}")
    done = _git(["checkout", "--quiet", "--detach", commit], path)
    if done.returncode != 0:
        raise WorkspaceError(f"cannot check out {commit[:12]}: {one_line(done.stderr.decode('utf-8', 'replace'))}")
    # git checks out what it can and exits 0 when the repository lacks some blobs: say which.
    return re.findall(r"unable to read sha1 file of (.+?) \(", done.stderr.decode("utf-8", "replace"))


def borrow_objects(clone: str | os.PathLike, repo_path: str | os.PathLike, commit: str) -> str:
    """Point a shared clone (made by `checkout`) at `repo_path`'s objects instead of those it was
    made from; the object folder it borrows from now. WorkspaceError when that repository lacks
    `commit`, which the clone's checkout needs."""
    git_dir = _git_dir(Path(repo_path).resolve())
    if _git(["--git-dir", str(git_dir), "cat-file", "-e", f"{commit}^{{commit}}"], Path(clone)).returncode != 0:
        raise WorkspaceError(f"{repo_path} lacks commit {commit[:12]}")
    objects = str(git_dir / "objects")
    (Path(clone) / ".git" / "objects" / "info" / "alternates").write_text(objects + "\n")
    return objects


def objects_of(repo_path: str | os.PathLike) -> str:
    """The object folder of a (bare or not) repository, which a shared clone borrows from."""
    return str(_git_dir(Path(repo_path).resolve()) / "objects")


def read_file_at(repo_path: str | os.PathLike, commit: str, path: str) -> str | None:
    """A file's text at a commit of a (bare or not) repository, or None when it has none."""
    result = subprocess.run(["git", "--git-dir", str(_git_dir(Path(repo_path))), "show", f"{commit}:{path}"],
                            env=git_env(), capture_output=True)
    return result.stdout.decode("utf-8", "replace") if result.returncode == 0 else None


class CommitFiles:
    """The files of one commit read with git itself, which reads every repository git makes: a
    node's partial copy of a commit (commit_packs.py), whose format libgit2 does not open, as well
    as a user's clone. Lists, reads and dates what a recipe needs of a commit, as RepoSnapshot
    does for the team."""

    def __init__(self, repo_path: str | os.PathLike, commit: str) -> None:
        self._git_dir = str(_git_dir(Path(repo_path)))
        listed = self._git("ls-tree", "-r", "-z", "--full-tree", commit)
        if listed is None:
            raise WorkspaceError(f"{repo_path} has no commit {commit}")
        self._blobs = {}
        for entry in listed.split(b"\0"):
            meta, _, path = entry.partition(b"\t")
            parts = meta.split()
            if len(parts) == 3 and parts[1] == b"blob":
                self._blobs[path.decode("utf-8", "surrogateescape")] = parts[2].decode()
        when = self._git("show", "-s", "--format=%ct", commit)
        self.committed_at = datetime.fromtimestamp(int(when.strip() or 0), timezone.utc)

    def _git(self, *args: str) -> bytes | None:
        done = subprocess.run(["git", "--git-dir", self._git_dir, *args], env=git_env(), capture_output=True)
        return done.stdout if done.returncode == 0 else None

    def files(self) -> list[SimpleNamespace]:
        return [SimpleNamespace(path=path, blob_id=blob) for path, blob in self._blobs.items()]

    def blob_id(self, path: str) -> str | None:
        return self._blobs.get(path)

    def read_text(self, path: str) -> str:
        data = self._git("cat-file", "blob", self._blobs[path])
        return (data or b"").decode("utf-8", "replace")


def _git_dir(repo_path: Path) -> Path:
    return repo_path / ".git" if (repo_path / ".git").exists() else repo_path


def check_out_submodules(tree: Path, commit: str, mirrors) -> list[str]:
    """Check out the commit's git submodules from local mirrors (MIRRORS/owner__name: --repos-dir,
    or on a node the copy the commits arrived in); the notes say which have none (the install may
    then need the internet)."""
    notes = []
    for module in submodules_at(tree, commit):
        mirror = Path(mirrors) / folder_name(module.mirror) if mirrors and module.mirror else None
        if mirror is None or not mirror.is_dir():
            notes.append(f"submodule {module.path} ({module.url}): no local mirror (looked for {mirror})")
            continue
        for args in (["config", f"submodule.{module.name}.url", str(mirror.resolve())],
                     ["-c", "protocol.file.allow=always", "submodule", "update", "--init", "--", module.path]):
            done = subprocess.run(["git", *args], cwd=tree, env=git_env(), capture_output=True, text=True)
            if done.returncode != 0:
                notes.append(f"submodule {module.path}: {' '.join(done.stderr.split())[:300]}")
                break
        else:
            notes.append(f"submodule {module.path}: checked out from the local mirror {mirror}")
    return notes
