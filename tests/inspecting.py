"""Helpers for the inspector's tests: a store of constructed runs (tests/runs.py), a real
`magis-ray serve` process on a free loopback port, and plain HTTP GETs against it."""
from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import msgspec
from commands import command_environment, started
from runs import constructed_run, fixed_new_events, repo_for

from magis_ray.events import schema as ev
from magis_ray.events.streams import StreamKind
from magis_ray.store.sqlite import SQLiteStore

REJECTED = "a1b2c3d4e5f6"  # the constructed run: T1's first patch sent back, T2 failed
FIXED = "a1b2ff000011"  # the same issue with both texts fixed: diverges from REJECTED in T2's lane
RESUMED = "cc0000000001"  # interrupted and resumed


def with_settings(pairs, **changes):
    """The run's pairs with its RunStarted settings changed (model, batch, ...)."""
    (actor, started), rest = pairs[0], pairs[1:]
    settings = msgspec.structs.replace(started.settings, **changes)
    return [(actor, msgspec.structs.replace(started, settings=settings)), *rest]


def make_store(root: Path) -> Path:
    """A store folder with the three constructed runs, on the real calc repository."""
    repo, base = repo_for(root)
    path = root / "store"
    with SQLiteStore.open(path, create=True) as store:
        store.append(REJECTED, 0, fixed_new_events(constructed_run(repo, base)))
        store.append(FIXED, 0, fixed_new_events(with_settings(constructed_run(repo, base, fix_texts=True), model="gpt-4o",
                                                              batch="nightly"), start=1_700_100_000.0))
        store.append(RESUMED, 0, fixed_new_events(constructed_run(repo, base, interrupted=True), start=1_700_200_000.0))
    return path


def make_store_with_grading(root: Path) -> Path:
    """make_store's three runs, and a grading of the calc instances."""
    path = make_store(root)
    with SQLiteStore.open(path) as store:
        store.append(StreamKind.GRADING.stream_id("gold@calc"), 0, grading_events())
    return path


def env(**extra: str) -> dict[str, str]:
    """A command's environment (tests/commands.py's) with no store of the environment's, and `extra`."""
    return command_environment(extra, without=("MAGIS_STORE",))


@contextlib.contextmanager
def serve(store: Path, *args: str, **environment: str) -> Iterator[str]:
    """`magis-ray serve` on a free port; its base URL. Stopped with Ctrl-C (SIGINT) at the end."""
    proc = started("serve", "--store", store, "--port", "0", "--poll", "0.2", *args, env=environment, without=("MAGIS_STORE",))
    try:
        line = proc.stdout.readline()  # printed once the socket listens
        found = re.search(r"http://\S+/", line)
        assert found, (line, proc.stderr.read() if proc.poll() is not None else "")
        yield found.group(0)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def get(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read().decode()


def page(url: str) -> str:
    status, _, body = get(url)
    assert status == 200, (url, status, body[:500])
    return body


def grading_events() -> list[ev.NewEvent]:
    """The committed grading stream (tests/golden), as new events to append."""
    from magis_ray.events.codec import decode_recorded

    lines = (Path(__file__).parent / "golden" / "v2_grading_run.jsonl").read_bytes().splitlines()
    return [ev.NewEvent(event=r.event, actor=r.actor, event_id=r.event_id, time=r.time) for r in map(decode_recorded, lines)]
