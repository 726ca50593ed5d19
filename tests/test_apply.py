"""A run's diff as a branch of the user's repository, and what the change says of itself: one commit
on the base commit whose tree is the base plus the diff, made without touching the working tree,
the index or the current branch; its message and the pull request's description, from the log."""
from __future__ import annotations

import pygit2
import pytest
from gitfixtures import checkout, files_at, git, read_tree_files, user_clone
from runs import constructed_run, fixed_new_events
from scenarios import FILES

from magis_ray.actors.code.committing import BranchExists, add_worktree, branch_with_diff
from magis_ray.actors.code.repository import RepoError
from magis_ray.events import schema as ev
from magis_ray.events.projections import commit_message, final_diff, fold, pr_description
from magis_ray.store.memory import InMemoryStore

URL = "https://github.com/acme/calc/issues/7"


def view_of(pairs, run_id="0123456789ab"):
    return fold(InMemoryStore().append(run_id, 0, fixed_new_events(pairs)))


def with_url(pairs, url: str = URL):
    actor, started = pairs[0]
    return [(actor, ev.RunStarted(**{**{f: getattr(started, f) for f in started.__struct_fields__}, "issue_url": url})), *pairs[1:]]


def snapshot(path):
    """Everything `apply` must leave alone: HEAD, its branch, the index, the working tree."""
    return (git("rev-parse", "HEAD", cwd=path), git("symbolic-ref", "HEAD", cwd=path), git("status", "--porcelain", cwd=path),
            git("diff", cwd=path), git("diff", "--cached", cwd=path), read_tree_files(path))


@pytest.fixture
def clone(tmp_path):
    path, base = user_clone(tmp_path / "calc", FILES)
    # the user is at work: an edit, a staged change and a new file, none of which apply may touch
    (path / "README.md").write_text("# calc\n\nWork in progress.\n")
    (path / "calc" / "texts.py").write_text((path / "calc" / "texts.py").read_text() + "\n# staged\n")
    git("add", "calc/texts.py", cwd=path)
    (path / "notes.txt").write_text("mine\n")
    return path, base


def test_the_branch_holds_one_commit_on_the_base_whose_tree_is_the_base_plus_the_diff(clone, tmp_path):
    path, base = clone
    view = view_of(constructed_run(path, base, fix_texts=True))
    diff = final_diff(view)
    assert diff.count("diff --git") == 2
    before = snapshot(path)
    commit = branch_with_diff(path, base, diff, commit_message(view), "fix/both")
    assert snapshot(path) == before  # HEAD, its branch, the index and every file of the working tree
    repo = pygit2.Repository(str(path))
    made = repo.get(commit)
    assert str(repo.branches.local["fix/both"].target) == commit
    assert [str(p) for p in made.parent_ids] == [base]
    # the tree, checked against `git apply` of the diff on a plain checkout of the base
    work = checkout(repo, base, tmp_path / "work")
    (tmp_path / "run.diff").write_text(diff)
    git("apply", str(tmp_path / "run.diff"), cwd=work)
    expected = {name: data for name, data in read_tree_files(work).items()}
    assert files_at(repo, commit) == expected and expected != files_at(repo, base)
    assert made.message == commit_message(view)


def test_an_existing_branch_a_bad_name_and_a_diff_that_does_not_apply_are_refused(clone):
    path, base = clone
    view = view_of(constructed_run(path, base))
    branch_with_diff(path, base, final_diff(view), commit_message(view), "fix/mean")
    before = snapshot(path), git("rev-parse", "fix/mean", cwd=path)
    with pytest.raises(BranchExists, match="branch fix/mean exists already"):
        branch_with_diff(path, base, final_diff(view), "again", "fix/mean")
    with pytest.raises(RepoError, match="not a valid branch name"):
        branch_with_diff(path, base, final_diff(view), "m", "fix..mean")
    with pytest.raises(RepoError, match="git apply failed"):
        branch_with_diff(path, base, final_diff(view).replace("-    return total / (len(values) - 1)", "-    return 0"), "m", "other")
    assert (snapshot(path), git("rev-parse", "fix/mean", cwd=path)) == before
    assert "other" not in pygit2.Repository(str(path)).branches.local


def test_a_worktree_checks_the_branch_out_beside_the_user_s(clone, tmp_path):
    path, base = clone
    view = view_of(constructed_run(path, base))
    before = snapshot(path)
    branch_with_diff(path, base, final_diff(view), commit_message(view), "fix/mean")
    add_worktree(path, tmp_path / "fix-mean", "fix/mean")
    assert "return total / len(values)" in (tmp_path / "fix-mean" / "calc" / "stats.py").read_text()
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=tmp_path / "fix-mean").strip() == "fix/mean"
    assert snapshot(path) == before
    with pytest.raises(RepoError, match="exists already"):
        add_worktree(path, tmp_path / "fix-mean", "fix/mean")


def test_the_commit_message_is_the_title_what_changed_and_the_run(clone):
    path, base = clone
    message = commit_message(view_of(with_url(constructed_run(path, base, fix_texts=True))))
    lines = message.splitlines()
    assert lines[0] == "mean() returns the wrong value" and lines[1] == ""
    assert "run 0123456789ab" in lines[2]
    assert any(line.startswith("- calc/stats.py: Make mean() divide the total") and "approved" in line for line in lines)
    assert any(line.startswith("- calc/texts.py: ") for line in lines)
    assert f"Issue: {URL}" in lines and "magis-ray-run: 0123456789ab" in lines


def test_the_pull_request_description_has_the_issue_plan_changes_tests_cost_and_the_audit(clone):
    path, base = clone
    view = view_of(with_url(constructed_run(path, base)))
    text = pr_description(view)
    assert text.startswith("## mean() returns the wrong value\n\nCloses acme/calc#7.\n")
    sections = [line for line in text.splitlines() if line.startswith("### ")]
    assert sections == ["### The issue", "### The plan", "### Changes", "### Tests", "### Cost"]
    assert "> `calc.stats.mean([1, 2, 3, 4])` returns 3.3333" in text
    assert "1. **T1** `calc/stats.py` (Ada Lovelace): Make mean() divide" in text and "1. **T2** `calc/texts.py`" in text
    assert "#### `calc/stats.py`" in text and "#### `calc/texts.py`" not in text  # T2 failed: no change
    assert "Review: approved by its QA engineer after 2 attempts" in text
    assert "+    return total / len(values)" in text
    assert "The team ran no tests (`--tests off`)" in text
    assert "| custodian | gpt-4o-mini |" in text and "| total |" in text
    # the quote starts at the issue's first line of text, never an empty `>` line
    quote = text.split("### The issue\n\n", 1)[1].splitlines()
    assert quote[0].startswith("> ") and quote[0].strip() != ">"
    # the footer names the command, not a file on the machine that made the run
    assert text.rstrip().endswith("`magis-ray audit 0123456789ab`.") and "audit.html" not in text
