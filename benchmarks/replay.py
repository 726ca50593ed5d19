"""Replaying a recorded run against running it live, measured in one run.

A two-task issue runs live on Ray against the scripted model at a fixed latency per call; then
`replay_run` re-executes the same team from the log (every answer from the record, no model,
nothing written). Prints the ratio live / replay (goal: replay at least 20 times faster).

Usage: python benchmarks/replay.py [--latency 0.5] [--rounds 3]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the calc fixture project

from scenarios import BOTH_ISSUE, MEAN_FIX, SHOUT_FIX, calc_issue, make_calc_repo  # noqa: E402

from magis_ray.actors.runtime.deployment import Deployment, ensure_ray  # noqa: E402
from magis_ray.actors.model.gateway import GatewayConfig  # noqa: E402
from magis_ray.actors.runtime.replay import replay_run  # noqa: E402
from magis_ray.actors.model.scripted_server import ScriptedServer  # noqa: E402
from magis_ray.actors.model.scripted_team import ScriptedTeam  # noqa: E402
from magis_ray.events.schema import RunFinished, RunSettings  # noqa: E402
from magis_ray.store import open_store  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per scripted model call")
    parser.add_argument("--rounds", type=int, default=3, help="replays timed (the best counts)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="magis-replay-"))
    repo = tmp / "calc"
    _, base = make_calc_repo(repo)
    issue = calc_issue(repo, base, BOTH_ISSUE)
    ensure_ray()
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]}, delay_s=args.latency)
    with ScriptedServer(team) as server:
        deployment = Deployment(str(tmp / "store"), GatewayConfig(base_url=server.base_url, api_key="k", model="scripted"))
        lives = []
        for i in range(2):  # the first run warms Ray's worker pool up
            start = time.monotonic()
            end = deployment.finish(deployment.start(issue=issue, settings=RunSettings(tests=False, top_k=4), repo_path=str(repo), run_id=f"live-{i}"))
            lives.append(time.monotonic() - start)
            assert isinstance(end, RunFinished), end
        calls = len(server.requests) // 2
    with open_store(str(tmp / "store")) as store:
        events = store.read("live-1")
        replays = []
        for _ in range(args.rounds):
            start = time.monotonic()
            report = replay_run(events, store, str(repo))
            replays.append(time.monotonic() - start)
            assert report.divergence is None and report.events == len(events), report
    live, replay = lives[-1], min(replays)
    print(f"live run   {live:6.2f} s  ({calls} model calls at {args.latency} s, {len(events)} events)")
    print(f"replay     {replay:6.3f} s  (no model call, nothing written)")
    print(f"replay_speedup={live / replay:.1f} (live / replay; goal >= 20)")


if __name__ == "__main__":
    main()
