"""No test or benchmark looks processes up across the whole machine: other suites, other sessions'
Ray clusters and model servers share it, and a scan by name finds (and signals) theirs. A test
finds what it started through what it started (tests/processes.py: the tree below its driver,
its head's session or temp dir, its own raylet's children, a uuid it handed out); that module is
the only one that reads the process table.

A static check over the source: reading /proc as a whole, psutil's process listings, and running
pgrep, pkill, killall, pidof, ps or `ray stop` (which ends every Ray on the machine)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
HELPER = ROOT / "tests" / "processes.py"
SCANNERS = {"pgrep", "pkill", "killall", "pidof", "ps", "pstree"}
PSUTIL_LISTINGS = {"process_iter", "pids"}
# a command line that scans: `pkill -f x`, `ps aux | grep x`, `ps -ef`, `ray stop`
SHELL_SCAN = re.compile(r"(^|[\s;&|(`$])(sudo\s+)?((pgrep|pkill|killall|pidof|pstree)\b|ps(\s+-\w+|\s+a?u?x\b|\s*$|\s*\|)|ray\s+stop\b)")


def _command_word(value: str) -> str:
    words = value.split()
    return words[0].rsplit("/", 1)[-1] if words else ""


def _is_ray(node: ast.AST) -> bool:
    """`"ray"`, a path ending in /ray, or an expression built from one (str(BIN / "ray"))."""
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and (n.value == "ray" or n.value.endswith("/ray"))
               for n in ast.walk(node))


def process_scans(source: str, filename: str = "<source>") -> list[str]:
    """Where `source` looks processes up across the machine: "line: what"."""
    found = []
    tree = ast.parse(source, filename)
    exempt = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}  # docstrings
    # f"/proc/{pid}/stat": one process's files, the pid known
    exempt |= {id(part) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)
              for part, after in zip(n.values, n.values[1:]) if isinstance(after, ast.FormattedValue)}
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in exempt:
            text = node.value
            if text.rstrip("/") == "/proc" or (text.startswith("/proc/") and any(c in text for c in "*?[")):
                found.append(f"{line}: reads the whole process table ({text!r})")
            elif SHELL_SCAN.search(text):
                found.append(f"{line}: runs a process scan ({text.strip()[:60]!r})")
        elif isinstance(node, ast.Attribute) and node.attr in PSUTIL_LISTINGS:
            found.append(f"{line}: lists every process (.{node.attr})")
        elif isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and _command_word(first.value) in SCANNERS:
                found.append(f"{line}: runs {_command_word(first.value)}")
            for before, after in zip(node.elts, node.elts[1:]):
                if isinstance(after, ast.Constant) and after.value == "stop" and _is_ray(before):
                    found.append(f"{line}: runs `ray stop`, which ends every Ray on the machine")
    return found


def checked_files() -> list[Path]:
    files = [*sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "benchmarks").rglob("*.py"))]
    return [f for f in files if f != HELPER and f != Path(__file__)]


def test_no_test_or_benchmark_scans_the_machines_processes():
    assert len(checked_files()) > 40  # the check sees the suite
    offences = [f"{f.relative_to(ROOT)}:{where}" for f in checked_files() for where in process_scans(f.read_text(), str(f))]
    assert not offences, "look processes up through what the test started (tests/processes.py):\n" + "\n".join(offences)


def test_no_script_of_the_project_scans_the_machines_processes():
    scripts = [*ROOT.glob(".ci/*.sh"), *ROOT.glob("examples/**/*.sh"), *ROOT.glob("benchmarks/**/*.sh")]
    offences = [f"{s.relative_to(ROOT)}:{n}: {line.strip()}" for s in scripts
                for n, line in enumerate(s.read_text().splitlines(), 1)
                if not line.lstrip().startswith("#") and SHELL_SCAN.search(line)]
    assert not offences, "\n".join(offences)


def test_the_helper_only_answers_about_what_the_caller_names():
    """Each public function of tests/processes.py takes the pid, session, folder or marker of what
    the caller started: none lists the machine's processes as such."""
    tree = ast.parse(HELPER.read_text())
    public = [f for f in tree.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")]
    assert {f.name for f in public} >= {"tree_of", "children_of", "in_session", "under", "carrying"}
    for function in public:
        names = [a.arg for a in function.args.args]
        assert names and not {"name", "pattern", "names"} & set(names), function.name


# What the check must catch: the scans this suite once made, and the usual ways of making one.
CAUGHT = {
    "the old scan for a Developer actor": '''
def dev_actor_pids():
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            if b"DeveloperService" in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return pids
''',
    "os.listdir": 'pids = [p for p in os.listdir("/proc/") if p.isdigit()]',
    "a glob": 'found = glob.glob("/proc/[0-9]*/cmdline")',
    "psutil": 'victims = [p for p in psutil.process_iter(["name"]) if p.info["name"] == "raylet"]',
    "psutil.pids": "everyone = psutil.pids()",
    "pkill": 'subprocess.run(["pkill", "-f", "local_model"])',
    "pgrep by path": 'subprocess.run(("/usr/bin/pgrep", "-f", "raylet"), capture_output=True)',
    "ps in a shell": 'subprocess.run("ps aux | grep DeveloperService", shell=True)',
    "killall": 'os.system("killall -9 llama_cpp")',
    "ray stop": 'subprocess.run([str(BIN / "ray"), "stop", "--force"])',
    "ray stop in a shell": 'subprocess.run("ray stop", shell=True)',
}
LEFT_ALONE = {
    "a known pid's files": 'state = Path(f"/proc/{pid}/stat").read_text()',
    "this process": 'Path("/proc/self/status").read_text()',
    "the machine's CPU counters": 'Path("/proc/stat").read_text()',
    "magis-ray stop": 'subprocess.run([*MAGIS, "stop", "--store", "s"]); subprocess.run(["magis-ray", "stop"])',
    "a word in prose": 'print("steps of the process: ps and qs")',
}


@pytest.mark.parametrize("source", CAUGHT.values(), ids=CAUGHT.keys())
def test_the_check_catches_a_scan(source):
    assert process_scans(source)


@pytest.mark.parametrize("source", LEFT_ALONE.values(), ids=LEFT_ALONE.keys())
def test_the_check_leaves_a_known_process_alone(source):
    assert process_scans(source) == []
