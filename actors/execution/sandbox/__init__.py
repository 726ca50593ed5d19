"""The sandbox: where every command runs whose code nobody reviewed (a repository's setup.py, a
model's patch and test, anyone's predictions), bounded in time, memory, processes, output and disk.

One protocol (`Sandbox`, base.py), two implementations chosen by the settings' `sandbox`:
bubblewrap (bubblewrap.py, "bwrap") and the host unconfined (host.py, "none"). What a command is
given and gives back is in limits.py; running and watching it in process.py; its memory budget,
scratch disks and uids in memory_budget.py, scratch_disks.py and identities.py. The sandbox knows
nothing of environments, testbeds or the cluster."""
from __future__ import annotations

from .base import Sandbox, SandboxUnavailable
from .bubblewrap import BubblewrapSandbox, bwrap_path, check_available
from .host import HostSandbox, host_paths
from .limits import GiB, MiB, Limits, Mount, Outcome, Scratch
from .process import SandboxStopped

SANDBOXES: dict[str, type[Sandbox]] = {"bwrap": BubblewrapSandbox, "none": HostSandbox}


def open_sandbox(mode: str = "bwrap", **options) -> Sandbox:
    """The sandbox the settings' `sandbox` names ("bwrap" or "none"), with its options
    (memory_control, stop; scratch for bubblewrap)."""
    return SANDBOXES[mode](**options)


__all__ = ["Sandbox", "SandboxUnavailable", "SandboxStopped", "BubblewrapSandbox", "HostSandbox", "open_sandbox",
           "check_available", "bwrap_path", "host_paths", "Limits", "Mount", "Scratch", "Outcome", "GiB", "MiB"]
