"""structlog, configured once per process: console on a terminal, JSON lines otherwise.

Loggers are not cached on first use: a process that runs several commands (a test session, a
program that embeds magis-ray) may configure structlog again, and a cached logger would keep the
first configuration's level and stream for good."""
from __future__ import annotations

import logging
import sys

import structlog
from magis_ray.events.settings import node_settings


def configure_logging(level: str | None = None, json: bool | None = None) -> None:
    if structlog.is_configured():
        return
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
    )
