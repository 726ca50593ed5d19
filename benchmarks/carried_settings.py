"""What a driver's MAGIS_* settings cost each actor it starts on a joined Ray, carried two ways: as a
runtime env (Ray starts each such worker through its setup process first) and as the actor's first
argument, which is how magis-ray carries them (actors/runtime/remote.py's `carrying`). The actor is
a real QA Engineer's (its process, Ray and the role's modules); the CPU is the machine's, counted
from /proc/stat while a batch of actors starts, in alternating rounds. Reported as ratios taken in
this one run: these machines are shared and noisy.

    python benchmarks/carried_settings.py [--actors 8] [--rounds 2]

Measured on the 2-core machine with nothing else running: 1.76 and 1.68 CPU-seconds an actor as a
runtime env, 0.77 and 1.00 as an argument (argument/runtime env = 0.44 and 0.59). A whole scripted
submit (tests off) joining a running Ray with MAGIS_LOG_LEVEL set spent 24.8 and 25.9 CPU-seconds
of the machine and 15.7 and 16.3 s when the settings went as a runtime env; 16.1 and 17.2
CPU-seconds and 10.9 and 11.3 s as arguments, as much as a run with no setting to carry (14.8 and
16.9 CPU-seconds, 10.5 and 11.0 s).
"""
from __future__ import annotations

import argparse
import time

from throughput import machine_busy

SETTINGS = {"MAGIS_LOG_LEVEL": "warning", "MAGIS_PROMPTS_DIR": ""}


def per_actor(count: int, as_runtime_env: bool) -> float:
    """CPU-seconds an actor: `count` QA actors started, each answering once, then ended."""
    import ray

    from magis_ray.actors.runtime.remote import actor_classes

    qa = actor_classes()["qa"]
    before, _ = machine_busy()
    if as_runtime_env:
        actors = [qa.options(runtime_env={"env_vars": SETTINGS}).remote({}) for _ in range(count)]
    else:
        actors = [qa.remote(SETTINGS) for _ in range(count)]
    ray.get([actor.ready.remote() for actor in actors])
    time.sleep(2)  # the workers' start-up tails (their first log lines, Ray's registration) settle
    spent = machine_busy()[0] - before
    for actor in actors:
        ray.kill(actor)
    time.sleep(2)
    return spent / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import ray

    from magis_ray.actors.runtime.deployment import own_ray_config

    ray.init(include_dashboard=False, log_to_driver=False, **own_ray_config("local"))
    time.sleep(5)  # Ray's own start-up finishes before anything is counted
    try:
        for round_ in range(1, args.rounds + 1):
            runtime_env = per_actor(args.actors, as_runtime_env=True)
            argument = per_actor(args.actors, as_runtime_env=False)
            print(f"round {round_}: {runtime_env:.2f} CPU-s an actor as a runtime env, {argument:.2f} as an argument "
                  f"(argument/runtime env = {argument / runtime_env:.2f})")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
