"""`magis-ray tasks make` on a real history made with pygit2 (the calc project's): a fix and its
test, a merged branch, a binary file, a submodule bump, an empty commit, commits of tests or of
code alone. Each commit of HEAD's first-parent line is a candidate or passed over with its reason;
a candidate's two patches apply with `git apply` at its base and give the commit's tree; its
problem statement is the issue it resolves (issues file) or its message; the records are what the
project's dataset reader reads; bad input is one line, exit 2, and nothing written."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import msgspec
import pygit2
import pytest
from commands import in_process
from gitfixtures import Submodule, checkout, commit_files, git, make_repo, merge_into_head, read_tree_files
from scenarios import FILES, STATS, TESTS, TEXTS

from magis_ray.actors.code.history import BINARY, SUBMODULE, History
from magis_ray.actors.code.repository import RepoSnapshot
from magis_ray.actors.swebench import task_making as tm
from magis_ray.actors.swebench.instances import load_dataset
from magis_ray.actors.swebench.task_records import TaskRecord
from magis_ray.actors.swebench.issue_links import (CLOSED_ISSUE, COMMIT_MESSAGE, MENTIONED_ISSUE, linked_issues,
                                                   read_issues)

DAY = 86_400
T0 = 1_700_000_000  # the first commit: 2023-11-14T22:13:20Z
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
SWEBENCH_FIELDS = ["repo", "instance_id", "base_commit", "patch", "test_patch", "problem_statement", "hints_text",
                   "created_at", "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit"]
URL = "https://github.com/acme/calc/issues/{}"


def at(days: int) -> str:
    return datetime.fromtimestamp(T0 + days * DAY, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


ISSUES = [
    {"number": 7, "title": "mean() is wrong", "body": "mean([1, 2, 3, 4]) is 3.33", "url": URL.format(7),
     "comments": [{"body": "It divides by n - 1.", "createdAt": at(0)},
                  {"body": "Fixed, thanks.", "createdAt": at(2)}]},
    {"number": 8, "title": "median([]) fails badly", "body": None, "url": URL.format(8),
     "comments": [{"body": "An IndexError.", "createdAt": at(9)}]},
    {"number": 9, "title": "shout() ends with '?'", "body": "It should end with '!'.", "url": URL.format(9)},
]


@pytest.fixture(scope="module")
def calc(tmp_path_factory):
    """The calc repository and its commits by name; `merge` brings in `topic_code` and `topic_tests`."""
    root = tmp_path_factory.mktemp("tasks")
    repo, first = make_repo(root / "calc", {**FILES, "docs/logo.png": PNG, "vendor/lib": Submodule("1" * 40)})
    mean_fixed = STATS.replace("(len(values) - 1)", "len(values)")
    c = {"first": first}
    c["fix"] = commit_files(repo, {"calc/stats.py": mean_fixed, "tests/test_calc.py": TESTS + "\n\ndef test_one():\n    assert mean([5]) == 5\n"},
                            "Make mean divide by the count\n\nFixes #7; see #9 for the other one.\n", at=T0 + DAY)
    c["docs"] = commit_files(repo, {"README.md": "# calc\n\nStatistics.\n"}, "Say what calc does\n", at=T0 + 2 * DAY)
    c["tests_only"] = commit_files(repo, {"tests/test_more.py": "def test_nothing():\n    pass\n"}, "A test\n", at=T0 + 3 * DAY)
    c["binary_code"] = commit_files(repo, {"docs/logo.png": PNG + b"\x01", "tests/test_logo.py": "LOGO = 'docs/logo.png'\n"},
                                    "A new logo\n", at=T0 + 4 * DAY)
    c["partly_binary"] = commit_files(repo, {"calc/texts.py": TEXTS.replace('"?"', '"!"'), "calc/table.bin": b"\x00\x01\x02",
                                             "tests/test_calc.py": TESTS.replace("HI!", "HI!") + "\n# shout\n"},
                                      "Shout with an exclamation mark (see #9)\n", at=T0 + 5 * DAY)
    c["binary_tests"] = commit_files(repo, {"calc/__init__.py": "VERSION = 2\n", "tests/fixture.bin": b"\x00\xff"},
                                     "Version 2\n", at=T0 + 6 * DAY)
    c["submodule"] = commit_files(repo, {"vendor/lib": Submodule("2" * 40), "tests/test_vendor.py": "VENDOR = 2\n"},
                                  "Bump lib\n", at=T0 + 7 * DAY)
    c["empty"] = commit_files(repo, {}, "Nothing at all\n", at=T0 + 8 * DAY)
    main_branch = repo.head.name
    repo.branches.local.create("topic", repo.head.peel(pygit2.Commit))
    repo.set_head("refs/heads/topic")
    median_checked = mean_fixed.replace("    ordered = sorted(values)\n",
                                        "    if not values:\n        raise ValueError('no values')\n    ordered = sorted(values)\n")
    c["topic_code"] = commit_files(repo, {"calc/stats.py": median_checked}, "Median of nothing raises\n\n<!-- fixes #9 -->\n",
                                   at=T0 + 10 * DAY)
    c["topic_tests"] = commit_files(repo, {"tests/test_median.py": "def test_empty():\n    pass\n"}, "Test it (closes #8)\n",
                                    at=T0 + 11 * DAY)
    repo.set_head(main_branch)
    c["docs2"] = commit_files(repo, {"README.md": "# calc\n\nStatistics and text.\n"}, "README\n", at=T0 + 12 * DAY)
    c["merge"] = merge_into_head(repo, c["topic_tests"], "Merge pull request #10 from someone/topic\n\nMedian of nothing\n",
                                 at=T0 + 13 * DAY)
    c["silent"] = commit_files(repo, {"calc/__init__.py": "VERSION = 3\n", "tests/test_version.py": "V = 3\n"}, "", at=T0 + 14 * DAY)
    issues_file = root / "issues.json"
    issues_file.write_text(json.dumps(ISSUES))
    return {"root": root, "path": root / "calc", "repo": repo, "commits": c, "issues": issues_file}


def made(calc):
    history = History(calc["repo"], calc["path"])
    issues = read_issues(calc["issues"].read_bytes(), "issues.json")
    return tm.make_tasks(history, history.first_parent_line(), "acme/calc", issues)


def test_each_commit_of_the_first_parent_line_is_a_candidate_or_passed_over_with_its_reason(calc):
    c = calc["commits"]
    result = made(calc)
    reasons = {p.commit: p.reason for p in result.passed_over}
    assert reasons == {c["first"]: tm.NO_PARENT, c["docs"]: tm.NO_TEST_CHANGE, c["tests_only"]: tm.NO_CODE_CHANGE,
                       c["binary_code"]: tm.CODE_LEFT_OUT, c["binary_tests"]: tm.TESTS_LEFT_OUT,
                       c["submodule"]: tm.CODE_LEFT_OUT, c["empty"]: tm.NO_CHANGE, c["docs2"]: tm.NO_TEST_CHANGE,
                       c["silent"]: tm.NO_MESSAGE}
    assert [r.commit for r in result.records] == [c["fix"], c["partly_binary"], c["merge"]]  # oldest first
    assert result.commits == 12  # the merged branch's own commits are not on the line
    assert dict(result.reasons())[tm.CODE_LEFT_OUT] == 2


def test_a_candidate_is_its_parent_its_test_change_and_the_rest(calc):
    c = calc["commits"]
    fix, partly, merge = made(calc).records
    assert (fix.base_commit, fix.environment_setup_commit) == (c["first"], c["first"])
    assert "calc/stats.py" in fix.patch and "tests/" not in fix.patch
    assert "tests/test_calc.py" in fix.test_patch and "calc/stats.py" not in fix.test_patch
    assert fix.instance_id == f"acme__calc-{c['fix'][:12]}" and fix.created_at == at(1)
    assert (fix.FAIL_TO_PASS, fix.PASS_TO_PASS, fix.version, fix.left_out) == ("[]", "[]", "", ())
    assert [(x.path, x.reason) for x in partly.left_out] == [("calc/table.bin", BINARY)]
    assert "calc/texts.py" in partly.patch and "table.bin" not in partly.patch
    # the merge: its first parent's diff, which is what its branch brought; written when the branch began
    assert merge.base_commit == c["docs2"] and merge.created_at == at(10)
    assert "calc/stats.py" in merge.patch and "tests/test_median.py" in merge.test_patch and "README" not in merge.patch
    assert len({r.instance_id for r in made(calc).records}) == 3


def test_the_patches_apply_with_git_at_the_base_and_give_the_commit_s_tree_less_what_was_left_out(calc, tmp_path):
    repo = calc["repo"]
    for record in made(calc).records:
        work = checkout(repo, record.base_commit, tmp_path / record.commit[:12])
        for name, diff in (("test.patch", record.test_patch), ("gold.patch", record.patch)):
            (tmp_path / name).write_text(diff)
            git("apply", str(tmp_path / name), cwd=work)
        expected = {f.path: RepoSnapshot.open(calc["path"], record.commit).read_bytes(f.path)
                    for f in RepoSnapshot.open(calc["path"], record.commit).files()}
        base = RepoSnapshot.open(calc["path"], record.base_commit)
        for left in record.left_out:
            expected.pop(left.path, None)
            if base.blob_id(left.path):
                expected[left.path] = base.read_bytes(left.path)
        assert read_tree_files(work) == expected, record.commit


def test_test_files_are_those_whose_path_holds_one_of_swebench_s_test_words():
    tests = ["tests/test_calc.py", "src/pkg/testing.py", "pkg/e2e/run.py", "test_x.py", "docs/latest.md", "conftest.py"]
    code = ["src/calc.py", "Tests/Calc.py", "docs/index.md", "setup.cfg"]
    assert [p for p in tests + code if tm.is_test_path(p)] == tests


def test_a_closing_keyword_names_the_issue_before_a_mention_and_html_comments_are_not_read(calc):
    issues = read_issues(calc["issues"].read_bytes(), "issues.json")
    for text, numbers, source in [
        ("Fixes #7; see #9", [7], CLOSED_ISSUE),
        ("resolved #12, see #9 and #7", [9, 7], MENTIONED_ISSUE),  # #12 is not in the file
        ("<!-- fixes #7 --> Median", [], COMMIT_MESSAGE),
        ("Closes acme/other#7, name#8, &#9;", [], COMMIT_MESSAGE),
        ("Merge pull request #10 from someone/topic", [], COMMIT_MESSAGE),
    ]:
        linked, found = linked_issues(text, issues)
        assert ([i.number for i in linked], found) == (numbers, source), text


def test_the_problem_statement_is_the_issue_s_text_with_its_earlier_comments_as_hints_else_the_message(calc):
    fix, partly, merge = made(calc).records
    assert (fix.problem_statement_source, fix.issue_numbers) == (CLOSED_ISSUE, ("7",))
    assert fix.problem_statement == "mean() is wrong\nmean([1, 2, 3, 4]) is 3.33\n"
    assert fix.hints_text == "It divides by n - 1."  # the comment made after the fix is not a hint
    assert (partly.problem_statement_source, partly.issue_numbers) == (MENTIONED_ISSUE, ("9",))
    # the merge: "closes #8" in a merged commit's message (its pull request's commits); the comment
    # came before the branch's first commit
    assert (merge.problem_statement_source, merge.problem_statement, merge.hints_text) == (CLOSED_ISSUE, "median([]) fails badly\n\n", "An IndexError.")
    history = History(calc["repo"], calc["path"])
    alone = tm.make_tasks(history, [calc["commits"]["fix"]], "acme/calc").records[0]
    assert (alone.problem_statement, alone.problem_statement_source, alone.hints_text) == (
        "Make mean divide by the count\n\nFixes #7; see #9 for the other one.\n", COMMIT_MESSAGE, "")


def invoke(capsys, *args) -> tuple[int, str, str]:
    """`magis-ray tasks make ARGS` in this process (tests/commands.py)."""
    done = in_process(capsys, "tasks", "make", *args)
    return done.code, done.out, done.err


def test_the_command_writes_records_the_dataset_reader_reads_and_the_reasons_beside_them(calc, tmp_path, capsys):
    out = tmp_path / "candidates.jsonl"
    code, stdout, stderr = invoke(capsys, "--repo", calc["path"], "--out", out, "--issues", calc["issues"],
                                  "--repo-name", "acme/calc")
    assert (code, stderr) == (0, "")
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [list(line)[:12] for line in lines] == [SWEBENCH_FIELDS] * 3
    instances, errors = load_dataset(out)
    assert errors == [] and [i.instance_id for i in instances] == [line["instance_id"] for line in lines]
    assert all(i.fail_to_pass == () and i.pass_to_pass == () and i.test_patch for i in instances)
    passed = [json.loads(line) for line in (tmp_path / "candidates.passed-over.jsonl").read_text().splitlines()]
    assert len(passed) == 9 and passed[0] == {"commit": calc["commits"]["first"], "subject": "initial", "reason": tm.NO_PARENT}
    assert "acme/calc: 12 commits of HEAD's first-parent history" in stdout
    assert "candidates: 3 (problem statement from: issue 2, mentioned issue 1); 1 with binary" in stdout
    assert f"     2  {tm.CODE_LEFT_OUT}" in stdout and len(stdout.splitlines()) < 20


def test_a_record_swebench_made_reads_as_a_task_record_and_writes_back_the_same(calc):
    ours = json.loads(msgspec.json.encode(made(calc).records[0]))
    theirs = {name: ours[name] for name in SWEBENCH_FIELDS}
    theirs["FAIL_TO_PASS"] = json.dumps(["tests/test_calc.py::test_one"])
    record = msgspec.json.decode(json.dumps(theirs), type=TaskRecord)
    assert (record.commit, record.problem_statement_source, record.left_out) == ("", "", ())
    assert {k: v for k, v in json.loads(msgspec.json.encode(record)).items() if k in SWEBENCH_FIELDS} == theirs


def test_dates_and_a_commits_file_choose_the_commits_and_a_bare_mirror_s_name_is_given(calc, tmp_path, capsys):
    c = calc["commits"]
    mirror = tmp_path / "calc.git"
    git("clone", "--quiet", "--bare", str(calc["path"]), str(mirror), cwd=tmp_path)
    out = tmp_path / "out.jsonl"
    code, stdout, _ = invoke(capsys, "--repo", mirror, "--out", out, "--repo-name", "acme/calc", "--since", at(1)[:10],
                             "--until", at(5)[:10])
    assert code == 0 and "5 commits" in stdout  # fix .. partly_binary, the --until day included
    assert [json.loads(line)["commit"] for line in out.read_text().splitlines()] == [c["fix"], c["partly_binary"]]
    listed = tmp_path / "commits.txt"
    listed.write_text(f"# the merge, by revision, and the fix twice\nHEAD~1\n{c['fix']}\n{c['fix'][:10]}  # again\n")
    code, stdout, _ = invoke(capsys, "--repo", mirror, "--out", out, "--repo-name", "acme/calc", "--commits", listed)
    assert code == 0 and [json.loads(line)["commit"] for line in out.read_text().splitlines()] == [c["merge"], c["fix"]]


def test_a_range_with_no_candidate_writes_no_record_and_says_why(calc, tmp_path, capsys):
    listed = tmp_path / "commits.txt"
    listed.write_text("\n".join(calc["commits"][name] for name in ("docs", "tests_only", "empty")) + "\n")
    out = tmp_path / "none.jsonl"
    code, stdout, _ = invoke(capsys, "--repo", calc["path"], "--out", out, "--repo-name", "acme/calc", "--commits", listed)
    assert code == 0 and out.read_text() == "" and "candidates: 0\n" in stdout
    assert len((tmp_path / "none.passed-over.jsonl").read_text().splitlines()) == 3


def test_the_repository_s_name_is_read_from_its_origin_remote(calc, tmp_path, capsys):
    clone = tmp_path / "clone"
    git("clone", "--quiet", str(calc["path"]), str(clone), cwd=tmp_path)
    git("remote", "set-url", "origin", "git@github.com:acme/calc.git", cwd=clone)
    code, stdout, _ = invoke(capsys, "--repo", clone, "--out", tmp_path / "c.jsonl", "--issues", calc["issues"])
    assert code == 0 and stdout.startswith("acme/calc: ")
    assert json.loads((tmp_path / "c.jsonl").read_text().splitlines()[0])["instance_id"].startswith("acme__calc-")


def test_bad_input_is_one_line_exit_2_and_nothing_written(calc, tmp_path, capsys):
    out = tmp_path / "kept.jsonl"
    out.write_text("earlier\n")
    (tmp_path / "plain").mkdir()
    malformed = tmp_path / "malformed.json"
    malformed.write_text('[{"number": "seven", "title": "x"}]')
    other = tmp_path / "other.json"
    other.write_text(json.dumps([{**ISSUES[0], "url": "https://github.com/acme/other/issues/7"}]))
    unknown = tmp_path / "unknown.txt"
    unknown.write_text(f"{calc['commits']['fix']}\n{'f' * 40}\n")
    base = ["--out", out, "--repo-name", "acme/calc"]
    cases = [
        (["--repo", tmp_path / "plain", *base], "not a git repository"),
        (["--repo", calc["path"], *base, "--since", "2030-01-01"], "no commits to read"),
        (["--repo", calc["path"], *base, "--issues", malformed], "malformed.json: not the JSON list"),
        (["--repo", calc["path"], *base, "--issues", other], "issue #7 is one of acme/other, not of acme/calc"),
        (["--repo", calc["path"], *base, "--commits", unknown], f"commit {'f' * 40} not found"),
        (["--repo", calc["path"], "--out", out], "give --repo-name OWNER/NAME"),
        (["--repo", calc["path"], *base, "--since", "last week"], "is not an ISO 8601 date"),
    ]
    for args, words in cases:
        code, stdout, stderr = invoke(capsys, *args)
        assert code == 2 and stderr.startswith("magis-ray: error: ") and words in stderr and len(stderr.splitlines()) == 1, (args, stderr)
        assert out.read_text() == "earlier\n" and not (tmp_path / "kept.passed-over.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.jsonl", "malformed.json", "other.json", "plain", "unknown.txt"]
