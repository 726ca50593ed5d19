"""Requests and tokens per minute, over a sliding window: a request waits until the last
minute's requests and tokens leave room for it. One limiter in the gateway holds for every run.

The limiter reads time from a clock it is given (the gateway gives it the monotonic one), so
what it decides can be checked on a clock that only moves when the limiter sleeps."""
from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """Real time: time.monotonic, and asyncio's sleep (other requests go on meanwhile)."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class RateLimiter:
    def __init__(self, clock: Clock, requests_per_window: int = 0, tokens_per_window: int = 0, window_s: float = 60.0):
        """0 lifts a limit. A request asking more tokens than the window allows still goes, alone."""
        self.requests = requests_per_window
        self.tokens = tokens_per_window
        self.window_s = window_s
        self.clock = clock
        self._sent: deque[tuple[float, int]] = deque()  # (when, tokens) of the window's requests
        self._lock: asyncio.Lock | None = None

    @property
    def limited(self) -> bool:
        return bool(self.requests or self.tokens)

    def _wait_needed(self, now: float, tokens: int) -> float:
        while self._sent and self._sent[0][0] <= now - self.window_s:
            self._sent.popleft()
        waits = [0.0]
        if self.requests and len(self._sent) >= self.requests:
            waits.append(self._sent[len(self._sent) - self.requests][0] + self.window_s - now)
        if self.tokens and self._sent:
            used = sum(t for _, t in self._sent)
            # the oldest requests must leave the window until this one fits
            for when, spent in self._sent:
                if used + tokens <= self.tokens:
                    break
                used -= spent
                waits.append(when + self.window_s - now)
        return max(waits)

    async def acquire(self, tokens: int) -> None:
        """Wait for room, then count the request (with its estimated tokens) as sent."""
        if not self.limited:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # first come, first served
            while (wait := self._wait_needed(self.clock.now(), tokens)) > 0:
                await self.clock.sleep(wait)
            self._sent.append((self.clock.now(), tokens))
