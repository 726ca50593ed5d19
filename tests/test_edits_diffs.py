"""Line edits (actors/code/edits.py) and git-style diffs (actors/code/diffs.py), the diffs checked by real git."""
from __future__ import annotations

import random
import re
import subprocess

import pytest
from gitfixtures import checkout, git, make_repo, read_tree_files

from magis_ray.actors.code.diffs import changed_line_ranges, file_diff, join_diffs
from magis_ray.actors.code.edits import (
    InvalidEdits,
    apply_edits,
    check_ranges,
    count_lines,
    edits_from_texts,
    numbered,
    split_lines,
)
from magis_ray.events.schema import Edit, LineRange


def lines(n: int, prefix: str = "line") -> str:
    return "".join(f"{prefix} {i}\n" for i in range(1, n + 1))


def edit(start: int, end: int, code: str) -> Edit:
    return Edit(range=LineRange(start, end), new_code=code)


# --- splitting and numbering ----------------------------------------------------------------


def test_split_lines_only_on_newline_and_keeps_endings():
    assert split_lines("") == []
    assert split_lines("a") == ["a"]
    assert split_lines("a\n") == ["a\n"]
    assert split_lines("a\r\nb\x0cc\u2028d\n\n") == ["a\r\n", "b\x0cc\u2028d\n", "\n"]
    assert count_lines("a\nb") == 2 and count_lines("a\nb\n") == 2 and count_lines("\n") == 1


def test_numbered_shows_base_line_numbers():
    assert numbered("def f():\n\n    return 1\n") == "   1 | def f():\n   2 |\n   3 |     return 1"
    assert numbered("x\r\ny", start=9999) == " 9999 | x\n10000 | y"  # widens for 5 digits
    assert numbered("") == ""


# --- check_ranges ---------------------------------------------------------------------------


def test_check_ranges_accepts_valid_ranges_including_touching_insertions():
    check_ranges(
        [
            LineRange(1, 0),  # insert at the top
            LineRange(1, 3),  # then replace lines 1-3
            LineRange(4, 3),  # insert right after them
            LineRange(5, 5),
            LineRange(33, 32),  # append at the end
        ],
        32,
    )
    check_ranges([LineRange(1, 0)], 0)
    check_ranges([], 0)


@pytest.mark.parametrize(
    ("ranges", "line_count", "message"),
    [
        ([LineRange(40, 55)], 32, "range 40-55 is outside the file's 1-32 lines"),
        ([LineRange(30, 33)], 32, "range 30-33 is outside the file's 1-32 lines"),
        ([LineRange(34, 33)], 32, "insertion before line 34 (range 34-33) is outside"),
        ([LineRange(1, 1)], 0, "outside the file, which is empty (insert with range 1-0)"),
        ([LineRange(0, 3)], 32, "range 0-3 starts before line 1"),
        ([LineRange(10, 5)], 32, "range 10-5 ends before it starts"),
        ([LineRange(10, 20), LineRange(15, 25)], 32, "range 10-20 and range 15-25 overlap"),
        ([LineRange(5, 5), LineRange(5, 5)], 32, "range 5-5 and range 5-5 overlap"),
        ([LineRange(10, 20), LineRange(12, 11)], 32, "overlap"),  # inserting inside a replacement
        ([LineRange(7, 6), LineRange(7, 6)], 32, "insertion before line 7 (range 7-6) and"),
    ],
)
def test_check_ranges_explains_what_is_wrong(ranges, line_count, message):
    with pytest.raises(InvalidEdits) as caught:
        check_ranges(ranges, line_count)
    assert message in str(caught.value)


def test_check_ranges_reports_every_problem_at_once():
    with pytest.raises(InvalidEdits) as caught:
        check_ranges([LineRange(0, 1), LineRange(50, 50), LineRange(2, 4), LineRange(3, 3)], 10)
    assert str(caught.value).count(";") == 2


# --- apply_edits ----------------------------------------------------------------------------


def test_replace_one_line():
    assert apply_edits("a\nb\nc\n", [edit(2, 2, "B\n")]) == "a\nB\nc\n"


def test_new_code_without_newline_gets_one_in_the_middle():
    assert apply_edits("a\nb\nc\n", [edit(2, 2, "B1\nB2")]) == "a\nB1\nB2\nc\n"


def test_pure_insertions_at_top_middle_and_end():
    base = "a\nb\n"
    assert apply_edits(base, [edit(1, 0, "top")]) == "top\na\nb\n"
    assert apply_edits(base, [edit(2, 1, "mid\n")]) == "a\nmid\nb\n"
    assert apply_edits(base, [edit(3, 2, "end")]) == "a\nb\nend\n"


def test_deletion():
    assert apply_edits(lines(5), [edit(2, 4, "")]) == "line 1\nline 5\n"
    assert apply_edits("only\n", [edit(1, 1, "")]) == ""


def test_several_hunks_use_base_line_numbers():
    base = lines(10)
    result = apply_edits(
        base,
        # given out of order; each range means the base file's lines
        [edit(9, 9, "nine\n"), edit(2, 2, "two a\ntwo b\ntwo c\n"), edit(5, 6, ""), edit(11, 10, "end\n")],
    )
    expected = base.replace("line 2\n", "two a\ntwo b\ntwo c\n").replace("line 5\nline 6\n", "")
    expected = expected.replace("line 9\n", "nine\n") + "end\n"
    assert result == expected


def test_insertion_next_to_a_replacement_keeps_reading_order():
    base = "a\nb\nc\n"
    assert apply_edits(base, [edit(2, 2, "B\n"), edit(2, 1, "before B\n"), edit(3, 2, "after B\n")]) == (
        "a\nbefore B\nB\nafter B\nc\n"
    )


def test_end_of_file_without_trailing_newline():
    base = "a\nb"
    assert apply_edits(base, [edit(2, 2, "B")]) == "a\nB"  # stays without newline
    assert apply_edits(base, [edit(2, 2, "B\n")]) == "a\nB\n"  # unless the code brings one
    assert apply_edits(base, [edit(3, 2, "c")]) == "a\nb\nc"  # appended: b now ends its line
    assert apply_edits(base, [edit(1, 1, "A")]) == "A\nb"
    assert apply_edits(base, [edit(2, 2, "")]) == "a\n"


def test_end_of_file_with_trailing_newline_keeps_it():
    assert apply_edits("a\nb\n", [edit(2, 2, "B")]) == "a\nB\n"
    assert apply_edits("a\nb\n", [edit(3, 2, "c")]) == "a\nb\nc\n"


def test_empty_and_new_files():
    assert apply_edits("", []) == ""
    assert apply_edits("", [edit(1, 0, "def f():\n    return 1")]) == "def f():\n    return 1\n"
    assert apply_edits("", [edit(1, 0, "")]) == ""
    with pytest.raises(InvalidEdits):
        apply_edits("", [edit(1, 1, "x")])


def test_crlf_file_keeps_crlf():
    base = "a\r\nb\r\nc\r\n"
    assert apply_edits(base, [edit(2, 2, "B1\nB2")]) == "a\r\nB1\r\nB2\r\nc\r\n"
    assert apply_edits(base, [edit(4, 3, "d")]) == "a\r\nb\r\nc\r\nd\r\n"
    # a file mixing endings is left to the code's own endings, joined with the majority's
    mixed = "a\r\nb\nc\r\n"
    assert apply_edits(mixed, [edit(2, 2, "B")]) == "a\r\nB\r\nc\r\n"


def test_invalid_edits_change_nothing_and_raise():
    with pytest.raises(InvalidEdits, match="range 3-4 is outside the file's 1-2 lines"):
        apply_edits("a\nb\n", [edit(3, 4, "x")])


# --- edits_from_texts ------------------------------------------------------------------------


def test_edits_from_texts_finds_minimal_hunks():
    base = lines(10)
    new = base.replace("line 3\n", "three\n").replace("line 7\n", "").replace("line 9\n", "line 9\nnew\n")
    assert edits_from_texts(base, new) == [edit(3, 3, "three\n"), edit(7, 7, ""), edit(10, 9, "new\n")]
    assert edits_from_texts(base, base) == []
    assert edits_from_texts("", "a\n") == [edit(1, 0, "a\n")]
    assert edits_from_texts("a\n", "") == [edit(1, 1, "")]


def _is_documented_exception(old: str, new: str) -> bool:
    """See edits_from_texts: a final newline old had is put back; LF code in an all-CRLF file."""
    lost_final_newline = new and not new.endswith("\n") and (old == "" or old.endswith("\n"))
    lf_into_crlf = "\r\n" in old and old.count("\r\n") == old.count("\n")
    return bool(lost_final_newline or lf_into_crlf)


def _random_text(rng: random.Random) -> str:
    vocabulary = ["a", "b", "c", "", "def f():", "    return 1", "x = 1", "# c"]
    text = "\n".join(rng.choice(vocabulary) for _ in range(rng.randint(0, 12)))
    if text and rng.random() < 0.6:
        text += "\n"
    return text


def test_apply_edits_from_texts_round_trips():
    rng = random.Random(20240317)
    cases = [
        ("", ""),
        ("a", "a\n"),  # old has no final newline, new has
        ("a\nb", "a\nc"),  # neither has
        ("a\nb", "a\nb\nc"),
        ("a\nb", "a"),
        ("a\nb\n", "a\nb\n"),
        ("a\r\nb\n", "a\r\nc\n"),
        ("x\n" * 30, "x\n" * 12 + "y\n" + "x\n" * 18),
        ("\n\n\n", "\n"),
    ] + [(_random_text(rng), _random_text(rng)) for _ in range(3000)]
    checked = 0
    for old, new in cases:
        result = apply_edits(old, edits_from_texts(old, new))
        if _is_documented_exception(old, new):
            if "\r\n" not in old:
                assert result == new + "\n", (old, new)
            continue
        assert result == new, (old, new)
        checked += 1
    assert checked > 2000  # the exceptions are a minority


# --- file_diff and join_diffs against real git -----------------------------------------------

BASE = {
    "one.py": lines(10),
    "hunks.py": lines(40),
    "nonl.py": "a = 1\nb = 2",
    "gone.py": lines(3),
    "gone_empty.txt": "",
    "dir with space/m.py": lines(2),
    "pkg/café.py": "x = 'é'\n",
    "dashes.txt": "-- x\n--- y\n+++ z\nkeep\n",
}

# name -> (path, new text or None for a deletion, expected changed_line_ranges of the diff)
CASES = {
    "one line": ("one.py", lines(10).replace("line 5\n", "five\n"), [(5, 5)]),
    "insertion": ("one.py", lines(10).replace("line 3\n", "line 3\nnew a\nnew b\n"), [(4, 3)]),
    "deletion": ("one.py", lines(10).replace("line 4\nline 5\nline 6\n", ""), [(4, 6)]),
    "several hunks": (
        "hunks.py",
        lines(40).replace("line 2\n", "two\n").replace("line 20\n", "").replace("line 38\n", "x\ny\n"),
        [(2, 2), (20, 20), (38, 38)],
    ),
    "two runs in one hunk": ("one.py", lines(10).replace("line 4\n", "4\n").replace("line 7\n", "7\n"), [(4, 4), (7, 7)]),
    "new file": ("pkg/new.py", "def f():\n    return 1\n", [(1, 0)]),
    "new empty file": ("pkg/empty.py", "", []),
    "new file without final newline": ("pkg/nonl_new.py", "x = 1", [(1, 0)]),
    "deleted file": ("gone.py", None, [(1, 3)]),
    "deleted empty file": ("gone_empty.txt", None, []),
    "last line without newline changed": ("nonl.py", "a = 1\nb = 3", [(2, 2)]),
    "append after last line without newline": ("nonl.py", "a = 1\nb = 2\nc = 3\n", [(2, 2)]),
    "newline added at end": ("nonl.py", "a = 1\nb = 2\n", [(2, 2)]),
    "final newline removed": ("one.py", lines(10)[:-1], [(10, 10)]),
    "path with a space": ("dir with space/m.py", "line 1\nLINE 2\n", [(2, 2)]),
    "non-ascii path": ("pkg/café.py", "x = 'ü'\n", [(1, 1)]),
    "lines that look like headers": ("dashes.txt", "keep\n", [(1, 3)]),
}


@pytest.fixture(scope="module")
def base_repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("diffs")
    repo, commit = make_repo(root / "repo", BASE)
    return repo, commit, root


def _apply_in_checkout(base_repo, name: str, diff: str):
    repo, commit, root = base_repo
    work = checkout(repo, commit, root / ("work-" + re.sub(r"\W+", "-", name)))
    patch = work.parent / f"{work.name}.patch"
    patch.write_text(diff, encoding="utf-8", newline="")
    git("apply", "--check", str(patch), cwd=work)
    git("apply", str(patch), cwd=work)
    return read_tree_files(work)


def _expected_tree(changes: dict[str, str | None]) -> dict[str, bytes]:
    files = {path: text.encode() for path, text in BASE.items()}
    for path, text in changes.items():
        if text is None:
            files.pop(path)
        else:
            files[path] = text.encode()
    return dict(sorted(files.items()))


@pytest.mark.parametrize("name", list(CASES))
def test_file_diff_applies_with_git_byte_for_byte(base_repo, name):
    path, new_text, expected_ranges = CASES[name]
    diff = file_diff(path, BASE.get(path), new_text)
    assert diff.startswith("diff --git ")  # git-quoted for the non-ASCII path
    assert _apply_in_checkout(base_repo, name, diff) == _expected_tree({path: new_text})
    assert changed_line_ranges(diff) == {path: expected_ranges}


def test_file_diff_headers_for_new_deleted_and_open_ended_files():
    new = file_diff("n.py", None, "x\n")
    assert "new file mode 100644\n" in new and "--- /dev/null\n+++ b/n.py\n" in new
    deleted = file_diff("d.py", "x\n", None)
    assert "deleted file mode 100644\n" in deleted and "--- a/d.py\n+++ /dev/null\n" in deleted
    assert "\\ No newline at end of file\n" in file_diff("e.py", "a\nb", "a\nc")
    assert "Binary" not in file_diff("z.txt", "a\x00b\n", "a\x00c\n")


def test_file_diff_is_empty_when_nothing_changes():
    assert file_diff("a.py", "x\n", "x\n") == ""
    assert file_diff("a.py", None, None) == ""


def test_joined_diff_of_several_files_applies_at_once(base_repo):
    changes = {
        "one.py": CASES["one line"][1],
        "hunks.py": CASES["several hunks"][1],
        "pkg/new.py": CASES["new file"][1],
        "pkg/empty.py": "",
        "gone.py": None,
        "nonl.py": CASES["append after last line without newline"][1],
    }
    diffs = [file_diff(path, BASE.get(path), text) for path, text in changes.items()]
    diffs.append(file_diff("unchanged.py", "same\n", "same\n"))
    joined = join_diffs(diffs)
    assert joined.count("diff --git ") == len(changes)
    assert _apply_in_checkout(base_repo, "joined", joined) == _expected_tree(changes)
    ranges = changed_line_ranges(joined)
    assert list(ranges) == list(changes)
    assert ranges["gone.py"] == [(1, 3)] and ranges["pkg/new.py"] == [(1, 0)]


def test_changed_line_ranges_reads_gits_own_diff(base_repo):
    repo, commit, root = base_repo
    work = checkout(repo, commit, root / "git-diff")
    (work / "hunks.py").write_text(CASES["several hunks"][1])
    (work / "gone.py").unlink()
    (work / "pkg" / "café.py").write_text("y = 2\n", encoding="utf-8")
    diff = git("diff", cwd=work)  # quotes the non-ASCII path: "a/pkg/caf\303\251.py"
    assert '"a/pkg/caf\\303\\251.py"' in diff
    assert changed_line_ranges(diff) == {
        "gone.py": [(1, 3)],
        "hunks.py": [(2, 2), (20, 20), (38, 38)],
        "pkg/café.py": [(1, 1)],
    }


def test_changed_line_ranges_rejects_a_broken_hunk():
    with pytest.raises(ValueError, match="malformed hunk line"):
        changed_line_ranges("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\n?b\n")


def test_git_apply_rejects_a_diff_against_other_content(base_repo):
    """The byte-for-byte checks above can fail: git does refuse a diff that does not fit."""
    diff = file_diff("one.py", lines(10, prefix="other"), lines(10))
    with pytest.raises(subprocess.CalledProcessError):
        _apply_in_checkout(base_repo, "mismatch", diff)
