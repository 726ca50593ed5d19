"""Requests and tokens per minute hold, in the limiter and through the gateway against a real server."""
from __future__ import annotations

import asyncio
import time

from magis_ray.actors.model.gateway import Gateway, GatewayConfig
from magis_ray.events.settings import EndpointSettings
from magis_ray.actors.model.ratelimit import RateLimiter
from magis_ray.actors.model.scripted_server import Rule, ScriptedServer
from magis_ray.events.schema import Message


class SteppedClock:
    """Time that moves only when the limiter sleeps: what the limiter decides, free of the machine's load."""

    def __init__(self, start: float = 1000.0):
        self.start = self.time = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.time

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.time += seconds


def starts(requests_per_window: int = 0, tokens_per_window: int = 0, tokens: list[int] = ()) -> list[float]:
    """When each request may go, in seconds since the first asked, under a 60 s window."""
    clock = SteppedClock()
    limiter = RateLimiter(clock, requests_per_window, tokens_per_window, window_s=60.0)

    async def go():
        seen = []
        for n in tokens:
            await limiter.acquire(n)
            seen.append(clock.now() - clock.start)
        return seen

    return asyncio.run(go())


def test_requests_per_window_hold():
    # three go at once, the next three when the first three leave the window, the seventh a window later
    assert starts(requests_per_window=3, tokens=[1] * 7) == [0, 0, 0, 60, 60, 60, 120]


def test_tokens_per_window_hold():
    # 60 + 30 fit; the next 60 waits for the first 60 to leave; 10 then fits beside it
    assert starts(tokens_per_window=100, tokens=[60, 30, 60, 10]) == [0, 0, 60, 60]
    assert starts(tokens_per_window=100, tokens=[500]) == [0]  # too big: goes alone


def test_the_gateway_holds_the_rate_across_concurrent_requests():
    with ScriptedServer([Rule(json={"ok": True})]) as server:
        gateway = Gateway(GatewayConfig(base_url=server.base_url, api_key="k", model="m", rate_window_s=0.5,
                                        endpoint=EndpointSettings(rpm=4, concurrency=16)))

        async def burst():
            return await asyncio.gather(*(
                gateway.exchange(run_id=f"run{i % 3}", purpose="p", messages=[Message("user", "hi")]) for i in range(10)
            ))

        t0 = time.monotonic()
        events = asyncio.run(burst())
        received = sorted(r.time_received - t0 for r in server.requests)  # the server's clock is this one
    assert all(not e.error for e in events) and len(received) == 10
    # at most 4 requests in any half second: the 5th to 8th wait for the first window to pass, the 9th
    # and 10th for the second. Lower bounds only (a request may reach the server late on a loaded
    # machine, never early); the exact schedule is the limiter's test, on a stepped clock.
    assert min(received[4:]) >= 0.5 and min(received[8:]) >= 1.0, [round(r, 3) for r in received]
