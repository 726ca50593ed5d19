"""`magis-ray serve` and `magis-ray watch`: the click commands (their heavy imports inside)."""
from __future__ import annotations

import click

from magis_ray.events.errors import BadInput

from ..errors import require_extra
from ..options import store_option



@click.command("serve", short_help="Open the inspector: a read-only web app over the store.")
@store_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on. Loopback by default: anything else shows the store to the network.")
@click.option("--port", type=int, default=8765, show_default=True, help="The port (0: any free one).")
@click.option("--poll", "poll_s", type=float, default=0.5, show_default=True, help="Seconds between looks at the store for new events.")
def serve_command(store_path: str, host: str, port: int, poll_s: float) -> None:
    """Open the inspector: a local, read-only web app over the store. Runs, batches and gradings;
    each run's decisions, plan, tasks, reviews, tests and diff; compare two runs; search every
    event. Pages update live as events are appended."""
    import socket

    require_extra("serve", "magis-ray serve")
    import uvicorn

    from magis_ray.store import open_store

    from .app import make_app
    from .state import Inspector

    if not 0 <= port <= 65535:
        raise BadInput(f"--port {port} is no port (0 to 65535)")
    if poll_s <= 0:
        raise BadInput("--poll must be more than 0 seconds")
    store = open_store(store_path)  # a missing or foreign store is a one-line error here
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except (OSError, UnicodeError) as exc:
            raise BadInput(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
        sock.listen(128)
        bound = sock.getsockname()[1]
        loopback = host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
        hosts = ["127.0.0.1", "localhost", "[::1]", host] if loopback else ["*"]
        inspector = Inspector(store)
        app = make_app(inspector, store_path, hosts, poll_s)
        shown_host = f"[{host}]" if ":" in host else host
        click.echo(f"inspector: http://{shown_host}:{bound}/ (store {store_path}; read-only; Ctrl-C stops it)", err=False)
        if not loopback:
            click.echo(f"magis-ray: warning: listening on {host}: anyone who can reach it reads every run of the store", err=True)
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=1, lifespan="on")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        store.close()


@click.command("watch", short_help="Follow a run, or a batch, in the terminal until it ends.")
@click.argument("run", required=False)
@click.option("--batch", "batch", default="", help="Watch a batch (by its name) instead of one run.")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Seconds between looks at the store.")
@store_option
def watch_command(run: str | None, batch: str, interval: float, store_path: str) -> None:
    """Follow a run (or with --batch, a batch) in the terminal until it ends: its stage, tasks,
    reviews, tests, tokens and cost. Exits 0 when it finished, 1 when it failed or stalled."""
    import sys

    from magis_ray.store import open_store

    from .watch import Watcher

    if bool(run) == bool(batch):
        raise BadInput("give a RUN or --batch NAME (one of them)")
    if interval <= 0:
        raise BadInput("--interval must be more than 0 seconds")
    with open_store(store_path) as store:
        watcher = Watcher(store, sys.stdout, interval)
        code = watcher.watch_batch(batch) if batch else watcher.watch_run(run)
    sys.exit(code)
