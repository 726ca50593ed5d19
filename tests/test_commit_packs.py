"""A repository's commits reach a node as a pack (actors/code/commit_packs.py): the node's copy keeps
every commit id and its history's commits and tags, so a checkout, `git show`, a diff between the
commits and a version derived from git work on it as on the repository, and a second task of the
node reuses the copy. Their
submodules' commits travel with them, from the driver's mirrors: a node checks the submodule out, and
imports its module, from what arrived alone."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from execfixtures import make_calc_repos_with_submodule
from gitfixtures import commit_files
from scenarios import make_calc_repo

from magis_ray.actors.code.commit_packs import (CommitPackError, has_commits, pack_commits, submodule_mirrors,
                                                submodules_at, unpacked_copy)
from magis_ray.actors.code.workspaces import check_out_submodules
from magis_ray.actors.code.workspaces import checkout, read_file_at


def git(*args, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_a_commit_s_tree_unpacks_on_a_node_as_a_repository_at_that_commit(tmp_path):
    repo = tmp_path / "driver" / "calc__calc"
    repository, base = make_calc_repo(repo)
    later = commit_files(repository, {"calc/added.py": "X = 1\n"}, "later")
    pack = pack_commits(repo, (base, later))
    made = []
    root = tmp_path / "node" / "repositories"
    folder = unpacked_copy(root, [("calc/calc", (base, later))], lambda: made.append(1) or [pack])
    copy = folder / "calc__calc"
    assert has_commits(copy, (base, later)) and read_file_at(copy, later, "calc/added.py") == "X = 1\n"
    assert read_file_at(copy, base, "calc/added.py") is None
    assert "calc/added.py" in git("diff", "--name-only", base, later, cwd=copy)
    checkout(copy, base, tmp_path / "work")  # as a testbed's tree is made
    assert git("rev-parse", "HEAD", cwd=tmp_path / "work").strip() == base
    assert unpacked_copy(root, [("calc/calc", (base, later))], lambda: made.append(2) or [pack]) == folder
    assert made == [1]  # the second task found the copy: no pack fetched
    assert [p.name for p in root.iterdir()] == [folder.name]  # nothing half-made left beside it


def test_a_commit_the_repository_lacks_is_said_in_one_line(tmp_path):
    repo = tmp_path / "calc__calc"
    make_calc_repo(repo)
    assert not has_commits(repo, ("0" * 40,)) and not has_commits(tmp_path / "absent", ("0" * 40,))
    with pytest.raises(CommitPackError) as refused:
        pack_commits(repo, ("0" * 40,))
    assert "\n" not in str(refused.value)


def test_a_submodule_s_commit_travels_with_the_pack_and_a_node_checks_it_out_from_what_arrived_alone(tmp_path):
    driver = tmp_path / "driver" / "repos"
    repo, base, helpers = make_calc_repos_with_submodule(driver)
    [module] = submodules_at(repo, base)
    assert (module.path, module.commit, module.mirror) == ("vendor/helpers", helpers, "calc/helpers")
    # the driver: the commit's pack, and its submodule's from the mirror in its repositories folder
    shipped = submodule_mirrors(repo, (base,), driver)
    assert shipped == [(("calc/helpers", (helpers,)), driver / "calc__helpers")]
    assert submodule_mirrors(repo, (base,), tmp_path / "no-mirrors") == []  # no mirror: the node says so
    parts = [("calc/calc", (base,)), *(part for part, _ in shipped)]
    packs = [pack_commits(repo, (base,)), *(pack_commits(mirror, part[1]) for part, mirror in shipped)]
    shutil.rmtree(tmp_path / "driver")  # the node has only what arrived
    # the node: the copy holds the repository and its submodule's mirror, as --repos-dir would
    repos_dir = unpacked_copy(tmp_path / "node" / "repositories", parts, lambda: packs)
    assert sorted(p.name for p in repos_dir.iterdir()) == ["calc__calc", "calc__helpers"]
    tree = tmp_path / "node" / "tree"
    checkout(repos_dir / "calc__calc", base, tree)  # as a testbed's build does, then its submodules
    notes = check_out_submodules(tree, base, repos_dir)
    assert notes == [f"submodule vendor/helpers: checked out from the local mirror {repos_dir / 'calc__helpers'}"]
    # the repository's conftest puts the submodule on the path; its module is there to import
    used = subprocess.run([sys.executable, "-c", "import conftest, helpers; print(helpers.expected_mean(1, 3))"],
                          cwd=tree, capture_output=True, text=True)
    assert used.stdout.strip() == "2.0", used.stderr
    # without the submodule's pack, the same checkout says it has no mirror and leaves the folder empty
    bare = unpacked_copy(tmp_path / "node" / "repositories", parts[:1], lambda: packs[:1])
    checkout(bare / "calc__calc", base, tmp_path / "node" / "bare-tree")
    [note] = check_out_submodules(tmp_path / "node" / "bare-tree", base, bare)
    assert "no local mirror" in note and not list((tmp_path / "node" / "bare-tree" / "vendor" / "helpers").iterdir())


def test_a_version_derived_from_git_is_the_repository_s_on_the_node(tmp_path):
    """setuptools_scm runs `git describe --tags --long`, astropy counts `git rev-list HEAD`: both
    need the commit's history and its tags, which the pack carries without their trees."""
    repo = tmp_path / "driver" / "calc__calc"
    repository, base = make_calc_repo(repo)
    git("tag", "-a", "v1.0", "-m", "one", base, cwd=repo)
    for n in range(3):
        commit_files(repository, {f"calc/step{n}.py": f"N = {n}\n"}, f"step {n}")
    git("tag", "v1.1.dev0", "HEAD~1", cwd=repo)  # a lightweight tag too
    commit = commit_files(repository, {"calc/last.py": "L = 1\n"}, "last")
    root = tmp_path / "node" / "repositories"
    folder = unpacked_copy(root, [("calc/calc", (commit,))], lambda: [pack_commits(repo, (commit,))])
    work = tmp_path / "work"
    checkout(folder / "calc__calc", commit, work)
    describe = ["describe", "--tags", "--long", "--abbrev=12", "--match", "*[0-9]*"]
    assert git(*describe, cwd=work) == git(*describe, commit, cwd=repo)
    assert git(*describe, cwd=work).startswith("v1.1.dev0-2-g")
    assert git("rev-list", "--count", "HEAD", cwd=work) == git("rev-list", "--count", commit, cwd=repo)
    assert "calc/last.py" in git("show", "--stat", "HEAD", cwd=work)  # against its parent's tree
    git("fsck", "--connectivity-only", cwd=folder / "calc__calc")  # the old trees are left out on purpose
    whole = subprocess.run(["git", "pack-objects", "--stdout", "--revs", "--quiet"], cwd=repo, input=f"{commit}\n".encode(),
                           capture_output=True, check=True).stdout
    assert len(pack_commits(repo, (commit,)).data) < len(whole)  # less than the whole history
