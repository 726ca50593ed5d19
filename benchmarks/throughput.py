"""Throughput of a batch on Ray: the same issues at 1, 2, 4 and 8 concurrent runs.

The scripted model answers every call after a fixed latency; the gateway's concurrency limit is
set far above what 8 runs ask at once (and the most requests the model held at once is printed),
so only magis-ray itself can keep 8 runs from being 8 times one. Every level runs the same
--issues calc instances (one fixture repository, different instance ids) with BatchRunner in
one Ray session, after a warm-up, each into a store of its own. Printed per level:

- issues per minute, and the ratio to 1 concurrent run (goal: 8 runs at least 5 times one);
- peak memory: the sum of VmRSS (and of PSS, which counts shared pages once) of this session's
  Ray worker processes ("ray::" in their command line, children of its raylet) at the level's
  peak, per concurrent run, and over the idle baseline per concurrent run;
- events per second into the store (store positions / the level's wall time), and how that
  compares with what the store actor can take (measured at the end);
- where the time goes: per run, the wait for its supervisor (start call to RunStarted), the run's
  wall time against its LLM critical path, the machine's CPU use, and CPU seconds per kind of
  Ray process (process starts included).

The default latency, 1 s a call, is still quicker than a hosted model answers. At 0.3 s a
call, a 2-core machine runs out of CPU before 8 runs: each run starts about 6 Ray processes.

Usage: python benchmarks/throughput.py [--issues 40] [--latency 1.0] [--levels 1 2 4 8]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))  # the calc fixture project
sys.path.insert(0, str(Path(__file__).parent))  # overhead.py's critical path

import ray  # noqa: E402
from overhead import critical_path  # noqa: E402
from processes import cmdline_of, tree_of  # noqa: E402
from scenarios import BOTH_ISSUE, MEAN_FIX, SHOUT_FIX, calc_issue, make_calc_repo  # noqa: E402

from magis_ray.actors.runtime.batch import BatchItem, BatchRunner, batch_settings  # noqa: E402
from magis_ray.actors.runtime.deployment import Deployment, ensure_ray  # noqa: E402
from magis_ray.actors.model.gateway import GatewayConfig  # noqa: E402
from magis_ray.actors.model.scripted_server import ScriptedServer  # noqa: E402
from magis_ray.actors.model.scripted_team import ScriptedTeam  # noqa: E402
from magis_ray.events.codec import new_event  # noqa: E402
from magis_ray.events.schema import LLMExchanged, Message, PlanMade, RunSettings, RunStarted  # noqa: E402
from magis_ray.store import open_store  # noqa: E402

GOAL = 5.0
TICK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# --- measuring the Ray session's processes -------------------------------------------------------


def session_processes(root: int) -> dict[int, str]:
    """This driver and every process below it (its Ray session's GCS, raylet, agents, workers):
    pid -> kind. Other Ray sessions on the machine are left out."""
    return {pid: "driver" if pid == root else kind_of(cmdline_of(pid)) for pid in tree_of(root)}


def kind_of(cmdline: str) -> str:
    """ray::DeveloperService.run -> DeveloperService; ray::IDLE -> IDLE; a worker still importing
    (no ray:: title yet) -> starting; Ray's own daemons by name."""
    if "ray::" in cmdline:
        return cmdline.split("ray::", 1)[1].split()[0].split(".")[0]
    for marker, kind in (("default_worker.py", "starting"), ("/raylet/raylet", "raylet"), ("gcs_server", "gcs"),
                         ("dashboard/agent.py", "dashboard-agent"), ("runtime_env/agent", "runtime-env-agent"),
                         ("log_monitor", "log-monitor"), ("dashboard.py", "dashboard")):
        if marker in cmdline:
            return kind
    return Path(cmdline.split(" ", 1)[0]).name or "?"


def sample(pid: int) -> tuple[int, int, float] | None:
    """(RSS kB, PSS kB, CPU seconds) of a process, or None once it is gone."""
    proc = Path(f"/proc/{pid}")
    try:
        rss = pss = 0
        for line in (proc / "smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
        fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        return rss, pss, (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return None


def is_worker(kind: str) -> bool:
    """A Ray worker process: an actor's or an idle pooled one (what memory per run counts)."""
    return kind not in DAEMONS and not kind.startswith(("python", "?"))


DAEMONS = ("driver", "starting", "raylet", "gcs", "dashboard-agent", "runtime-env-agent", "log-monitor", "dashboard",
           "DashboardAgent", "RuntimeEnvAgent")


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / TICK, sum(values) / TICK


class Sampler:
    """Samples this Ray session's processes every `every_s` seconds on a thread: the peak memory
    of its worker processes, and CPU time by kind of process, each increment counted under the
    kind the process had when sampled (a new worker's imports count as "starting" or "IDLE" until
    it takes an actor). The driver's share includes the scripted model and this sampler."""

    def __init__(self, every_s: float = 0.25):
        self._every = every_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_cpu: dict[int, float] = {}
        self.begin()
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self._thread.start()

    def begin(self) -> None:
        with self._lock:
            self.peak_rss = self.peak_pss = self.peak_processes = 0
            self.by_kind: dict[str, float] = defaultdict(float)
            self.started = 0

    def _rows(self) -> dict[int, tuple[str, int, int, float]]:
        return {pid: (kind, *s) for pid, kind in session_processes(os.getpid()).items() if (s := sample(pid))}

    def snapshot(self) -> tuple[int, int, list[str]]:
        """(RSS kB, PSS kB, kinds) of the session's worker processes now."""
        rows = [r for r in self._rows().values() if is_worker(r[0])]
        return sum(r[1] for r in rows), sum(r[2] for r in rows), sorted(r[0] for r in rows)

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            rows = self._rows()
            workers = [r for r in rows.values() if is_worker(r[0])]
            with self._lock:
                self.peak_rss = max(self.peak_rss, sum(r[1] for r in workers))
                self.peak_pss = max(self.peak_pss, sum(r[2] for r in workers))
                self.peak_processes = max(self.peak_processes, len(workers))
                for pid, (kind, _, _, cpu) in rows.items():
                    if pid not in self._last_cpu:
                        self.started += 1
                    self.by_kind[kind] += cpu - self._last_cpu.get(pid, 0.0)
                    self._last_cpu[pid] = cpu

    def cpu_by_kind(self) -> dict[str, float]:
        """CPU seconds per kind of process since begin()."""
        with self._lock:
            return dict(self.by_kind)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# --- the batch -----------------------------------------------------------------------------------


class TimedDeployment(Deployment):
    """Notes when each run was asked to start (the supervisor's actor is created then)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started_at: dict[str, float] = {}

    def start(self, **kwargs):
        self.started_at[kwargs["run_id"]] = time.time()
        return super().start(**kwargs)


def items(repo: Path, base: str, count: int, prefix: str) -> list[BatchItem]:
    return [
        BatchItem(f"{prefix}-{i}", calc_issue(repo, base, BOTH_ISSUE, instance_id=f"{prefix}-{i}"))
        for i in range(1, count + 1)
    ]


def run_level(workers: int, batch_items, tmp: Path, config, repos: Path, name: str, sampler: Sampler | None):
    store_path = tmp / f"store-{name}"
    deployment = TimedDeployment(str(store_path), config)
    with open_store(str(store_path), create=True) as store:
        settings = batch_settings(RunSettings(top_k=4, model="scripted"), name)
        if sampler:
            sampler.begin()
        busy0, total0 = machine_busy()
        start = time.monotonic()
        results = BatchRunner(deployment, store, settings, str(repos), workers).run(batch_items)
        wall = time.monotonic() - start
        busy1, total1 = machine_busy()
        bad = [r for r in results if (r.status, r.outcome) != ("finished", "patched")]
        if bad:
            raise SystemExit(f"level {name}: {len(bad)} runs did not patch, e.g. {bad[0]}")
        logs = {info.run_id: store.read(info.run_id) for info in store.list_runs()}
        positions = max(r.position for events in logs.values() for r in events)
    launch, overhead, path = [], [], []
    for run_id, events in logs.items():
        started = next(r for r in events if isinstance(r.event, RunStarted))
        launch.append(started.time - deployment.started_at[run_id])
        plan = next(r.event for r in events if isinstance(r.event, PlanMade))
        critical = critical_path(events, plan.stages)
        path.append(critical)
        overhead.append((events[-1].time - started.time) - critical)
    return {
        "wall": wall, "issues": len(results), "events": positions, "launch": launch, "overhead": overhead, "path": path,
        "cpu_share": (busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0,
        "exchanges": sum(isinstance(r.event, LLMExchanged) for events in logs.values() for r in events),
    }


def store_capacity(config, tmp: Path, appends: int = 2000) -> float:
    """Events per second the store actor appends when many callers append one event each."""
    deployment = Deployment(str(tmp / "store-capacity"), config)
    event = LLMExchanged(
        purpose="locate_lines", model="scripted", messages=[Message("system", "x" * 600), Message("user", "y" * 2400)],
        answer="z" * 300, prompt_tokens=750, completion_tokens=75, latency_s=0.3, task_id="T1",
    )
    start = time.monotonic()
    ray.get([deployment.store.append_next.remote(f"cap-{i % 64}", [new_event(event, "developer:T1")]) for i in range(appends)])
    return appends / (time.monotonic() - start)


def mb(kb: float) -> str:
    return f"{kb / 1024:7.0f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--issues", type=int, default=40, help="issues per level")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per scripted model call")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 8], help="concurrent runs (the first is the base)")
    parser.add_argument("--gateway-concurrency", type=int, default=64, help="the gateway's limit of requests in flight")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="magis-throughput-"))
    try:
        measure(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(args, tmp: Path) -> None:
    repos = tmp / "repos"
    _, base = make_calc_repo(repos / "calc__calc")
    repo = repos / "calc__calc"
    t0 = time.monotonic()
    ensure_ray()
    print(f"ray.init: {time.monotonic() - t0:.1f} s; {os.cpu_count()} cores; scripted latency {args.latency} s a call; "
          f"gateway limit {args.gateway_concurrency} requests in flight; {args.issues} issues a level")
    sampler = Sampler()
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]}, delay_s=args.latency)
    rows = {}
    with ScriptedServer(team) as server:
        config = GatewayConfig(base_url=server.base_url, api_key="k", model="scripted", concurrency=args.gateway_concurrency)
        warm = run_level(2, items(repo, base, 2, "warmup"), tmp, config, repos, "warmup", None)
        time.sleep(1.0)  # the warm-up's actors end
        idle_rss, idle_pss, idle_kinds = sampler.snapshot()
        print(f"warm-up: {warm['issues']} issues in {warm['wall']:.1f} s; idle Ray workers: {', '.join(idle_kinds)}: "
              f"{mb(idle_rss).strip()} RSS, {mb(idle_pss).strip()} PSS")
        for level in args.levels:
            row = run_level(level, items(repo, base, args.issues, f"c{level}"), tmp, config, repos, f"level-{level}", sampler)
            row.update(peak_rss=sampler.peak_rss, peak_pss=sampler.peak_pss, peak_processes=sampler.peak_processes,
                       cpu=sampler.cpu_by_kind(), processes_started=sampler.started, in_flight=server.max_in_flight)
            rows[level] = row
            print(f"  level {level}: {row['issues']} issues in {row['wall']:.1f} s; machine load average "
                  f"{os.getloadavg()[0]:.1f} (other work on the machine slows every level)", flush=True)
            time.sleep(1.0)
        capacity = store_capacity(config, tmp)
    sampler.stop()

    first = args.levels[0]
    per_minute = {level: 60 * row["issues"] / row["wall"] for level, row in rows.items()}
    print()
    print("runs  issues/min  ratio  most-in-flight  peak RSS (per run)      over idle/run  peak PSS/run  events/s  CPU busy")
    for level, row in rows.items():
        print(
            f"{level:4d}  {per_minute[level]:10.1f}  {per_minute[level] / per_minute[first]:5.2f}  {row['in_flight']:14d}  "
            f"{mb(row['peak_rss'])} ({mb(row['peak_rss'] / level).strip():>7})  {mb((row['peak_rss'] - idle_rss) / level)}  "
            f"{mb(row['peak_pss'] / level)}  {row['events'] / row['wall']:8.1f}  {100 * row['cpu_share']:7.0f}%"
        )
    print()
    print("where the time goes (means per run; overhead = run wall time - LLM critical path)")
    print("runs  supervisor wait  LLM path  overhead  processes started  CPU s of the session by kind")
    for level, row in rows.items():
        n = len(row["launch"])
        total = sum(row["cpu"].values())
        kinds = f"total {total:.0f}: " + ", ".join(
            f"{k} {v:.0f}" for k, v in sorted(row["cpu"].items(), key=lambda kv: -kv[1]) if v >= 0.5)
        print(f"{level:4d}  {sum(row['launch']) / n:13.2f} s  {sum(row['path']) / n:6.2f} s  {sum(row['overhead']) / n:6.2f} s  "
              f"{row['processes_started']:17d}  {kinds}")
    last = args.levels[-1]
    ratio = per_minute[last] / per_minute[first]
    print()
    print(f"store actor capacity: {capacity:.0f} appends/s (one event each, many callers); "
          f"level {last} used {rows[last]['events'] / rows[last]['wall']:.0f} events/s")
    print(f"throughput_ratio_{last}={ratio:.2f} ({last} concurrent runs over {first}; goal >= {GOAL})")
    print(f"memory_per_run_mb={rows[last]['peak_rss'] / last / 1024:.0f} (peak RSS of Ray workers / {last} runs; "
          f"{(rows[last]['peak_rss'] - idle_rss) / last / 1024:.0f} over idle, PSS {rows[last]['peak_pss'] / last / 1024:.0f})")


if __name__ == "__main__":
    main()
