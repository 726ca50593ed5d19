"""Whether a diff applies to a commit, as `git apply --check` on a clean checkout of it says: git
itself, against a scratch index of the commit, so nothing in the repository or a working tree
changes (a bare repository works too)."""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from magis_ray.events.settings import process_environment


def _git(args: list[str], env: dict[str, str], cwd: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], env=env, cwd=cwd, input=stdin, capture_output=True)


def diff_applies(repo_path: str | os.PathLike, commit: str, diff: str) -> str | None:
    """None when `diff` applies to `commit`, else git's reason on one line."""
    # unconfigured, like the SWE-bench harness: no apply.whitespace or autocrlf of the user's
    env = {**process_environment(), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C",
           "GIT_CEILING_DIRECTORIES": str(Path(repo_path).resolve().parent)}
    found = _git(["rev-parse", "--absolute-git-dir"], env, str(repo_path))
    if found.returncode != 0:
        return f"not a git repository: {repo_path}"
    with tempfile.TemporaryDirectory(prefix="magis-check-") as scratch:
        env = {**env, "GIT_DIR": found.stdout.decode().strip(), "GIT_INDEX_FILE": str(Path(scratch) / "index")}
        for args, stdin in ((["read-tree", commit], None), (["apply", "--cached", "--check", "-"], diff.encode("utf-8", "surrogateescape"))):
            result = _git(args, env, scratch, stdin)
            if result.returncode != 0:
                return " ".join(result.stderr.decode("utf-8", "replace").split())[:300] or f"git {args[0]} failed"
    return None
