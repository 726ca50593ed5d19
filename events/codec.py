"""JSON codec for events, built once (msgspec encoders and decoders are reusable and fast)."""
from __future__ import annotations

import time
import uuid

import msgspec

from magis_ray.events.errors import MagisError
from .schema import SCHEMA_VERSION, AnyEvent, NewEvent, Recorded
from .upcasting import upcast



class _SchemaVersion(msgspec.Struct):
    """The one field read off a record before it is typed: which schema wrote it."""

    schema_version: int = SCHEMA_VERSION


_encoder = msgspec.json.Encoder()
_version_decoder = msgspec.json.Decoder(_SchemaVersion)
_recorded_decoder = msgspec.json.Decoder(Recorded)
_raw_decoder = msgspec.json.Decoder()


class DecodeError(MagisError, ValueError):
    """A stored or given line is not a valid event."""


def encode(obj: object) -> bytes:
    return _encoder.encode(obj)


def read_recorded(data: bytes | str) -> Recorded:
    """A stored record as the current schema has it: an older record is upcast as JSON data
    (events/upcasting.py), then typed once. Raises msgspec's errors, for the stores to name the
    bad row."""
    version = _version_decoder.decode(data).schema_version
    if version >= SCHEMA_VERSION:
        return _recorded_decoder.decode(data)
    return msgspec.convert(upcast(_raw_decoder.decode(data), version, SCHEMA_VERSION), Recorded)


def decode_recorded(data: bytes | str) -> Recorded:
    try:
        return read_recorded(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise DecodeError(f"undecodable event: {exc}") from None


def new_event(event: AnyEvent, actor: str, caused_by: str = "", node: str = "") -> NewEvent:
    return NewEvent(event=event, actor=actor, event_id=uuid.uuid4().hex, time=time.time(), caused_by=caused_by, node=node)


def to_builtins(obj: object) -> object:
    return msgspec.to_builtins(obj)
