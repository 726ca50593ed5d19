"""The runnable blocks of the documentation: found in its Markdown, run in one bash session per
page, their printed output checked against what the page says it prints.

A runnable block is the line `<!-- runnable -->` directly before a ```console fence. In it a line
starting with `$ ` is a command (a trailing ` \\` continues it onto the next line); the lines after a
command, up to the next `$ `, are its expected output: an in-order subset of what it printed
(stdout and stderr together), where `...` inside a line matches any text and a line that is only
`...` matches nothing by itself. A command must exit 0, unless its expected output holds a line
`[exit N]`.

The blocks of one page run in order in one bash session in one fresh folder, which starts with the
project's examples/ and the calc example's repository at .magis/example/calc; `magis-ray` is on
PATH, and no model key or setting of the caller's environment is there. Its commands start a Ray of
their own (MAGIS_RAY=own), or join the one the caller gives (`ray`: RAY_ADDRESS and its token), as a
user's commands join a warm Ray."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from waiting import COMMAND_S, wait_until

MARKER = "<!-- runnable -->"
ROOT = Path(__file__).resolve().parent.parent
EXIT_LINE = re.compile(r"^\[exit (\d+)\]$")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class Command:
    text: str  # what bash runs (continuation lines joined by newlines, their backslashes kept)
    expected: list[str] = field(default_factory=list)  # output lines, `[exit N]` taken out
    exit_code: int = 0
    line: int = 0  # where it starts in its page, 1-based


@dataclass
class Block:
    page: Path
    line: int  # the fence's line, 1-based
    commands: list[Command]


class NotRunnable(ValueError):
    """A runnable marker that is not followed by a console block."""


def blocks_of(path: Path) -> list[Block]:
    """The runnable blocks of a Markdown page, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    for index, line in enumerate(lines):
        if line.strip() != MARKER:
            continue
        fence = index + 1
        opening = lines[fence].strip() if fence < len(lines) else ""
        if not re.fullmatch(r"(```+|~~~+)\s*console", opening):
            raise NotRunnable(f"{path}:{index + 1}: {MARKER} must come directly before a ```console block")
        ticks = re.match(r"```+|~~~+", opening).group(0)
        end = next((i for i in range(fence + 1, len(lines)) if lines[i].strip() == ticks), None)
        if end is None:
            raise NotRunnable(f"{path}:{fence + 1}: the console block is never closed")
        blocks.append(Block(path, fence + 1, commands_of(lines[fence + 1:end], first_line=fence + 2)))
    return blocks


def commands_of(lines: list[str], first_line: int = 1) -> list[Command]:
    commands: list[Command] = []
    continuing = False
    for offset, line in enumerate(lines):
        if continuing:
            commands[-1].text += "\n" + line
            continuing = line.endswith("\\")
        elif line.startswith("$ "):
            commands.append(Command(line[2:], line=first_line + offset))
            continuing = line.endswith("\\")
        elif commands and (exit_line := EXIT_LINE.match(line.strip())):
            commands[-1].exit_code = int(exit_line.group(1))
        elif commands and line.strip():
            commands[-1].expected.append(line.rstrip())
    return commands


def line_pattern(expected: str) -> re.Pattern:
    """An expected line as a pattern over a whole printed line: `...` matches any text."""
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")) + r"\Z")


def printed_lines(output: str) -> list[str]:
    """What a command printed, line by line: colours taken out, a progress bar's redraws (\\r) apart."""
    text = ANSI.sub("", output)
    return [part.rstrip() for line in text.split("\n") for part in line.split("\r")]


def unmatched(expected: list[str], printed: list[str]) -> str | None:
    """The first expected line that no printed line after the previous match matches, or None."""
    at = 0
    for want in expected:
        if want.strip() == "...":
            continue
        pattern = line_pattern(want)
        while at < len(printed) and not pattern.match(printed[at]):
            at += 1
        if at == len(printed):
            return want
        at += 1
    return None


class Mismatch(AssertionError):
    """A command of a page did not print or exit as its page says."""


def page_folder(folder: Path) -> Path:
    """A fresh folder as a page's blocks start in: examples/ and the calc example's repository."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "examples", folder / "examples")
    subprocess.run([sys.executable, str(folder / "examples/calc/make_repo.py"), ".magis/example/calc"], cwd=folder,
                   check=True, capture_output=True)
    return folder


def page_environment(folder: Path, ray: dict[str, str] | None = None) -> dict[str, str]:
    """A user's shell: magis-ray on PATH, a Ray of the commands' own (or `ray`'s), no key, no
    settings of ours."""
    kept = {name: value for name, value in os.environ.items()
            if not name.startswith(("MAGIS_", "OPENAI_")) and name not in ("RAY_ADDRESS", "VIRTUAL_ENV")}
    bin_dir = str(Path(sys.executable).parent)
    return {**kept, "PATH": bin_dir + os.pathsep + kept.get("PATH", ""), "MAGIS_RAY": "own",
            "XDG_CONFIG_HOME": str(folder / ".config"), **(ray or {})}


def describe_failure(command: Command, page: Path, why: str, output: str) -> str:
    where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}:{command.line}"
    return f"{where}: $ {command.text}\n{why}\n--- what it printed ---\n{output.rstrip()}\n---"


def run_page(page: Path, folder: Path, timeout_s: float = COMMAND_S, ray: dict[str, str] | None = None) -> int:
    """Run a page's runnable blocks in one bash session in `folder`; raise Mismatch at the first
    command that prints or exits otherwise than the page says. Returns the commands run. `ray`:
    the variables that join a running Ray (conftest.py's module_ray)."""
    commands = [command for block in blocks_of(page) for command in block.commands]
    page_folder(folder)
    outputs = folder / ".runnable"
    outputs.mkdir()
    shell = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=folder, env=page_environment(folder, ray), text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        for number, command in enumerate(commands, start=1):
            out, code = outputs / f"{number}.out", outputs / f"{number}.rc"
            # the command's output to its own file; then its exit code, written whole (renamed into place)
            shell.stdin.write(f"{{ {command.text}\n}} >{out} 2>&1 </dev/null\n"
                              f"echo $? >{code}.part && mv {code}.part {code}\n")
            shell.stdin.flush()
            wait_until(code.exists, f"`{command.text}` of {page.name} ends", timeout_s=timeout_s, poll_s=0.2,
                       while_running=shell)
            output, exit_code = out.read_text(errors="replace"), int(code.read_text())
            if exit_code != command.exit_code:
                raise Mismatch(describe_failure(command, page, f"exited {exit_code}, the page says {command.exit_code}", output))
            missing = unmatched(command.expected, printed_lines(output))
            if missing is not None:
                raise Mismatch(describe_failure(command, page, f"the expected line was not printed: {missing!r}", output))
        return len(commands)
    finally:
        shell.stdin.close()
        try:
            shell.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(shell.pid, 9)
            shell.wait()


def documentation_pages(root: Path = ROOT) -> list[Path]:
    """README.md and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def runnable_pages(root: Path = ROOT) -> list[Path]:
    return [page for page in documentation_pages(root) if page.is_file() and blocks_of(page)]


if __name__ == "__main__":  # the count: .venv/bin/python tests/docs_blocks.py
    pages = runnable_pages()
    for found in pages:
        page_blocks = blocks_of(found)
        print(f"{found.relative_to(ROOT)}: {len(page_blocks)} blocks, {sum(len(b.commands) for b in page_blocks)} commands")
    every = [b for found in pages for b in blocks_of(found)]
    print(f"runnable: {len(every)} blocks, {sum(len(b.commands) for b in every)} commands on {len(pages)} pages")
