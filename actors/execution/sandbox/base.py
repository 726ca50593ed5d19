"""The sandbox's one protocol: run a shell script with the limits, mounts and scratch folders it
is given, and say what happened (`Outcome`). Two implementations: bubblewrap (bubblewrap.py), the
real sandbox, and the host (host.py), which runs the same script unconfined where the user trusts
the code. Callers hold a `Sandbox` and ask it, never which one it is."""
from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from magis_ray.events.errors import Unavailable

from .limits import Limits, Mount, Outcome, Scratch
from .process import SandboxStopped


class SandboxUnavailable(Unavailable):
    """bubblewrap is missing or cannot create its namespaces here; the message is one line."""


@dataclass
class Sandbox(ABC):
    """Where a command runs. `memory_control` "auto" holds the budget with a cgroup where one can
    be made, else with the watchdog (memory_budget.py); "watchdog" always with the watchdog."""

    memory_control: str = "auto"
    # Set by the caller to end every run of this sandbox (in-process workers of a stopped
    # command, whose threads cannot be interrupted): each ends within STOP_CHECK_S, killed.
    stop: threading.Event | None = field(default=None, compare=False)
    # Whether a run sees only what it is given: then it gets copies of what it may change, and
    # paths inside it (/testbed) are its own; without isolation they are the host's.
    isolated: ClassVar[bool]
    mode: ClassVar[str]  # the settings' name of it: "bwrap" or "none"

    def run(self, script: str, *, cwd: str, limits: Limits, mounts: list[Mount] = (), scratches: list[Scratch] = (),
            env: dict[str, str] | None = None, network: bool = False, log_path: str | os.PathLike | None = None,
            build: bool = False) -> Outcome:
        """Run `script` with /bin/sh; `cwd` is a path as seen inside the sandbox. `build` runs it as
        the builds' uid (the owner of the environment cache) rather than a uid of its own."""
        if self.stop is not None and self.stop.is_set():
            raise SandboxStopped("stopped")
        env = dict(env or {})
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.setdefault("HOME", "/tmp/home")
        env.setdefault("TMPDIR", "/tmp")
        env.setdefault("LANG", "C.UTF-8")
        # The workspace's top folder belongs to the sandbox's filesystem, not to its user: git
        # must not refuse it ("dubious ownership"), as the harness's `safe.directory` says.
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"})
        return self._run(script, cwd, list(mounts), list(scratches), env, limits, network, log_path, build)

    @abstractmethod
    def _run(self, script: str, cwd: str, mounts: list[Mount], scratches: list[Scratch], env: dict[str, str],
             limits: Limits, network: bool, log_path, build: bool) -> Outcome:
        """Run the script as this sandbox does."""

    @abstractmethod
    def check(self) -> None:
        """SandboxUnavailable unless this sandbox can run commands here."""

    def as_seen_inside(self, text: str, places: dict[str, str]) -> str:
        """`text` (a script given as a file) with its sandbox paths (`places`: path inside -> host
        folder) as the command will see them."""
        return text

    def source_variables(self, tree: str) -> dict[str, str]:
        """What puts the checkout at `tree` first on the command's sys.path, where a test run's
        copy of it is not where the testbed's install points."""
        return {}
