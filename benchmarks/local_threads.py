"""How many threads should the bundled model's llama.cpp server use? Times the same requests
(a file of about 1,500 tokens to summarize, 60 tokens of answer) with 1 and with 2 threads,
alternating, with and without two busy-loop processes beside it (a run's Ray workers, another job).
Reported as ratios taken in this one run: these machines are shared and noisy.

    python benchmarks/local_threads.py [--rounds 2] [--requests 2]

Measured on the 2-core machine: idle, 2 threads took 0.92x to 0.98x as long as 1; beside two busy
loops, 1.86x to 2.97x (and 1.4x to 3.3x with only another benchmark running). A run's Ray workers
always share the cores, hence default_threads(): half of them.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from openai import OpenAI

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the busy loops' helper

from processes import busy_loops  # noqa: E402

from magis_ray.actors.model.local_model import LocalModelServer  # noqa: E402

PROMPT = "Summarize this file.\n" + "\n".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(120))


def seconds_for(threads: int, requests: int) -> float:
    with LocalModelServer(threads=threads) as server:
        client = OpenAI(base_url=server.base_url, api_key="local")
        started = time.monotonic()
        for _ in range(requests):
            client.chat.completions.create(model=server.model_name, max_tokens=60,
                                           messages=[{"role": "user", "content": PROMPT}])
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternations of 1 and 2 threads per load")
    parser.add_argument("--requests", type=int, default=2, help="requests per timing")
    args = parser.parse_args()
    for load in ("unloaded", "two busy loops"):
        with busy_loops(2 if load != "unloaded" else 0):
            for round_ in range(args.rounds):
                one, two = seconds_for(1, args.requests), seconds_for(2, args.requests)
                print(f"{load:15} round {round_ + 1}: 1 thread {one:6.1f} s, 2 threads {two:6.1f} s, 2/1 = {two / one:.2f}", flush=True)


if __name__ == "__main__":
    main()
