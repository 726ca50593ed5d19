"""A repository's commits reach a node as a pack of their trees (actors/code/commit_packs.py): the
node's shallow copy keeps every commit id, so a checkout, `git show` and a diff between the
commits work on it as on the repository, and a second task of the node reuses the copy."""
from __future__ import annotations

import subprocess

import pytest
from gitfixtures import commit_files
from scenarios import make_calc_repo

from magis_ray.actors.code.commit_packs import CommitPackError, has_commits, pack_commits, unpacked_copy
from magis_ray.actors.execution.workspaces import checkout, read_file_at


def git(*args, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_a_commit_s_tree_unpacks_on_a_node_as_a_repository_at_that_commit(tmp_path):
    repo = tmp_path / "driver" / "calc__calc"
    repository, base = make_calc_repo(repo)
    later = commit_files(repository, {"calc/added.py": "X = 1\n"}, "later")
    pack = pack_commits(repo, (base, later))
    made = []
    root = tmp_path / "node" / "repositories"
    folder = unpacked_copy(root, "calc/calc", (base, later), lambda: made.append(1) or pack)
    copy = folder / "calc__calc"
    assert has_commits(copy, (base, later)) and read_file_at(copy, later, "calc/added.py") == "X = 1\n"
    assert read_file_at(copy, base, "calc/added.py") is None
    assert "calc/added.py" in git("diff", "--name-only", base, later, cwd=copy)
    checkout(copy, base, tmp_path / "work")  # as a testbed's tree is made
    assert git("rev-parse", "HEAD", cwd=tmp_path / "work").strip() == base
    assert unpacked_copy(root, "calc/calc", (base, later), lambda: made.append(2) or pack) == folder
    assert made == [1]  # the second task found the copy: no pack fetched
    assert [p.name for p in root.iterdir()] == [folder.name]  # nothing half-made left beside it


def test_a_commit_the_repository_lacks_is_said_in_one_line(tmp_path):
    repo = tmp_path / "calc__calc"
    make_calc_repo(repo)
    assert not has_commits(repo, ("0" * 40,)) and not has_commits(tmp_path / "absent", ("0" * 40,))
    with pytest.raises(CommitPackError) as refused:
        pack_commits(repo, ("0" * 40,))
    assert "\n" not in str(refused.value)
