"""`magis-ray submit DATASET.jsonl`: a batch of SWE-bench instances, its progress bar, its
predictions file and its summary."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .endpoint import check_endpoint, gateway_config, model_endpoint


def submit_batch(dataset: Path, repos_dir, out: Path, workers, instances, batch_name, store_path, local_port,
                 run_config) -> None:
    """`run_config`: the RunSettings each run records (cli/submit.py's run_settings)."""
    from tqdm import tqdm

    from magis_ray.actors.runtime.batch import BatchRunner, batch_settings, read_batch_items
    from magis_ray.actors.runtime.deployment import Deployment
    from magis_ray.store import open_store

    from magis_ray.events.errors import BadInput

    from .signals import interrupted_exit_code

    try:
        items = read_batch_items(dataset.read_bytes().splitlines(), dataset.name)
    except OSError as exc:
        raise BadInput(f"cannot read {dataset}: {exc.strerror}") from None
    if instances:
        unknown = set(instances) - {i.instance_id for i in items}
        if unknown:
            raise BadInput(f"not in {dataset.name}: {', '.join(sorted(unknown))}")
        items = [i for i in items if i.instance_id in set(instances)]
    if workers < 1:
        raise BadInput("--workers must be at least 1")
    if run_config.tests:
        from magis_ray.events.settings import size_bytes

        from .grade import workers_for_memory

        workers = workers_for_memory(workers, size_bytes(run_config.test_memory), "tests on")
    with model_endpoint(run_config.endpoint.llm, run_config.endpoint.base_url or None, store_path, local_port) as endpoint:
        check_endpoint(endpoint, run_config.model, run_config.endpoint.models)  # before Ray: a wrong endpoint costs seconds
        open_store(store_path, create=True).close()
        deployment = Deployment(store_path, gateway_config(endpoint, run_config))
        try:
            with open_store(store_path) as store:
                run_config = batch_settings(run_config, batch_name)
                with tqdm(total=len(items), unit="instance", desc=f"batch {batch_name}", file=sys.stderr) as bar:
                    def progress(result) -> None:
                        bar.update(1)
                        bar.set_postfix_str(f"{result.instance_id}: {result.status}", refresh=True)

                    try:
                        results = BatchRunner(deployment, store, run_config, repos_dir, workers, progress,
                                              run_config.batch_budget).run(items)
                    except KeyboardInterrupt:
                        click.echo(f"magis-ray: interrupted; run the same command again to resume batch {batch_name}", err=True)
                        sys.exit(interrupted_exit_code())
                write_predictions(store, results, out, run_config.model)
        finally:
            deployment.close()  # gives up this driver's leases
    print_batch_summary(results, out)


def write_predictions(store, results, out: Path, model: str) -> None:
    """SWE-bench's predictions format exactly; an instance with no finished run predicts no patch."""
    from magis_ray.events.projections import fold, prediction

    with out.open("w") as f:
        for result in results:
            if result.run_id and result.status in ("finished", "skipped"):
                line = prediction(fold(store.read(result.run_id)), f"magis-ray/{model}")
            else:
                line = {"instance_id": result.instance_id, "model_name_or_path": f"magis-ray/{model}", "model_patch": ""}
            f.write(json.dumps(line) + "\n")


def print_batch_summary(results, out: Path) -> None:
    counts: dict[str, int] = {}
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
        if result.status in ("error", "failed"):
            click.echo(f"{result.instance_id}: {result.status}: {result.outcome}")
    patched = sum(r.outcome == "patched" for r in results)
    click.echo(f"{len(results)} instances: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; {patched} patched")
    click.echo(f"predictions: {out}")
