"""The oracle (actors/swebench/oracle.py) through the whole real pipeline: a real git repository, gold
patches made by `git diff`, the real gateway over HTTP to the scripted server, a real SQLite
store. Each run's diff must apply to the base commit and leave the tree exactly as the gold
patch leaves it (both applied by `git apply` to fresh checkouts, compared byte for byte)."""
from __future__ import annotations

from pathlib import Path

import pytest
from gitfixtures import checkout, git, make_repo, read_tree_files

from magis_ray.actors.code.edits import apply_edits
from magis_ray.actors.swebench.oracle import build_oracle, compare_with_gold, gold_edits, run_oracle
from magis_ray.actors.swebench.instances import Instance
from magis_ray.events.projections import final_diff, fold
from magis_ray.events.schema import FilesLocated, RunFinished, RunSettings, TaskDefined
from magis_ray.store import open_store

PARSER = '''"""Parse simple key=value configuration files."""


def parse_line(line):
    """Split one line into a key and a value."""
    key, value = line.split("=", 1)
    return key.strip(), value.strip()


def parse_config(text):
    """Every key and value of the configuration text."""
    result = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, value = parse_line(line)
        result[key] = value
    return result


def dump_config(config):
    return "\\n".join(f"{key}={value}" for key, value in config.items())
'''

UNITS = '''"""Unit conversions for the configuration values."""

FACTORS = {"kb": 1024, "mb": 1024 ** 2}


def to_bytes(text):
    number, unit = text[:-2], text[-2:].lower()
    return int(number) * FACTORS[unit]'''  # ends without a newline

FILES = {
    "confkit/__init__.py": "",
    "confkit/parser.py": PARSER,
    "confkit/units.py": UNITS,
    "confkit/cli.py": 'import sys\n\nfrom .parser import parse_config\n\n\ndef main():\n    print(parse_config(sys.stdin.read()))\n',
    "README.md": "# confkit\n",
}

ISSUE = "parse_config crashes on comment lines: parse_line splits `# note` and the config parser fails."


def replace(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new, 1)


CASES = {
    "pure-insertion": {
        "confkit/parser.py": replace(PARSER, "        if not line.strip():\n",
                                     "        if line.lstrip().startswith(\"#\"):\n            continue\n        if not line.strip():\n"),
    },
    "pure-deletion": {
        "confkit/parser.py": replace(PARSER, "        if not line.strip():\n            continue\n", ""),
    },
    "several-hunks": {
        "confkit/parser.py": replace(replace(replace(
            PARSER, '"""Parse simple key=value configuration files."""', '"""Parse key=value configuration files, with comments."""'),
            "    key, value = line.split(\"=\", 1)\n", "    line = line.split(\"#\", 1)[0]\n    key, value = line.split(\"=\", 1)\n"),
            "def dump_config(config):\n", "def dump_config(config, sep=\"=\"):\n    \"\"\"The configuration as text.\"\"\"\n"),
    },
    "several-files": {
        "confkit/parser.py": replace(PARSER, "        if not line.strip():\n", "        if not line.strip() or line.startswith(\"#\"):\n"),
        "confkit/cli.py": FILES["confkit/cli.py"].replace("def main():\n", "def main():\n    \"\"\"Print the parsed configuration.\"\"\"\n"),
    },
    "new-file": {
        "confkit/comments.py": '"""Comment handling."""\n\n\ndef strip_comment(line):\n    return line.split("#", 1)[0]\n',
        "confkit/parser.py": replace(PARSER, '"""Parse simple key=value configuration files."""\n',
                                     '"""Parse simple key=value configuration files."""\nfrom .comments import strip_comment\n'),
    },
    "end-without-newline-kept": {
        "confkit/units.py": UNITS.replace("int(number) * FACTORS[unit]", "int(number.strip()) * FACTORS[unit]"),
    },
    "end-without-newline-gets-one": {
        "confkit/units.py": UNITS.replace("FACTORS[unit]", "FACTORS[unit]\n\n\ndef kilobytes(n):\n    return n * 1024\n"),
    },
}


@pytest.fixture(scope="module")
def confkit(tmp_path_factory):
    path = tmp_path_factory.mktemp("confkit") / "repo"
    repo, base = make_repo(path, FILES, "confkit")
    return repo, base, path


def gold_patch(repo, base: str, changes: dict[str, str | None], work: Path) -> str:
    """The real `git diff` of `changes` made to a checkout of `base`."""
    tree = checkout(repo, base, work)
    for path, text in changes.items():
        target = tree / path
        if text is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text.encode())
    git("add", "-A", cwd=tree)
    return git("diff", "--cached", cwd=tree)


def instance_for(base: str, patch: str, issue: str = ISSUE) -> Instance:
    return Instance(instance_id="confkit__confkit-1", repo="confkit/confkit", base_commit=base, problem_statement=issue, patch=patch)


def run(instance: Instance, repo_path: Path, tmp_path: Path, settings: RunSettings):
    store = open_store(str(tmp_path / "store"), create=True)
    end = run_oracle(instance, str(repo_path), store, "oracle-run", settings)
    events = store.read("oracle-run")
    store.close()
    return end, events


def tree_after(repo, base: str, patch: str, work: Path) -> dict[str, bytes]:
    tree = checkout(repo, base, work)
    (work.parent / f"{work.name}.diff").write_text(patch)
    git("apply", str(work.parent / f"{work.name}.diff"), cwd=tree)
    return read_tree_files(tree)


@pytest.mark.parametrize("case", list(CASES))
def test_the_oracle_reproduces_the_gold_patch_through_the_whole_pipeline(case, confkit, tmp_path):
    repo, base, repo_path = confkit
    patch = gold_patch(repo, base, CASES[case], tmp_path / "gold-work")
    instance = instance_for(base, patch)
    end, events = run(instance, repo_path, tmp_path, RunSettings(tests=False, top_k=3))

    assert isinstance(end, RunFinished) and end.outcome == "patched"
    diff = final_diff(fold(events))
    assert tree_after(repo, base, diff, tmp_path / "run") == tree_after(repo, base, patch, tmp_path / "gold")
    assert compare_with_gold(str(repo_path), instance, diff).identical
    tasks = [e.event for e in events if isinstance(e.event, TaskDefined)]
    assert sorted(t.path for t in tasks) == sorted(CASES[case])  # one task per gold file


def test_gold_files_bm25_misses_still_get_their_tasks(confkit, tmp_path):
    """An issue whose words match no gold file: the top candidate is judged relevant, and the
    gold files reach the Manager's plan as `new_files` (existing paths: ordinary tasks)."""
    repo, base, repo_path = confkit
    changes = CASES["several-files"]
    patch = gold_patch(repo, base, changes, tmp_path / "gold-work")
    instance = instance_for(base, patch, issue="to_bytes gives wrong unit FACTORS for mb.")  # words of units.py only
    oracle = build_oracle(instance, str(repo_path), RunSettings(tests=False, top_k=1))
    assert oracle.candidates == ["confkit/units.py"] and oracle.team.relevant == {"confkit/units.py"}
    end, events = run(instance, repo_path, tmp_path, RunSettings(tests=False, top_k=1))
    assert isinstance(end, RunFinished) and end.outcome == "patched"
    [located] = [e.event for e in events if isinstance(e.event, FilesLocated)]
    assert located.paths == oracle.candidates[:1]
    tasks = {e.event.path: e.event for e in events if isinstance(e.event, TaskDefined)}
    assert set(tasks) == set(changes) and all(t.base_blob_id for t in tasks.values())
    assert compare_with_gold(str(repo_path), instance, final_diff(fold(events))).identical


def test_more_gold_files_than_the_custodian_keeps(confkit, tmp_path):
    repo, base, repo_path = confkit
    patch = gold_patch(repo, base, CASES["several-files"], tmp_path / "gold-work")
    instance = instance_for(base, patch)
    end, events = run(instance, repo_path, tmp_path, RunSettings(tests=False, top_k=3, max_files=1))
    [located] = [e.event for e in events if isinstance(e.event, FilesLocated)]
    assert len(located.paths) == 1
    assert compare_with_gold(str(repo_path), instance, final_diff(fold(events))).identical


def test_a_gold_patch_removing_the_final_newline_is_a_named_limit(confkit, tmp_path):
    """apply_edits cannot drop a file's final newline: the oracle says so up front, and the
    comparison names exactly that file."""
    repo, base, repo_path = confkit
    changes = {"confkit/parser.py": PARSER.rstrip("\n").replace("def dump_config(config):", "def dump_config(config, sep='='):")}
    patch = gold_patch(repo, base, changes, tmp_path / "gold-work")
    assert "\\ No newline at end of file" in patch
    instance = instance_for(base, patch)
    assert build_oracle(instance, str(repo_path), RunSettings(tests=False, top_k=3)).limits == {
        "confkit/parser.py": "ends without the final newline apply_edits gives it"
    }
    end, events = run(instance, repo_path, tmp_path, RunSettings(tests=False, top_k=3))
    comparison = compare_with_gold(str(repo_path), instance, final_diff(fold(events)))
    assert comparison.applies and comparison.differing == ("confkit/parser.py",)


def test_compare_with_gold_tells_apart_wrong_and_unapplicable_diffs(confkit, tmp_path):
    repo, base, repo_path = confkit
    patch = gold_patch(repo, base, CASES["pure-insertion"], tmp_path / "gold-work")
    other = gold_patch(repo, base, CASES["pure-deletion"], tmp_path / "other-work")
    instance = instance_for(base, patch)
    assert compare_with_gold(str(repo_path), instance, patch).identical
    wrong = compare_with_gold(str(repo_path), instance, other)
    assert wrong.applies and not wrong.identical and wrong.differing == ("confkit/parser.py",)
    broken = compare_with_gold(str(repo_path), instance, other.replace("if not line.strip()", "if not line"))
    assert not broken.applies and "patch does not apply" in broken.reason


@pytest.mark.parametrize(
    "base, new, limit",
    [
        ("a\nb\n", "a\nB\n", ""),
        ("a\nb", "a\nB", ""),  # no final newline before or after: reproduced
        ("a\nb", "a\nb\nc\n", ""),
        ("a\nb\n", "a\nB", "ends without the final newline apply_edits gives it"),
        ("", "new file without newline", "ends without the final newline apply_edits gives it"),
        ("a\r\nb\r\n", "a\r\nnew\nb\r\n", "line endings apply_edits normalizes (\\n lines in a \\r\\n file)"),
    ],
)
def test_gold_edits_reproduce_the_gold_text_or_say_why_not(base, new, limit):
    edits, why = gold_edits(base, new)
    assert why == limit
    assert (apply_edits(base, edits) == new) == (not limit)
