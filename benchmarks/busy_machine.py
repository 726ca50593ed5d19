"""What Ray's worker priority costs a run on a busy machine. The same team run with tests (the calc
project, the scripted model, a reproduction test, a baseline and a check in the sandbox) beside two
busy loops, with Ray's workers at its default of nice 15 and at 0 (what magis-ray sets),
alternating, each in a Ray of its own. Reported as ratios taken in this one run: these machines are
shared and noisy.

    python benchmarks/busy_machine.py [--rounds 2] [--loops 2]

Measured on the 2-core machine beside two busy loops, the environment cached: nice 15 took 71 and
82 s, nice 0 took 13 and 17 s (0/15 = 0.18 and 0.21); the same run alone takes about 10 s.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the calc fixture project, the busy loops

REPRODUCES = "from calc.stats import mean\n\n\ndef test_mean_of_four():\n    assert mean([1, 2, 3, 4]) == 2.5\n"


def one_run(niceness: int, folder: Path, round_: int) -> float:
    """A run in a Ray of its own whose workers run at `niceness`: its wall time, driver's start to
    its terminal event."""
    import ray
    from scenarios import MEAN_FIX, calc_issue

    from magis_ray.actors.model.gateway import GatewayConfig
    from magis_ray.actors.model.scripted_server import ScriptedServer
    from magis_ray.actors.model.scripted_team import ScriptedTeam
    from magis_ray.actors.runtime.deployment import Deployment, own_ray_config
    from magis_ray.events.schema import RunFinished, RunSettings

    repo = folder / "calc"
    base = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    config = own_ray_config("local")
    config["_system_config"]["worker_niceness"] = niceness
    ray.init(address="local", include_dashboard=False, log_to_driver=False, namespace="magis", **config)
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX]}, reproductions=[REPRODUCES])
    with ScriptedServer(team) as server:
        deployment = Deployment(str(folder / "store"), GatewayConfig(base_url=server.base_url, api_key="k", model="scripted"))
        started = time.monotonic()
        run = deployment.start(issue=calc_issue(repo, base), settings=RunSettings(env_setup="python -m pip install pytest"),
                               repo_path=str(repo), run_id=f"nice{niceness}-{round_}")
        end = deployment.finish(run)
        seconds = time.monotonic() - started
    assert isinstance(end, RunFinished) and end.outcome == "patched", end
    ray.shutdown()
    return seconds


def timed(niceness: int, folder: Path, round_: int) -> float:
    done = subprocess.run([sys.executable, __file__, "--one", str(niceness), "--folder", str(folder), "--round", str(round_)],
                          capture_output=True, text=True, env={**os.environ, "MAGIS_ENV_CACHE": str(folder / "envs")})
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="alternations of nice 15 and nice 0")
    parser.add_argument("--loops", type=int, default=2, help="busy loops beside the runs")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(one_run(args.one, args.folder, args.round))
        return
    from processes import busy_loops
    from scenarios import make_calc_repo

    folder = Path(tempfile.mkdtemp(prefix="magis-busy-"))
    make_calc_repo(folder / "calc")
    # The first run builds the environment and the testbed both settings then take from the cache.
    print(f"warm-up (builds the environment, not counted): {timed(0, folder, 0):.1f} s", flush=True)
    with busy_loops(args.loops):
        for round_ in range(1, args.rounds + 1):
            slow, fair = timed(15, folder, round_), timed(0, folder, round_)
            print(f"round {round_}: nice 15 {slow:6.1f} s, nice 0 {fair:6.1f} s, 0/15 = {fair / slow:.2f}", flush=True)


if __name__ == "__main__":
    main()
