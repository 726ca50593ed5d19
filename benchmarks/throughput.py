"""Throughput of a batch on Ray: the same issues at 1, 2, 4 and 8 concurrent runs.

The scripted model answers every call after a fixed latency; the gateway's concurrency limit is
set far above what 8 runs ask at once (and the most requests the model held at once is printed),
so only magis-ray itself can keep 8 runs from being 8 times one. Every level runs the same
--issues calc instances (one fixture repository, different instance ids, two tasks each) with
BatchRunner in one Ray session, after a warm-up, each into a store of its own. Each level first
runs as many issues as it runs at once, untimed, in the same deployment: a batch's first runs
start the Ray processes its later runs reuse, so the timed ones show a long batch's steady state.

With --tests on, the team runs the code in the sandbox, on an environment the warm-up builds
(pytest from PyPI, into --env-cache) and every level finds cached: each run tests a reproduction
on the base commit, and each of its two tasks runs its regression file (tests/test_calc.py) on the
base commit, then the reproduction and that file against its patch.

Printed per level:

- issues per minute, and the ratio to 1 concurrent run (goals: 8 runs at least 6 times one at
  1 s a call, at least 5 times at 0.3 s);
- peak memory: the sum of VmRSS (and of PSS, which counts shared pages once) of this session's
  Ray worker processes ("ray::" in their command line, below its raylet; the tests' own sandboxed
  processes are not counted) at the level's peak, per concurrent run, and over the idle baseline
  per concurrent run (goals: at most 300 MB RSS and 150 MB PSS over idle);
- Ray worker processes started per run (goal: at most 6);
- events per second into the store (store positions / the level's wall time), and how that
  compares with what the store actor can take (measured at the end);
- where the time goes: per run, the wait for its supervisor (start call to RunStarted), the run's
  wall time against its LLM critical path, the machine's CPU use, and CPU seconds per kind of
  Ray process (process starts included).

The default latency, 1 s a call, is still quicker than a hosted model answers. At 0.3 s a
call, a 2-core machine runs short of CPU before 8 runs.

Usage: python benchmarks/throughput.py [--issues 40] [--latency 1.0] [--levels 1 2 4 8] [--tests on]
       [--env-cache DIR]
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
from magis_ray.actors.runtime.remote import NAMESPACE, store_name  # noqa: E402
from magis_ray.actors.model.gateway import GatewayConfig  # noqa: E402
from magis_ray.events.settings import EndpointSettings  # noqa: E402
from magis_ray.actors.model.scripted_server import ScriptedServer  # noqa: E402
from magis_ray.actors.model.scripted_team import ScriptedTeam  # noqa: E402
from magis_ray.events.codec import new_event  # noqa: E402
from magis_ray.events.schema import LLMExchanged, Message, PlanMade, RunSettings, RunStarted, TestsRan  # noqa: E402
from magis_ray.store import open_store  # noqa: E402

GOAL = {1.0: 6.0, 0.3: 5.0}  # 8 runs over 1, by seconds a call (the 0.3 s goal is for tests off)
# The reproduction test of the benchmark's issue (mean() and shout() both wrong): it fails on the
# base commit, and each task's patch alone makes it pass, as the two tasks run in one stage.
REPRODUCTION = ("from calc.stats import mean\nfrom calc.texts import shout\n\n\n"
                "def test_mean_or_shout():\n    assert mean([1, 2, 3, 4]) == 2.5 or shout('hi') == 'HI!'\n")
TICK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# --- measuring the Ray session's processes -------------------------------------------------------


def session_processes(root: int) -> dict[int, str]:
    """This driver and every process below it (its Ray session's GCS, raylet, agents, workers):
    pid -> kind. Other Ray sessions on the machine are left out."""
    return {pid: "driver" if pid == root else kind_of(cmdline_of(pid)) for pid in tree_of(root)}


def kind_of(cmdline: str) -> str:
    """ray::DeveloperService.run -> ray:DeveloperService; ray::IDLE -> ray:IDLE; a worker still
    importing (no ray:: title yet) -> ray:starting; Ray's own daemons and anything else by name."""
    if "ray::" in cmdline:
        return WORKER + cmdline.split("ray::", 1)[1].split()[0].split(".")[0]
    for marker, kind in (("default_worker.py", WORKER + "starting"), ("/raylet/raylet", "raylet"), ("gcs_server", "gcs"),
                         ("dashboard/agent.py", "dashboard-agent"), ("runtime_env/agent", "runtime-env-agent"),
                         ("log_monitor", "log-monitor"), ("dashboard.py", "dashboard")):
        if marker in cmdline:
            return kind
    return Path(cmdline.split(" ", 1)[0]).name or "?"


def cpu_of(pid: int) -> float | None:
    """CPU seconds of a process, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return None


def memory_of(pid: int) -> tuple[int, int] | None:
    """(RSS kB, PSS kB) of a process, or None once it is gone. Reading smaps_rollup walks the
    process's page tables (about 2 ms of CPU for a Ray worker), so it is read less often."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return rss, pss


def is_worker(kind: str) -> bool:
    """A Ray worker process: an actor's, a task's or an idle pooled one (what memory per run
    counts); never Ray's daemons, nor the processes a test run starts (bwrap, sh, pytest)."""
    return kind.startswith(WORKER) and kind not in DAEMONS


WORKER = "ray:"  # kind_of's prefix for a process Ray runs Python work in
DAEMONS = ("ray:DashboardAgent", "ray:RuntimeEnvAgent")


def by_kind(rows: list[tuple[str, int, int]]) -> dict[str, tuple[int, int, int]]:
    """(kind, RSS kB, PSS kB) rows -> kind -> (processes, RSS kB, PSS kB)."""
    kinds: dict[str, tuple[int, int, int]] = {}
    for kind, rss, pss in rows:
        count, rss_sum, pss_sum = kinds.get(kind, (0, 0, 0))
        kinds[kind] = (count + 1, rss_sum + rss, pss_sum + pss)
    return kinds


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / TICK, sum(values) / TICK


class Sampler:
    """Samples this Ray session's processes on a thread: CPU time by kind of process every
    `every_s` seconds, each increment counted under the kind the process had when sampled (a new
    worker's imports count as "starting" or "IDLE" until it takes an actor), and the memory of
    its worker processes every `memory_every_s` (their peak). The driver's share includes the
    scripted model and this sampler (with 60 workers, about a tenth of a core)."""

    def __init__(self, every_s: float = 0.25, memory_every_s: float = 1.0):
        self._every = every_s
        self._memory_every = max(1, round(memory_every_s / every_s))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last_cpu: dict[int, float] = {}
        self.begin()
        self._thread = threading.Thread(target=self._loop, name="sampler", daemon=True)
        self._thread.start()

    def begin(self) -> None:
        with self._lock:
            self.peak_rss = self.peak_pss = self.peak_processes = 0
            self.peak_kinds: dict[str, tuple[int, int, int]] = {}  # at the RSS peak: kind -> (processes, RSS kB, PSS kB)
            self.by_kind: dict[str, float] = defaultdict(float)
            self.started = 0  # Ray worker processes first seen since begin()

    def _memory(self, kinds: dict[int, str]) -> list[tuple[str, int, int]]:
        return [(kind, *m) for pid, kind in kinds.items() if is_worker(kind) and (m := memory_of(pid))]

    def snapshot(self) -> tuple[int, int, list[str]]:
        """(RSS kB, PSS kB, kinds) of the session's worker processes now."""
        rows = self._memory(session_processes(os.getpid()))
        return sum(r[1] for r in rows), sum(r[2] for r in rows), sorted(r[0] for r in rows)

    def _loop(self) -> None:
        tick = 0
        while not self._stop.wait(self._every):
            kinds = session_processes(os.getpid())
            cpu = {pid: c for pid in kinds if (c := cpu_of(pid)) is not None}
            workers = self._memory(kinds) if tick % self._memory_every == 0 else None
            tick += 1
            with self._lock:
                if workers is not None:
                    if sum(r[1] for r in workers) > self.peak_rss:
                        self.peak_kinds = by_kind(workers)
                    self.peak_rss = max(self.peak_rss, sum(r[1] for r in workers))
                    self.peak_pss = max(self.peak_pss, sum(r[2] for r in workers))
                    self.peak_processes = max(self.peak_processes, len(workers))
                for pid, seconds in cpu.items():
                    kind = kinds[pid]
                    if pid not in self._last_cpu and is_worker(kind):
                        self.started += 1
                    self.by_kind[kind] += seconds - self._last_cpu.get(pid, 0.0)
                    self._last_cpu[pid] = seconds

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


def run_level(workers: int, batch_items, tmp: Path, config, repos: Path, name: str, sampler: Sampler | None, tests: bool,
              warm_items=()):
    """One batch of `batch_items` at `workers` runs at once, timed, after `warm_items` (untimed) in
    the same deployment: a batch's first runs start the processes its later runs reuse, so the
    timed issues show a long batch's steady state."""
    store_path = tmp / f"store-{name}"
    deployment = TimedDeployment(str(store_path), config)
    with open_store(str(store_path), create=True) as store:
        settings = batch_settings(RunSettings(top_k=4, model="scripted", tests=tests), name)
        if warm_items:
            BatchRunner(deployment, store, batch_settings(settings, f"{name}-warm-up"), str(repos), workers).run(warm_items)
        if sampler:
            sampler.begin()
        busy0, total0 = machine_busy()
        start = time.monotonic()
        results = BatchRunner(deployment, store, settings, str(repos), workers).run(batch_items)
        wall = time.monotonic() - start
        deployment.close()  # its kept processes end: the next level starts as this one did
        busy1, total1 = machine_busy()
        bad = [r for r in results if (r.status, r.outcome) != ("finished", "patched")]
        if bad:
            raise SystemExit(f"level {name}: {len(bad)} runs did not patch, e.g. {bad[0]}")
        timed = {item.instance_id for item in batch_items}
        logs = {info.run_id: events for info in store.list_runs() if (events := store.read(info.run_id))[0].event.instance_id in timed}
    test_runs = [r.event for events in logs.values() for r in events if isinstance(r.event, TestsRan) and r.event.purpose != "prepare"]
    if tests:
        expected = 5 * len(logs)  # a reproduction, and per task a baseline and a check
        unready = [r.event.output for events in logs.values() for r in events
                   if isinstance(r.event, TestsRan) and r.event.purpose == "prepare" and r.event.outcome != "passed"]
        if unready or len(test_runs) != expected:
            raise SystemExit(f"level {name}: {len(test_runs)} test runs, not {expected}; {unready[:1]}")
    launch, overhead, path = [], [], []
    for run_id, events in logs.items():
        started = next(r for r in events if isinstance(r.event, RunStarted))
        launch.append(started.time - deployment.started_at[run_id])
        plan = next(r.event for r in events if isinstance(r.event, PlanMade))
        critical = critical_path(events, plan.stages)
        path.append(critical)
        overhead.append((events[-1].time - started.time) - critical)
    return {
        "wall": wall, "issues": len(results), "events": sum(map(len, logs.values())), "launch": launch, "overhead": overhead, "path": path,
        "cpu_share": (busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0,
        "exchanges": sum(isinstance(r.event, LLMExchanged) for events in logs.values() for r in events),
        "test_s": sum(t.duration_s for t in test_runs) / len(logs),
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


def end_store_actor(store_path: Path) -> None:
    """A level's store actor ends with the level (it is detached): each level counts only its own,
    beside the warm-up's, which the idle baseline holds."""
    ray.kill(ray.get_actor(store_name(str(store_path)), namespace=NAMESPACE))


def mb(kb: float) -> str:
    return f"{kb / 1024:7.0f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--issues", type=int, default=40, help="issues per level")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per scripted model call")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 8], help="concurrent runs (the first is the base)")
    parser.add_argument("--gateway-concurrency", type=int, default=64, help="the gateway's limit of requests in flight")
    parser.add_argument("--tests", choices=("on", "off"), default="off", help="the team runs the code (default off)")
    parser.add_argument("--env-cache", help="where the tests' environment is built and cached (default: a temp folder)")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="magis-throughput-"))
    # read by each run's supervisor, in the Ray workers this driver's Ray starts (they inherit it)
    os.environ["MAGIS_ENV_CACHE"] = os.path.abspath(args.env_cache) if args.env_cache else str(tmp / "envs")
    try:
        measure(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(args, tmp: Path) -> None:
    repos = tmp / "repos"
    _, base = make_calc_repo(repos / "calc__calc")
    repo = repos / "calc__calc"
    tests = args.tests == "on"
    t0 = time.monotonic()
    ensure_ray()
    print(f"ray.init: {time.monotonic() - t0:.1f} s; {os.cpu_count()} cores; scripted latency {args.latency} s a call; "
          f"gateway limit {args.gateway_concurrency} requests in flight; {args.issues} issues a level; tests {args.tests}; "
          f"load average {os.getloadavg()[0]:.1f}")
    sampler = Sampler()
    team = ScriptedTeam({"calc/stats.py": [MEAN_FIX], "calc/texts.py": [SHOUT_FIX]}, delay_s=args.latency,
                        reproductions=[REPRODUCTION] if tests else [])
    rows = {}
    with ScriptedServer(team) as server:
        config = GatewayConfig(base_url=server.base_url, api_key="k", model="scripted",
                               endpoint=EndpointSettings(concurrency=args.gateway_concurrency))
        warm = run_level(2, items(repo, base, 2, "warmup"), tmp, config, repos, "warmup", None, tests)
        time.sleep(1.0)  # the warm-up's actors end
        idle_rss, idle_pss, idle_kinds = sampler.snapshot()
        print(f"warm-up: {warm['issues']} issues in {warm['wall']:.1f} s; idle Ray workers: {', '.join(idle_kinds)}: "
              f"{mb(idle_rss).strip()} RSS, {mb(idle_pss).strip()} PSS")
        for level in args.levels:
            row = run_level(level, items(repo, base, args.issues, f"c{level}"), tmp, config, repos, f"level-{level}", sampler, tests,
                            warm_items=items(repo, base, level, f"w{level}"))
            row.update(peak_rss=sampler.peak_rss, peak_pss=sampler.peak_pss, peak_processes=sampler.peak_processes,
                       peak_kinds=sampler.peak_kinds,
                       cpu=sampler.cpu_by_kind(), processes_started=sampler.started, in_flight=server.max_in_flight)
            rows[level] = row
            end_store_actor(tmp / f"store-level-{level}")
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
    print("where the time goes (means per run; overhead = run wall time - LLM critical path; tests = the sandboxed")
    print("test runs' own wall time, summed; processes = Ray worker processes started, per run)")
    print("runs  supervisor wait  LLM path  overhead  tests   processes  CPU s of the session by kind")
    for level, row in rows.items():
        n = len(row["launch"])
        total = sum(row["cpu"].values())
        kinds = f"total {total:.0f}: " + ", ".join(
            f"{k.removeprefix(WORKER)} {v:.0f}" for k, v in sorted(row["cpu"].items(), key=lambda kv: -kv[1]) if v >= 0.5)
        print(f"{level:4d}  {sum(row['launch']) / n:13.2f} s  {sum(row['path']) / n:6.2f} s  {sum(row['overhead']) / n:6.2f} s  "
              f"{row['test_s']:4.1f} s  {row['processes_started'] / row['issues']:9.1f}  {kinds}")
    last = args.levels[-1]
    print()
    print(f"where the memory goes at level {last}'s peak (Ray worker processes by kind: count, RSS and PSS each)")
    for kind, (count, rss, pss) in sorted(rows[last]["peak_kinds"].items(), key=lambda kv: -kv[1][1]):
        print(f"  {kind.removeprefix(WORKER):24s} {count:3d} x {rss / count / 1024:5.0f} MB RSS, {pss / count / 1024:5.0f} MB PSS")
    ratio = per_minute[last] / per_minute[first]
    goal = GOAL.get(args.latency)
    print()
    print(f"store actor capacity: {capacity:.0f} appends/s (one event each, many callers); "
          f"level {last} used {rows[last]['events'] / rows[last]['wall']:.0f} events/s")
    print(f"throughput_ratio_{last}={ratio:.2f} ({last} concurrent runs over {first}" + (f"; goal >= {goal})" if goal else ")"))
    print(f"memory_per_run_mb={rows[last]['peak_rss'] / last / 1024:.0f} (peak RSS of Ray workers / {last} runs; "
          f"{(rows[last]['peak_rss'] - idle_rss) / last / 1024:.0f} over idle, goal <= 300; PSS "
          f"{rows[last]['peak_pss'] / last / 1024:.0f}, {(rows[last]['peak_pss'] - idle_pss) / last / 1024:.0f} over idle, goal <= 150)")
    print(f"processes_per_run={rows[last]['processes_started'] / rows[last]['issues']:.1f} (Ray worker processes started "
          f"at level {last}, per run; goal <= 6)")


if __name__ == "__main__":
    main()
