"""`magis-ray repos`, the real command: a repositories folder filled for a dataset from a mirror
prefix (file://MIRRORS, whose repositories are named OWNER__NAME as on a mirror host), the mirror
of a submodule the dataset's commits check out included (calc's vendor/helpers, as astropy's
astropy-helpers); a second call clones nothing; a grading of the dataset reads the folder, the
submodule checked out from it."""
from __future__ import annotations

import json

import pytest
from commands import Done, in_process
from execfixtures import make_calc_repos_with_submodule, record, submodule_record, tree_fingerprint, write_dataset
from gitfixtures import make_repo
from scenarios import FILES

from magis_ray.actors.code.commit_packs import has_commits
from magis_ray.actors.execution.sandbox import bwrap_path



@pytest.fixture
def mirrored(tmp_path):
    """MIRRORS holding calc (with its helpers submodule) and a second repository, texts; a dataset
    of one instance of each."""
    mirrors = tmp_path / "mirrors"
    _, calc_base, helpers = make_calc_repos_with_submodule(mirrors)
    _, texts_base = make_repo(mirrors / "calc__texts", FILES, "texts")
    dataset = write_dataset(tmp_path / "dataset.jsonl", [
        submodule_record(calc_base),
        {**record(texts_base), "repo": "calc/texts", "instance_id": "calc__texts-1"},
    ])
    return {"mirrors": mirrors, "dataset": dataset, "calc": calc_base, "texts": texts_base, "helpers": helpers}


def lines_of(result: Done) -> dict[str, list[str]]:
    """Each repository's line, by its folder's name: [what became of it, the rest]."""
    return {line.split()[0]: line.split(None, 2)[1:] for line in result.out.splitlines()[:-1]}


def test_repos_fills_the_folder_from_a_mirror_prefix_submodules_included_and_a_second_call_clones_nothing(mirrored, tmp_path,
                                                                                                      capsys):
    repos = tmp_path / "repos"
    first = in_process(capsys, "repos", "--dataset", mirrored["dataset"], "--from", f"file://{mirrored['mirrors']}", "--repos-dir", repos)
    assert first.code == 0, first.out + first.err
    made = lines_of(first)
    assert {name: line[0] for name, line in made.items()} == {"calc__calc": "cloned", "calc__texts": "cloned",
                                                              "calc__helpers": "cloned"}, first.out
    assert "a submodule of calc/calc" in made["calc__helpers"][1] and f"file://{mirrored['mirrors']}/calc__helpers" in made["calc__helpers"][1]
    assert first.out.splitlines()[-1] == f"3 repositories in {repos}: 3 cloned"
    assert has_commits(repos / "calc__calc", (mirrored["calc"],)) and has_commits(repos / "calc__texts", (mirrored["texts"],))
    assert has_commits(repos / "calc__helpers", (mirrored["helpers"],))
    before = tree_fingerprint(repos)
    again = in_process(capsys, "repos", "--dataset", mirrored["dataset"], "--from", f"file://{mirrored['mirrors']}", "--repos-dir", repos)
    assert again.code == 0, again.out + again.err
    assert {line[0] for line in lines_of(again).values()} == {"present"}, again.out
    assert again.out.splitlines()[-1] == f"3 repositories in {repos}: 3 present"
    assert tree_fingerprint(repos) == before


def test_repos_fills_a_folder_named_relative_to_the_current_one(mirrored, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = in_process(capsys, "repos", "--dataset", mirrored["dataset"], "--from", f"file://{mirrored['mirrors']}", "--repos-dir", "repos")
    assert done.code == 0, done.out + done.err
    assert has_commits(tmp_path / "repos" / "calc__helpers", (mirrored["helpers"],))


def test_repos_says_what_a_mirror_lacks_and_exits_1(mirrored, tmp_path, capsys):
    """A commit the dataset names that its repository's mirror does not have: that line says so."""
    lines = mirrored["dataset"].read_text().splitlines()
    lines[1] = json.dumps({**json.loads(lines[1]), "base_commit": "f" * 40})
    mirrored["dataset"].write_text("\n".join(lines) + "\n")
    done = in_process(capsys, "repos", "--dataset", mirrored["dataset"], "--from", f"file://{mirrored['mirrors']}", "--repos-dir",
                      tmp_path / "repos")
    assert done.code == 1, done.out + done.err
    assert lines_of(done)["calc__texts"] == ["MISSING", f"file://{mirrored['mirrors']}/calc__texts has no commit ffffffffffff"]
    assert lines_of(done)["calc__calc"][0] == "cloned"


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")
def test_a_grading_reads_the_filled_folder_and_checks_the_submodule_out_from_it(mirrored, tmp_path, capsys):
    """The gold patch resolves only where the tests can import the submodule's module."""
    repos = tmp_path / "repos"
    filled = in_process(capsys, "repos", "--dataset", mirrored["dataset"], "--from", f"file://{mirrored['mirrors']}", "--repos-dir", repos)
    assert filled.code == 0, filled.out + filled.err
    store, envs = tmp_path / "store", tmp_path / "envs"
    graded = in_process(capsys, "grade", "--gold", "--dataset", mirrored["dataset"], "--instances", "calc__calc-1", "--repos-dir", repos,
                        "--store", store, "--env-cache", envs, "--test-cmd", "pytest -rA", "--timeout", "300", "--memory", "2G",
                        "--no-ray")
    assert graded.code == 0, graded.out + graded.err
    assert "resolved: 1 of 1" in graded.out, graded.out
    logs = [p.read_text() for p in (envs / "testbeds").glob("*/logs/testbed.log")]
    assert any(f"submodule vendor/helpers: checked out from the local mirror {repos.resolve()}/calc__helpers" in log
               for log in logs), logs
