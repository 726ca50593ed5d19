"""The read commands of `magis-ray` (runs, events, diff, audit) against a real SQLite store holding
the constructed run, in this process as the console script runs them (tests/commands.py); every
bad input ends in one line on stderr and exit code 2. As processes of their own: the console script
and the module both run, --help does not import the heavy modules, and a pipe closed early."""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from commands import MAGIS as MODULE, Done, command_environment, in_process
from runs import MEETING, REVIEW_APPROVAL, REVIEW_REJECTION, constructed_run, fixed_new_events, repo_for

from magis_ray.events.codec import decode_recorded
from magis_ray.events.projections import audit_json, audit_markdown, final_diff, fold
from magis_ray.store.sqlite import DB_NAME, SQLiteStore

RUN = "a1b2c3d4e5f6"  # the constructed run
OTHER = "a1b2ff000011"  # a second run (both texts fixed), sharing the prefix "a1b2"
GOLDEN = Path(__file__).parent / "golden"
SCRIPT = Path(sys.executable).parent / "magis-ray"
CONSOLE_SCRIPT = [str(SCRIPT)] if SCRIPT.is_file() else ([shutil.which("magis-ray")] if shutil.which("magis-ray") else MODULE)
HEAVY = ("ray", "openai", "pygit2")


def _env() -> dict[str, str]:
    """A process's environment: no store named by the environment, the log at its default."""
    return command_environment({"PYTHONIOENCODING": "utf-8"}, without=("MAGIS_STORE", "MAGIS_LOG_LEVEL"))


def process(*args: str, command: list[str] = CONSOLE_SCRIPT, **env: str) -> subprocess.CompletedProcess:
    """The installed console script (or `command`) as a process of its own, its output as text."""
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True, env={**_env(), **env}, timeout=60)


@pytest.fixture
def cli(capsys, monkeypatch):
    """`magis-ray ARGS` in this process, in the folder `cwd` if given, with no store named by the
    environment."""
    monkeypatch.delenv("MAGIS_STORE", raising=False)

    def run(*args, cwd: Path | None = None) -> Done:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        return in_process(capsys, *args)

    return run


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A store folder with two runs; the connection is closed, so the database is one file."""
    root = tmp_path_factory.mktemp("cli")
    repo_path, base = repo_for(root)
    path = root / "store"
    with SQLiteStore.open(path, create=True) as s:
        s.append(RUN, 0, fixed_new_events(constructed_run(repo_path, base)))
        s.append(OTHER, 0, fixed_new_events(constructed_run(repo_path, base, fix_texts=True), start=1_700_100_000.0))
    assert sorted(p.name for p in path.iterdir()) == [DB_NAME]  # the WAL was checkpointed on close
    return path


@pytest.fixture(scope="module")
def recorded(store) -> list:
    with SQLiteStore.open(store) as s:
        return s.read(RUN)


def ok(result: subprocess.CompletedProcess | Done) -> str:
    code, out, err = (result.code, result.out, result.err) if isinstance(result, Done) else (result.returncode, result.stdout, result.stderr)
    assert code == 0, err
    assert "Traceback" not in out + err
    return out


def one_line_error(result: Done) -> str:
    """The error line, after checking it is the only thing on stderr, with exit code 2."""
    out, err = result.out, result.err
    assert "Traceback" not in out + err, err
    assert result.code == 2, (result.code, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("magis-ray: error: "), err
    assert out == ""
    return lines[0]


# --- the command and its entry points --------------------------------------------------------


def test_the_console_script_and_the_module_both_run():
    assert SCRIPT.is_file() or shutil.which("magis-ray"), "the magis-ray console script is not installed"
    for command in ([str(SCRIPT) if SCRIPT.is_file() else shutil.which("magis-ray")], MODULE):
        out = ok(process("--help", command=command))
        assert "Usage: magis-ray" in out
        for name in ("runs", "events", "diff", "audit"):
            assert name in out


def _imported(stderr: str) -> set[str]:
    """Module names from `python -X importtime` output ("import time: self | cumulative | name")."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


@pytest.mark.parametrize("args", [["--help"], ["audit", "--help"], ["submit", "--help"], ["runs", "--store", "STORE"]],
                         ids=["help", "audit-help", "submit-help", "runs"])
def test_help_and_the_read_commands_import_neither_ray_nor_openai_nor_pygit2(store, args):
    """What makes --help slow is importing the heavy modules; here none of them is imported."""
    args = [str(store) if a == "STORE" else a for a in args]
    result = subprocess.run([sys.executable, "-X", "importtime", *MODULE[1:], *args], capture_output=True, env=_env(), timeout=60)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    names = _imported(result.stderr.decode())
    assert "click" in names  # the parse sees the imports at all
    heavy = sorted(n for n in names if n.split(".")[0] in HEAVY)
    assert heavy == [], f"{' '.join(args)} imports {heavy[:10]}"


# --- reading a run ----------------------------------------------------------------------------


def test_runs_lists_the_runs(store, cli):
    out = ok(cli("runs", "--store", store))
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["RUN", "INSTANCE", "STATUS", "EVENTS", "OUTCOME"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert list(rows) == [RUN, OTHER]  # oldest first
    assert rows[RUN][1:5] == ["calc__calc-2", "finished", "55", "patched"]


def test_runs_last_prints_the_id_of_the_run_started_last(store, tmp_path, cli):
    """What a page's RUN=$(magis-ray runs --last) takes: the id alone, of the newest run."""
    assert ok(cli("runs", "--last", "--store", store)) == OTHER + "\n"
    empty = tmp_path / "empty"
    SQLiteStore.open(empty, create=True).close()
    none = cli("runs", "--last", "--store", empty)
    assert none.code == 2 and none.out == ""
    assert none.err.strip() == f"magis-ray: error: no runs in the store {empty}"


def test_help_lists_every_command_with_its_whole_summary():
    """On an 80-column terminal, each command's one-line summary whole: none cut with an ellipsis."""
    from magis_ray.cli.main import cli as group

    listed = ok(process("--help", COLUMNS="80")).split("Commands:\n", 1)[1]
    assert "..." not in listed, listed
    summaries = dict(line.split(None, 1) for line in listed.splitlines() if line.strip())
    assert summaries == {name: command.short_help for name, command in group.commands.items()}


def test_runs_reads_the_store_from_the_environment(store, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("MAGIS_STORE", str(store))
    assert RUN in ok(cli("runs", cwd=tmp_path))


def test_events_prints_json_lines_that_decode_to_the_stored_events(store, recorded, cli):
    out = ok(cli("events", RUN, "--store", store))
    lines = out.splitlines()
    assert len(lines) == len(recorded)
    assert [decode_recorded(line) for line in lines] == recorded
    assert json.loads(lines[0])["event"]["type"] == "RunStarted"


def test_events_takes_a_unique_run_id_prefix(store, recorded, cli):
    assert ok(cli("events", RUN[:6], "--store", store)) == ok(cli("events", RUN, "--store", store))
    assert [decode_recorded(line) for line in ok(cli("events", "a1b2f", "--store", store)).splitlines()][0].run_id == OTHER


def test_diff_prints_the_final_diff(store, recorded, cli):
    out = ok(cli("diff", RUN, "--store", store))
    assert out == final_diff(fold(recorded))
    assert out.startswith("diff --git a/calc/stats.py b/calc/stats.py\n") and "+    return total / len(values)\n" in out


def test_diff_of_a_run_with_no_patch_says_so_on_stderr(tmp_path, cli):
    from magis_ray.events.codec import new_event
    from magis_ray.events.schema import RunFinished, RunStarted

    with SQLiteStore.open(tmp_path / "s", create=True) as s:
        s.append("nopatch1", 0, [new_event(RunStarted(instance_id="i", repo="o/r", base_commit="c", problem_statement="p"), "supervisor"),
                                 new_event(RunFinished(outcome="no_patch"), "supervisor")])
    result = cli("diff", "nopatch1", "--store", str(tmp_path / "s"))
    assert result.code == 0 and result.out == ""
    assert result.err == "magis-ray: run nopatch1 has no patch (no_patch)\n"


def test_audit_markdown_has_the_meeting_and_the_reviews(store, recorded, cli):
    out = ok(cli("audit", RUN, "--store", store))
    assert out == audit_markdown(fold(recorded))
    for speaker, text in MEETING:
        assert f"**{speaker}:** {text}" in out
    assert REVIEW_REJECTION in out and REVIEW_APPROVAL in out
    assert "## Final diff" in out and "## Timeline" in out


def test_audit_json_is_valid_json_with_the_timeline(store, recorded, cli):
    data = json.loads(ok(cli("audit", RUN, "--format", "json", "--store", store)))
    assert data == json.loads(json.dumps(audit_json(fold(recorded))))
    assert [t["version"] for t in data["timeline"]] == list(range(1, len(recorded) + 1))
    assert data["timeline"][0]["type"] == "RunStarted" and data["timeline"][-1]["type"] == "RunFinished"
    assert data["run_id"] == RUN and data["diff"] == final_diff(fold(recorded))


def test_audit_and_diff_read_an_exported_events_file_without_a_store(store, tmp_path, cli):
    exported = tmp_path / "run.jsonl"
    exported.write_text(cli("events", RUN, "--store", store).out)
    elsewhere = tmp_path / "elsewhere"  # no .magis here: the file alone must do
    elsewhere.mkdir()
    assert ok(cli("audit", exported, cwd=elsewhere)) == ok(cli("audit", RUN, "--store", store))
    assert ok(cli("audit", exported, "--format", "json", cwd=elsewhere)) == ok(cli("audit", RUN, "--format", "json", "--store", store))
    assert ok(cli("diff", exported, cwd=elsewhere)) == ok(cli("diff", RUN, "--store", store))
    assert not (elsewhere / ".magis").exists()


def test_the_golden_log_reads_through_the_cli(tmp_path, cli):
    assert ok(cli("diff", GOLDEN / "v1_run.jsonl", cwd=tmp_path)) == (GOLDEN / "v1_run.diff").read_text()
    timeline = json.loads(ok(cli("audit", GOLDEN / "v1_run.jsonl", "--format", "json", cwd=tmp_path)))["timeline"]
    assert "RunResumed" in {t["type"] for t in timeline}


# --- bad input: one line, exit code 2 ------------------------------------------------------------


def test_an_unknown_run_id(store, cli):
    line = one_line_error(cli("events", "zz9999", "--store", store))
    assert "zz9999" in line
    one_line_error(cli("audit", "zz9999", "--store", store))


def test_an_ambiguous_run_id_prefix(store, cli):
    line = one_line_error(cli("diff", "a1b2", "--store", store))
    assert "ambiguous" in line and "a1b2" in line


def test_an_empty_folder_is_not_a_store(tmp_path, cli):
    empty = tmp_path / "empty"
    empty.mkdir()
    line = one_line_error(cli("runs", "--store", empty))
    assert "store" in line
    assert list(empty.iterdir()) == []  # a read command creates nothing


def test_a_plain_text_file_is_not_a_store(tmp_path, cli):
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\n- milk\n- bread\n")
    assert "not a magis store" in one_line_error(cli("runs", "--store", notes))
    one_line_error(cli("events", RUN, "--store", notes))
    assert notes.read_text() == "shopping list\n- milk\n- bread\n"


def test_a_missing_store_folder(tmp_path, cli):
    missing = tmp_path / "no" / "such" / "store"
    assert "no magis store" in one_line_error(cli("runs", "--store", missing))
    one_line_error(cli("audit", RUN, "--store", missing))
    assert not (tmp_path / "no").exists()


def test_a_missing_default_store(tmp_path, cli):
    one_line_error(cli("runs", cwd=tmp_path))
    assert not (tmp_path / ".magis").exists()


@pytest.mark.parametrize("command", [["runs"], ["events", RUN], ["audit", RUN, "--format", "json"], ["diff", RUN]])
def test_a_corrupt_database_file(store, tmp_path, command, cli):
    corrupt = tmp_path / "corrupt.sqlite3"
    shutil.copyfile(store / DB_NAME, corrupt)
    data = bytearray(corrupt.read_bytes())
    assert len(data) >= 8 * 4096, len(data)  # big enough that the middle is table pages
    start, end = len(data) // 4, 3 * len(data) // 4
    data[start:end] = random.Random(7).randbytes(end - start)
    corrupt.write_bytes(bytes(data))
    line = one_line_error(cli(*command, "--store", corrupt))
    assert "damaged" in line or "malformed" in line or "undecodable" in line, line


@pytest.mark.parametrize("bad", ['{"run_id": 1}', "this is not json", '{"run_id": "x", "version": 1}', "[]"],
                         ids=["wrong-type", "plain-text", "missing-fields", "array"])
def test_an_event_line_that_does_not_decode(store, tmp_path, bad, cli):
    good = cli("events", RUN, "--store", store).out.splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([*good[:3], bad, *good[3:]]) + "\n")
    for command in (["audit", broken], ["diff", broken], ["audit", broken, "--format", "json"]):
        line = one_line_error(cli(*command, cwd=tmp_path))
        assert f"{broken}:4:" in line, line


def test_an_events_file_with_no_events(tmp_path, cli):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    assert "no events" in one_line_error(cli("audit", empty, cwd=tmp_path))


def test_an_unknown_format_is_a_usage_error(store, cli):
    result = cli("audit", RUN, "--format", "pdf", "--store", store)
    assert result.code == 2 and "Traceback" not in result.err and result.out == ""


# --- pipes, long text, missing paths ----------------------------------------------------------


def test_events_into_a_pipe_closed_early_exits_0(store):
    """`magis-ray events RUN | head -1` under `set -o pipefail`: the reader closing the pipe is
    how pipes end, not an error (no traceback, exit 0)."""
    command = " ".join(map(str, CONSOLE_SCRIPT)) + f" events {RUN} --store {store}"
    result = subprocess.run(["bash", "-c", f"set -o pipefail; {command} | head -1"], capture_output=True, text=True, env=_env(), timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "Broken pipe" not in result.stderr


def test_runs_cuts_a_long_outcome_at_a_word_with_an_ellipsis(tmp_path, cli):
    from magis_ray.events import schema as ev

    reason = "the model endpoint could not be reached: " + " ".join(f"word{i}" for i in range(40))
    path = tmp_path / "store"
    with SQLiteStore.open(path, create=True) as s:
        s.append("f00000000001", 0, fixed_new_events([("supervisor", ev.RunFailed(reason=reason))]))
    row = ok(cli("runs", "--store", path)).splitlines()[1]
    outcome = row.split("  ")[-1].strip()
    assert outcome.endswith("…") and len(outcome) <= 80
    assert reason.startswith(outcome[:-1]) and reason[len(outcome) - 1] == " "  # cut where a word ends


def test_a_missing_repository_is_named_missing(tmp_path, cli):
    from magis_ray.actors.code.repository import RepoError, find_repo
    from magis_ray.actors.code.workingcopy import open_working_copy

    for opener in (lambda path: find_repo("calc/calc", path), open_working_copy):
        with pytest.raises(RepoError, match=f"^{tmp_path / 'gone'} does not exist$"):
            opener(tmp_path / "gone")
    issue = tmp_path / "issue.md"
    issue.write_text("# mean is wrong\n\nIt divides by n - 1.\n")
    line = one_line_error(cli("submit", issue, "--repo", tmp_path / "gone", "--llm", f"scripted:{Path(__file__).resolve().parents[1] / 'examples/calc/script.json'}",
                               "--store", tmp_path / "s"))
    assert line == f"magis-ray: error: {tmp_path / 'gone'} does not exist"
