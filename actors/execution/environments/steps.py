"""The steps of one build, each a command in the sandbox with its own log, within the builds'
limits: an environment's, and a testbed's on top of one."""
from __future__ import annotations

from pathlib import Path

from magis_ray.actors.execution.sandbox import GiB, MiB, Limits, Mount, Sandbox
from magis_ray.actors.execution.sharing.builds import BuildFailed

BUILD_LIMITS = Limits(wall_seconds=3600.0, memory_bytes=16 * GiB, cpu_seconds=3600, processes=2048,
                      file_bytes=8 * GiB, tmp_bytes=1 * GiB, log_bytes=64 * MiB, output_bytes=64 * 1024)


class BuildSteps:
    """The steps of one build, each run in the sandbox with its own log: logs/NN-step.log."""

    def __init__(self, sandbox: Sandbox, folder: Path, mounts: list[Mount], variables: dict[str, str], cwd: str) -> None:
        self.sandbox, self.folder, self.mounts, self.variables, self.cwd = sandbox, folder, mounts, variables, cwd
        self.logs = folder / "logs"
        self.logs.mkdir(exist_ok=True)
        self.number = 0

    def run(self, step: str, command: str, network: bool = True, extra: dict[str, str] | None = None,
            required: bool = True):
        self.number += 1
        log = self.logs / f"{self.number:02d}-{step}.log"
        outcome = self.sandbox.run(command, cwd=self.cwd, mounts=self.mounts, env={**self.variables, **(extra or {})},
                                   limits=BUILD_LIMITS, network=network, log_path=log, build=True)
        if not outcome.ok and required:
            tail = " | ".join(outcome.output.strip().splitlines()[-3:])
            why = "timed out" if outcome.timed_out else f"exit {outcome.exit_code}"
            limits = f" [{'; '.join(outcome.limits)}]" if outcome.limits else ""
            raise BuildFailed(step, f"{command!r} {why}{limits}: {tail[-400:]} (log: {log})", outcome.output)
        return outcome
