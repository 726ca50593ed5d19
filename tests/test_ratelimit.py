"""Requests and tokens per minute hold, in the limiter and through the gateway against a real server."""
from __future__ import annotations

import asyncio
import time

from magis_ray.actors.model.gateway import Gateway, GatewayConfig
from magis_ray.actors.model.ratelimit import RateLimiter
from magis_ray.actors.model.scripted_server import Rule, ScriptedServer
from magis_ray.events.schema import Message


def starts(limiter: RateLimiter, tokens: list[int]) -> list[float]:
    async def go():
        t0, seen = time.monotonic(), []
        for n in tokens:
            await limiter.acquire(n)
            seen.append(time.monotonic() - t0)
        return seen

    return asyncio.run(go())


def test_requests_per_window_hold():
    seen = starts(RateLimiter(requests_per_window=3, window_s=0.4), [1] * 7)
    assert max(seen[:3]) < 0.1
    assert 0.38 <= seen[3] < 0.6 and seen[5] < 0.6 and seen[6] >= 0.78


def test_tokens_per_window_hold():
    seen = starts(RateLimiter(tokens_per_window=100, window_s=0.4), [60, 30, 60, 10])
    assert seen[1] < 0.1 and 0.38 <= seen[2] < 0.6 and seen[3] >= seen[2]
    assert starts(RateLimiter(tokens_per_window=100, window_s=0.4), [500])[0] < 0.1  # too big: goes alone


def test_the_gateway_holds_the_rate_across_concurrent_requests():
    with ScriptedServer([Rule(json={"ok": True})]) as server:
        gateway = Gateway(GatewayConfig(base_url=server.base_url, api_key="k", model="m", requests_per_minute=4,
                                        rate_window_s=0.5, concurrency=16))

        async def burst():
            return await asyncio.gather(*(
                gateway.exchange(run_id=f"run{i % 3}", purpose="p", messages=[Message("user", "hi")]) for i in range(10)
            ))

        t0 = time.monotonic()
        events = asyncio.run(burst())
        elapsed = time.monotonic() - t0
        received = sorted(r.time_received for r in server.requests)
    assert all(not e.error for e in events) and len(received) == 10
    # at most 4 requests in any half second, so 10 take at least two more windows
    assert elapsed >= 1.0
    assert all(received[i + 4] - received[i] >= 0.45 for i in range(len(received) - 4))
