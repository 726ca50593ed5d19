"""A port's methods made from the port itself, each handing its call on: a proxy (the store's
actor, a role's view of it through an actor handle, replay's read-only view) states none of the
port's methods again, so a method added to the port reaches every proxy."""
from __future__ import annotations

import functools
from typing import Any, Callable

Forward = Callable[..., Any]  # (proxy, method name, *args, **kwargs) -> the method's result


def port_methods(port: type) -> list[str]:
    """The public methods a Protocol declares, its bases' included."""
    return sorted(name for name in dir(port) if not name.startswith("_") and callable(getattr(port, name)))


def forwarding(port: type, forward: Forward) -> type:
    """A base class with every method of `port`, each `forward(self, name, *args, **kwargs)`.

    The methods carry the port's names, signatures and docstrings: Ray reads an actor's methods,
    and checks each call's arguments, off its class."""

    def method(name: str):
        def forwarded(self, *args, **kwargs):
            return forward(self, name, *args, **kwargs)

        forwarded = functools.wraps(getattr(port, name))(forwarded)
        forwarded.__qualname__ = f"{port.__name__}Forwarding.{name}"
        return forwarded

    return type(f"{port.__name__}Forwarding", (), {name: method(name) for name in port_methods(port)})


def delegating(port: type, attribute: str) -> type:
    """A base class with every method of `port`, each calling the same method of `self.<attribute>`."""

    def forward(proxy, name: str, *args, **kwargs):
        return getattr(getattr(proxy, attribute), name)(*args, **kwargs)

    return forwarding(port, forward)
