"""How much the actor system adds to the model's own time, measured in one run.

With the scripted model at a fixed latency per call, a two-task issue runs on Ray:
- overhead ratio: the run's wall time (driver's start to its terminal event) over the sum of
  LLM latencies on its critical path (parallel lanes count once; goal: at most 1.3);
- parallel ratio: the plan's stages run in parallel against the same plan forced sequential,
  timed over the stages (PlanMade to RunFinished; goal: at most 0.6), and over the whole run.

Usage: python benchmarks/overhead.py [--latency 0.5] [--rounds 2]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the calc fixture project

from scenarios import BOTH_ISSUE, MEAN_FIX, SHOUT_FIX, calc_issue, make_calc_repo  # noqa: E402

from magis_ray.actors.runtime.deployment import Deployment, ensure_ray  # noqa: E402
from magis_ray.actors.model.gateway import GatewayConfig  # noqa: E402
from magis_ray.actors.model.scripted_server import ScriptedServer  # noqa: E402
from magis_ray.actors.model.scripted_team import ScriptedTeam  # noqa: E402
from magis_ray.events.schema import LLMExchanged, PlanMade, RunFinished, RunSettings  # noqa: E402
from magis_ray.store import open_store  # noqa: E402


def lane_latency(events) -> dict[str, float]:
    """Model seconds per lane."""
    sums: dict[str, float] = defaultdict(float)
    for r in events:
        if isinstance(r.event, LLMExchanged):
            sums[r.actor] += r.event.latency_s
    return sums


def critical_path(events, stages: list[list[str]]) -> float:
    """The model time no parallelism can hide: the phases run in order, and within a phase the
    lanes run in parallel, so each phase costs its slowest lane."""
    lanes = lane_latency(events)

    def slowest(matches) -> float:
        return max((seconds for lane, seconds in lanes.items() if matches(lane)), default=0.0)

    custodian = slowest(lambda lane: lane.startswith("custodian"))
    define = slowest(lambda lane: lane.startswith("manager:") and not lane.startswith("manager:T"))
    recruit = slowest(lambda lane: lane.startswith("manager:T"))
    # the meeting is a round table: the Manager's turns, the plan and each developer's turn in sequence
    meeting = lanes.get("manager", 0.0) + sum(s for lane, s in lanes.items() if lane.endswith(":meeting"))
    work = sum(max(lanes.get(f"developer:{t}", 0.0) + lanes.get(f"qa:{t}", 0.0) for t in stage) for stage in stages)
    return custodian + define + recruit + meeting + work


def one_run(deployment, repo, base, run_id) -> tuple[float, str]:
    start = time.monotonic()
    run = deployment.start(issue=calc_issue(repo, base, BOTH_ISSUE), settings=RunSettings(tests=False, top_k=4), repo_path=str(repo), run_id=run_id)
    end = deployment.finish(run)
    wall = time.monotonic() - start
    assert isinstance(end, RunFinished) and end.outcome == "patched", end
    return wall, run_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per scripted model call")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="magis-overhead-"))
    repo = tmp / "calc"
    _, base = make_calc_repo(repo)
    fixes = {"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]}
    ensure_ray()
    results = defaultdict(list)
    for mode, stages in (("parallel", None), ("sequential", [["calc/stats.py"], ["calc/texts.py"]])):
        with ScriptedServer(ScriptedTeam(fixes, stages=stages, delay_s=args.latency)) as server:
            deployment = Deployment(str(tmp / "store"), GatewayConfig(base_url=server.base_url, api_key="k", model="scripted"))
            for i in range(args.rounds + 1):  # the first round warms Ray's worker pool up and is not counted
                wall, run_id = one_run(deployment, repo, base, f"{mode}-{i}")
                if i == 0:
                    continue
                with open_store(str(tmp / "store")) as store:
                    events = store.read(run_id)
                [plan] = [r for r in events if isinstance(r.event, PlanMade)]
                finished = events[-1]
                path = critical_path(events, plan.event.stages)
                results[mode].append((wall, path, finished.time - plan.time))
    best = {mode: min(rows) for mode, rows in results.items()}
    for mode, (wall, path, stages_s) in best.items():
        print(f"{mode:10s} wall {wall:6.2f} s  critical-path LLM time {path:6.2f} s  stages {stages_s:5.2f} s")
    wall, path, _ = best["parallel"]
    print(f"overhead_ratio={wall / path:.2f} (wall / critical-path LLM time; goal <= 1.3)")
    print(f"parallel_stage_ratio={best['parallel'][2] / best['sequential'][2]:.2f} (parallel / sequential stages; goal <= 0.6)")
    print(f"parallel_run_ratio={best['parallel'][0] / best['sequential'][0]:.2f} (whole runs, for context)")


if __name__ == "__main__":
    main()
