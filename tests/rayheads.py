"""A Ray head of a test's own, as a user starts one (`ray start --head --block`): in a session of
its own, a short temp dir (Ray's socket paths must stay under 108 characters), free ports, Ray's
token authentication on with a token of its own. Stopped by its own process ids: never `ray
stop`, which would end every Ray on the machine."""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from processes import describe, in_session, under
from waiting import wait_until

BIN = Path(sys.executable).parent  # the venv's: `ray` and `magis-ray`


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class Head:
    process: subprocess.Popen
    env: dict  # what a driver or client joins it with (RAY_AUTH_TOKEN; RAY_ADDRESS not set)
    address: str  # the GCS's, host:port
    token: str
    root: str  # its temp dir
    ports: tuple[int, ...]  # the free ports its options were given, in order


@contextmanager
def ray_head_started(prefix: str, *options: str, ports: int = 4):
    """A head; `options` are more `ray start` flags, and "{port0}".."{portN}" in them stand for
    `ports` more free ports."""
    root = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    gcs, *more = free_ports(1 + ports)
    token = secrets.token_hex(32)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "RAY_worker_niceness": "0"}  # as ray_cluster.yaml starts nodes
    for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH"):
        env.pop(name, None)
    flags = [option.format(**{f"port{i}": port for i, port in enumerate(more)}) for option in options]
    log = open(Path(root) / "ray-start.log", "w")
    process = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", f"--port={gcs}", "--num-cpus=2", *flags,
         "--object-store-memory=100000000", f"--temp-dir={root}/ray", "--disable-usage-stats"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        yield Head(process, env, f"127.0.0.1:{gcs}", token, root, tuple(more))
    finally:
        try:
            stop_head(process, root)
        finally:
            log.close()
            shutil.rmtree(root, ignore_errors=True)


def stop_head(head: subprocess.Popen, root: str) -> None:
    if head.poll() is None:
        head.send_signal(signal.SIGTERM)  # `ray start --block` ends the processes it started
        try:
            # With jobs' or drivers' workers still up it can take 20 s and more; whatever is left
            # after a short grace is killed below, and waited out.
            head.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    for pid in [head.pid, *in_session(head.pid)]:
        try:
            os.killpg(pid, signal.SIGKILL) if pid == head.pid else os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    head.wait(timeout=10)
    # a job runs in a session of its own (Ray's job supervisor starts it so); its processes and
    # the workers still name the head's temp dir. A process killed a moment ago may still be
    # exiting (running, no command line), and a worker may have been forking: wait them out.
    left: list[int] = []

    def all_gone() -> bool:
        left[:] = sorted(set(under(root)) | set(in_session(head.pid)))
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return not left

    wait_until(all_gone, lambda: "processes of the Ray head end; still running: " + "; ".join(f"{pid} {describe(pid)}" for pid in left),
               timeout_s=60, poll_s=0.2)


@contextmanager
def recorded_head_started(prefix: str, *options: str, attempts: int = 4):
    """A head that has started and recorded its address in its temp dir (`ray_current_cluster`,
    where a driver with RAY_TMPDIR=head.root finds it). On a loaded machine `ray start` itself can
    miss Ray's fixed start-up deadlines and exit: a head that did is started again."""
    for attempt in range(1, attempts + 1):
        with ray_head_started(prefix, *options) as head:
            recorded = Path(head.root) / "ray" / "ray_current_cluster"

            def address_written() -> bool:  # Ray creates the file before it writes the address into it
                return recorded.exists() and bool(recorded.read_text().strip())

            wait_until(lambda: address_written() or head.process.poll() is not None, "the head records its address or exits",
                       timeout_s=300)
            if address_written() and head.process.poll() is None:
                yield head
                return
            failure = (Path(head.root) / "ray-start.log").read_text()[-2000:]
    raise AssertionError(f"`ray start --head` did not start in {attempts} tries; the last said: {failure}")


def local_ray_started(**init) -> None:
    """`ray.init(address="local", **init)`, configured as magis-ray configures the Ray it starts; a
    start that ran out of time on a busy machine is tried again, as the product does."""
    import time

    import ray

    from magis_ray.actors.runtime.deployment import own_ray_config, start_timed_out

    deadline = time.monotonic() + 300
    while True:
        try:
            ray.init(address="local", include_dashboard=False, namespace="magis", log_to_driver=False,
                     **own_ray_config("local"), **init)
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception when its node misses its start deadline
            ray.shutdown()
            if not start_timed_out(exc) or time.monotonic() > deadline:
                raise
