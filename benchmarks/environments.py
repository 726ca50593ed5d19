"""Environment builds with uv against pip: real SWE-bench recipes, each built from nothing by each
installer, then again with the installer's cache warm (the environment's folder removed, the
cache kept); and whether the two installers' environments hold the same distributions at the same
versions (a different version can change a verdict).

    .venv/bin/python benchmarks/environments.py [--instances ID ...] [--dataset D] [--repos-dir DIR]

Prints a row per instance (seconds per build, and the ratios pip / uv in this run) and the
differences between the two environments' `importlib.metadata` listings. Each instance's builds
run in a scratch cache folder of their own (beside the node's, so that hard links stay on one
filesystem), removed at the end."""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from magis_ray.actors.execution.environments import Environment, EnvironmentCache, default_cache_root
from magis_ray.actors.execution.environments.installers import PIP, UV
from magis_ray.actors.execution.sandbox import Sandbox
from magis_ray.actors.swebench.grading import spec_for

DEFAULT_DATASET = next((p / "shared" / "swebench" / "verified-tuning.jsonl" for p in Path(__file__).resolve().parents
                        if (p / "shared" / "swebench").is_dir()), Path("verified-tuning.jsonl"))
DEFAULT_INSTANCES = ("pallets__flask-5014", "psf__requests-2931", "sympy__sympy-24661")
LISTING = ("import importlib.metadata as m, json; "
           "print(json.dumps(sorted({(d.metadata['Name'].lower().replace('_', '-'), d.version) for d in m.distributions()})))")


def distributions(env: Environment) -> dict[str, str]:
    done = subprocess.run([str(Path(env.venv) / "bin" / "python"), "-c", LISTING], capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout))


def timed_build(cache: EnvironmentCache, recipe) -> tuple[Environment, float]:
    start = time.monotonic()
    env = cache.get(recipe)
    return env, time.monotonic() - start


def rebuilt_warm(cache: EnvironmentCache, recipe, env: Environment) -> float:
    """The same environment built again with the installer's cache as the first build left it."""
    shutil.rmtree(env.path)
    Path(f"{env.path}.lock").unlink(missing_ok=True)
    return timed_build(cache, recipe)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", nargs="+", default=list(DEFAULT_INSTANCES))
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--repos-dir", type=Path, default=Path("/work/fidelity/repos"))
    parser.add_argument("--env-cache", type=Path, default=default_cache_root(), help="scratch caches go beside it")
    args = parser.parse_args()
    records = {r["instance_id"]: r for r in map(json.loads, args.dataset.read_text().splitlines()) if r}
    args.env_cache.parent.mkdir(parents=True, exist_ok=True)
    print("| instance | Python | pip cold s | pip warm s | uv cold s | uv warm s | pip/uv cold | pip/uv warm | distributions | differences |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    totals = {"pip cold": 0.0, "pip warm": 0.0, "uv cold": 0.0, "uv warm": 0.0}
    for instance in args.instances:
        record = records[instance]
        recipe = spec_for(record, args.repos_dir / record["repo"].replace("/", "__")).testbed.env
        scratch = Path(tempfile.mkdtemp(prefix="magis-envs-", dir=args.env_cache.parent))
        try:
            seconds, envs = {}, {}
            for name in (PIP, UV):
                cache = EnvironmentCache(scratch / name, Sandbox())
                chosen = dataclasses.replace(recipe, installer=name)
                envs[name], seconds[f"{name} cold"] = timed_build(cache, chosen)
                found = distributions(envs[name])
                seconds[f"{name} warm"] = rebuilt_warm(cache, chosen, envs[name])
                assert distributions(envs[name]) == found, f"{name}: the warm build differs from the cold one"
                envs[name] = found
            for key in totals:
                totals[key] += seconds[key]
            pip_found, uv_found = envs[PIP], envs[UV]
            differences = sorted(f"{n} {pip_found.get(n, '-')} (pip) / {uv_found.get(n, '-')} (uv)"
                                 for n in set(pip_found) | set(uv_found) if pip_found.get(n) != uv_found.get(n))
            print(f"| {instance} | {recipe.python} | {seconds['pip cold']:.1f} | {seconds['pip warm']:.1f} | "
                  f"{seconds['uv cold']:.1f} | {seconds['uv warm']:.1f} | {seconds['pip cold'] / seconds['uv cold']:.1f} | "
                  f"{seconds['pip warm'] / seconds['uv warm']:.1f} | {len(uv_found)} | {'; '.join(differences) or 'none'} |",
                  flush=True)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nall: pip/uv cold {totals['pip cold'] / totals['uv cold']:.1f}, warm {totals['pip warm'] / totals['uv warm']:.1f}")


if __name__ == "__main__":
    main()
