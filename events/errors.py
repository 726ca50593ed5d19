"""The root of every failure magis-ray explains to its user, and its kinds.

A kind carries its exit status and its message is one line, so that the command line translates
any of them in one place (cli/main.py) without knowing where it was raised: `magis-ray: error:
LINE` on stderr and the kind's status. An exception that is no `MagisError` is a bug, and keeps
its traceback. Domain errors derive from the kind that says what went wrong for the user: input
they gave (`BadInput`), something this machine or the cluster lacks or lost (`Unavailable`), what
ran and failed (`Failed`)."""
from __future__ import annotations

from typing import ClassVar


class MagisError(Exception):
    """A failure told to the user in one line; `exit_status` is what the command exits with."""

    exit_status: ClassVar[int] = 2

    @property
    def line(self) -> str:
        """The message on one line (a wrapped message's lines joined)."""
        return " ".join(str(self).split())


class BadInput(MagisError, ValueError):
    """Input the user gave that cannot be used: a file, a flag, a setting, an id."""


class Unavailable(MagisError):
    """Something needed is missing or gone: a program, an interpreter, an extra, a Ray cluster."""


class Failed(MagisError):
    """What was asked for ran, and failed: a run that ended without its outcome."""
