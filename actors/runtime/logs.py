"""structlog, configured once per process: console on a terminal, JSON lines otherwise."""
from __future__ import annotations

import logging
import sys

import structlog
from magis_ray.events.settings import node_settings

_configured = False


def configure_logging(level: str | None = None, json: bool | None = None) -> None:
    global _configured
    if _configured:
        return
    _configured = True
    level_name = (level or node_settings().log_level).upper()
    as_json = (not sys.stderr.isatty()) if json is None else json
    renderer = structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level_name, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
