"""The host as a sandbox that confines nothing: the same script run directly, with the same rlimits,
memory budget and output capture, its scratch folders temporary folders and its paths the host's.
Only where the user trusts the code (`--sandbox none`)."""
from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .base import Sandbox
from .limits import Outcome
from .process import INIT, run_watched
from .processes import own_process_count


@dataclass
class HostSandbox(Sandbox):
    """No isolation: a mount's target is its source, a scratch folder a temporary folder."""

    isolated: ClassVar[bool] = False
    mode: ClassVar[str] = "none"

    def check(self) -> None:
        """The host can always run a command."""

    def as_seen_inside(self, text: str, places: dict[str, str]) -> str:
        return host_paths(text, places)

    def source_variables(self, tree: str) -> dict[str, str]:
        # No /testbed without the sandbox: the copy goes first on sys.path, ahead of the editable
        # install (which points at /testbed).
        return {"PYTHONPATH": "/testbed/src" if (Path(tree) / "src").is_dir() else "/testbed"}

    def _run(self, script, cwd, mounts, scratches, env, limits, network, log_path, build) -> Outcome:
        """The same script with the host's paths: a mount's target is its source, a scratch folder
        a temporary folder; no isolation."""
        places = {m.target: m.source for m in mounts}
        made: list[str] = []
        seeds: list[str] = []
        for scratch in scratches:
            folder = scratch.host or tempfile.mkdtemp(prefix="magis-scratch-")
            if scratch.host is None:
                made.append(folder)
            places[scratch.target] = folder
            if scratch.seed is not None:
                seeds += [scratch.seed, folder]
        host_cwd = _translate(cwd, places)
        script = host_paths(script, places)
        home = tempfile.mkdtemp(prefix="magis-home-")
        made.append(home)
        env = {name: ":".join(_translate(part, places) for part in value.split(":")) for name, value in env.items()}
        env["HOME"] = home
        argv = ["/bin/sh", "-c", INIT, "magis-init", "--", *seeds, "--", "/bin/sh", "-c", script]
        try:
            return run_watched(argv, lambda: [], [], host_cwd, env, limits,
                           limits.processes and limits.processes + own_process_count(), log_path, sample=False,
                           in_memory={}, scratch="host", memory_control=self.memory_control, stop=self.stop)
        finally:
            for folder in made:
                shutil.rmtree(folder, ignore_errors=True)



def _translate(path: str, places: dict[str, str]) -> str:
    """A sandbox path as the host has it, where a mount or a scratch folder puts it elsewhere."""
    for target, source in sorted(places.items(), key=lambda p: -len(p[0])):
        if path == target or path.startswith(target.rstrip("/") + "/"):
            return source + path[len(target):]
    return path


def host_paths(text: str, places: dict[str, str]) -> str:
    """A script's sandbox paths as the host has them (`cd /testbed` without a sandbox)."""
    for target, source in sorted(places.items(), key=lambda p: -len(p[0])):
        text = re.sub(rf"(?<![\w/.-]){re.escape(target)}(?=[/\s'\";)]|$)", lambda _: source, text)
    return text
