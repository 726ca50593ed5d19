"""The issue as a user has it: a Markdown or text file, `gh issue view --json` output, a SWE-bench
record, whole or in part; and the defaults a clone of their own gives (the repository's name from
its remote, HEAD, uncommitted changes)."""
from __future__ import annotations

import json
import subprocess

import pytest
from gitfixtures import git, user_clone
from scenarios import FILES

from magis_ray.actors.code.repository import RepoError
from magis_ray.actors.code.workingcopy import open_working_copy
from magis_ray.actors.runtime.issue import BadIssue, IssueDraft, complete, github_name, read_issue, slug, title_of

BASE = "a" * 40


def test_a_markdown_file_s_first_heading_is_the_title_and_the_statement_is_title_then_body():
    draft = read_issue(b"# mean() returns the wrong value\n\nIt divides by n - 1.\n\n## Steps\n1. call it\n", "issue.md")
    assert draft.title == "mean() returns the wrong value"
    # the blank line between the title and the body is kept
    assert draft.problem_statement == "mean() returns the wrong value\n\nIt divides by n - 1.\n\n## Steps\n1. call it"
    assert read_issue(b"# t\nbody", "i.md").problem_statement == "t\nbody"  # and none is added
    assert (draft.instance_id, draft.repo, draft.base_commit) == ("", "", "")


@pytest.mark.parametrize("text, title", [
    ("mean is wrong\nIt divides by n - 1.", "mean is wrong"),  # plain text: the first line
    ("\n\n  ## Mean is wrong ##  \nbody", "Mean is wrong"),  # a closed heading, after blank lines
    ("Mean is wrong\n=============\nbody", "Mean is wrong"),  # a setext heading
    ("\ufeff# With a BOM\nbody", "With a BOM"),
])
def test_the_title_is_the_first_line_without_heading_marks(text, title):
    draft = read_issue(text.encode(), "issue.txt")
    assert draft.title == title and draft.problem_statement.startswith(title)
    assert "====" not in draft.problem_statement


def test_gh_issue_view_json_names_the_instance_owner__name_number():
    data = {"number": 42, "title": "mean() is wrong", "body": "It divides by n - 1.", "url": "https://github.com/acme/calc/issues/42"}
    draft = read_issue(json.dumps(data).encode(), "standard input")
    assert draft.problem_statement == "mean() is wrong\nIt divides by n - 1."
    assert (draft.instance_id, draft.repo, draft.issue_url, draft.number) == ("acme__calc-42", "acme/calc", data["url"], 42)
    # gh writes a null body for an issue without one
    assert read_issue(b'{"title": "t", "body": null}', "i.json").problem_statement == "t"


def test_a_swe_bench_record_is_read_as_it_is_and_a_partial_one_leaves_the_rest_to_the_defaults():
    record = {"instance_id": "o__n-1", "repo": "o/n", "base_commit": BASE, "problem_statement": "p\nq", "hints_text": "h",
              "version": "1.0", "FAIL_TO_PASS": "[]"}
    draft = read_issue(json.dumps(record).encode(), "r.json")
    assert (draft.instance_id, draft.repo, draft.base_commit, draft.hints_text, draft.version) == ("o__n-1", "o/n", BASE, "h", "1.0")
    partial = read_issue(b'{"problem_statement": "mean is wrong"}', "p.json")
    assert (partial.instance_id, partial.repo, partial.base_commit) == ("", "", "")


@pytest.mark.parametrize("data, where, says", [
    (b"", "issue.md", "issue.md: the issue is empty"),
    (b"  \n\n\t\n", "issue.md", "issue.md: the issue is empty"),
    (b"#\nbody", "issue.md", "the first line, the issue's title, is empty"),
    (b"\xff\xfe\x00", "issue.md", "not UTF-8"),
    (b'{"instance_id": "x"', "bad.json", "bad.json: not valid JSON"),
    (b'["a list"]', "l.json", "a JSON object is expected"),
    (b'{"hello": 1}', "h.json", "neither a SWE-bench record"),
    (b'{"problem_statement": "  "}', "e.json", "`problem_statement` is empty"),
    (b'{"title": "", "body": ""}', "g.json", "the issue is empty"),
    (b'{"title": "mean() is wrong"}', "t.json", "a GitHub issue without its body"),
    (b'{"problem_statement": 5}', "t.json", "problem_statement"),
])
def test_bad_input_says_what_is_wrong_in_one_line(data, where, says):
    with pytest.raises(BadIssue) as caught:
        read_issue(data, where)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_complete_fills_the_defaults_from_the_repository():
    draft = read_issue(b"# mean() returns the wrong value!\nbody", "issue.md")
    issue = complete(draft, base_commit=BASE, repo_name="acme/calc", folder="calc", repo_path="/r/calc")
    assert (issue.instance_id, issue.repo, issue.base_commit, issue.repo_path) == (
        "calc-mean-returns-the-wrong-value", "acme/calc", BASE, "/r/calc")
    lonely = complete(draft, base_commit=BASE, repo_name="", folder="calc", repo_path="/r/calc")
    assert lonely.repo == "calc"
    numbered = complete(IssueDraft(problem_statement="t", number=7), base_commit=BASE, repo_name="acme/calc", folder="x", repo_path="/r")
    assert numbered.instance_id == "acme__calc-7"
    given = complete(IssueDraft(problem_statement="t", instance_id="mine", repo="o/n"), base_commit=BASE, repo_name="acme/calc",
                     folder="x", repo_path="/r")
    assert (given.instance_id, given.repo) == ("mine", "o/n")


def test_slug_title_and_github_name():
    assert slug("Crash when the config file is missing a [section] header entirely") == "crash-when-the-config-file-is"
    assert slug("!!!") == "issue" and len(slug("a" * 100)) <= 40
    assert title_of("\n## Title ##\nbody") == "Title"
    assert github_name("https://github.com/acme/calc/issues/3") == "acme/calc"
    assert github_name("https://ghe.example.com/acme/calc/pull/3") == "acme/calc"
    assert github_name("https://example.com/not/an/issue") == ""


# --- the user's clone ------------------------------------------------------------------------------


def clone_of(tmp_path, remote: str | None = None):
    path, _ = user_clone(tmp_path / "proj", FILES)
    if remote:
        git("remote", "add", "origin", remote, cwd=path)
    return path


@pytest.mark.parametrize("remote, name", [
    ("git@github.com:acme/calc.git", "acme/calc"),
    ("https://github.com/acme/calc", "acme/calc"),
    ("ssh://git@gitlab.example.com/acme/calc.git/", "acme/calc"),
    (None, ""),
])
def test_the_repository_s_name_comes_from_its_remote(tmp_path, remote, name):
    assert open_working_copy(clone_of(tmp_path, remote)).remote_name() == name


def test_the_working_copy_is_found_from_a_subfolder_and_counts_tracked_changes_only(tmp_path):
    path = clone_of(tmp_path)
    copy = open_working_copy(path / "calc")
    assert copy.path == path.resolve() and copy.folder == "proj"
    head = git("rev-parse", "HEAD", cwd=path).strip()
    assert copy.commit() == head and copy.commit("HEAD") == head and copy.head_is(head)
    assert copy.uncommitted() == 0
    (path / "issue.md").write_text("# t\n")  # untracked: not counted
    assert copy.uncommitted() == 0
    (path / "README.md").write_text("changed\n")
    (path / "calc" / "texts.py").unlink()
    assert copy.uncommitted() == 2


def test_a_repository_without_commits_and_an_unknown_base_are_one_line_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    subprocess.run(["git", "init", "-q", str(empty)], check=True)
    with pytest.raises(RepoError, match="has no commits yet"):
        open_working_copy(empty).commit()
    with pytest.raises(RepoError, match="--base nope: no such commit"):
        open_working_copy(clone_of(tmp_path)).commit("nope")
    with pytest.raises(RepoError, match="not in a git repository"):
        open_working_copy(tmp_path)


def test_a_repository_another_user_owns_is_a_one_line_error_and_gives_no_project_settings(tmp_path):
    """As git does, libgit2 refuses a repository that neither this user nor root owns: a shared
    checkout on an HPC login node, say. Opening it says so in one line; a command run inside it
    (`magis-ray grade`) goes on without the project's settings instead of failing."""
    import os

    from magis_ray.cli.config import project_root

    if os.geteuid() != 0:
        pytest.skip("making a repository another user owns needs root")
    path = clone_of(tmp_path)
    for folder, folders, files in os.walk(path):
        for name in (folder, *(os.path.join(folder, f) for f in folders + files)):
            os.lchown(name, 54321, 54321)
    inside = path / "calc"
    with pytest.raises(RepoError, match=r"cannot open the repository holding .*owned") as raised:
        open_working_copy(inside)
    assert "\n" not in str(raised.value)
    assert project_root(None, str(inside)) is None
