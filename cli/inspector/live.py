"""Live updates: one poller reads what was appended to the store (every `poll_s` seconds) and tells
every open event stream which runs changed. The store is the only source: whoever appends (a
driver here, a Ray store actor on a cluster), the inspector sees it in the log."""
from __future__ import annotations

import asyncio
import contextlib
from typing import Iterator

import structlog
from starlette.concurrency import run_in_threadpool

from .state import Inspector

log = structlog.get_logger("magis.inspector")


class Hub:
    def __init__(self, inspector: Inspector, poll_s: float = 0.5) -> None:
        self.inspector = inspector
        self.poll_s = poll_s
        self._queues: set[asyncio.Queue] = set()

    async def run(self) -> None:
        failing = False
        while True:
            try:
                changed = await run_in_threadpool(self.inspector.refresh)
                failing = False
            except Exception as exc:  # noqa: BLE001 - a store busy or briefly unreadable: try again next round
                if not failing:
                    log.warning("inspector.refresh_failed", error=str(exc))
                failing, changed = True, set()
            if changed:
                for queue in list(self._queues):
                    queue.put_nowait(changed)
            await asyncio.sleep(self.poll_s)

    @contextlib.contextmanager
    def subscription(self) -> Iterator[asyncio.Queue]:
        queue: asyncio.Queue = asyncio.Queue()
        self._queues.add(queue)
        try:
            yield queue
        finally:
            self._queues.discard(queue)

    def close(self) -> None:
        """End every open stream (None is the last message)."""
        for queue in list(self._queues):
            queue.put_nowait(None)
