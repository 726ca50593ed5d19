"""Imported first in every Ray worker process of a Ray that magis-ray starts (Ray's
`preload_python_modules`, set by deployment.ensure_ray): the worker's serializer is made without
the add-ons Ray registers for third-party types, so that a role actor's process does not load them.

Ray registers serializers for Arrow tables, pydantic models and Starlette state in every worker,
importing pyarrow (and with it numpy), pydantic and starlette whenever they are installed, on the
worker's first call. The `grade` extra installs pyarrow (swebench's datasets), `openai` pydantic,
the `serve` extra starlette: together about 57 MB of RSS, 20 MB of PSS and 0.15 CPU-seconds in each
Ray worker, although no role, build or test run ever passes one of those types through Ray (the
gateway's pydantic models stay inside the gateway). Measured on empty actors: 138 MB RSS and 62 MB
PSS with the add-ons, 81 and 42 without.

So the serializer is made here, with those three packages hidden while it is made; they stay
importable afterwards (a grading task imports swebench, hence pyarrow, as it always did, and the
gateway openai, hence pydantic). Ray's own pydantic-based features (its state API, Serve), which
magis-ray's workers never use, then take pydantic for absent in them. Anything unexpected
(another Ray's internals) leaves the worker as Ray made it."""
from __future__ import annotations

import sys

SERIALIZER_ADDONS = ("pyarrow", "pydantic", "starlette")


def serializer_without_addons() -> None:
    """In a Ray worker process (elsewhere, as in a driver that imports this module, nothing)."""
    import ray
    import ray._private.worker

    worker = ray._private.worker.global_worker
    if getattr(worker, "mode", None) != ray.WORKER_MODE:
        return
    hidden = [name for name in SERIALIZER_ADDONS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # `import name` raises ModuleNotFoundError, which Ray takes as "not installed"
    try:
        worker.get_serialization_context()
    except Exception:  # noqa: BLE001 - an optimisation only: without it the worker is as Ray makes it
        pass
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


serializer_without_addons()
