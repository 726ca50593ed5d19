"""JSON codec for events, built once (msgspec encoders and decoders are reusable and fast)."""
from __future__ import annotations

import time
import uuid

import msgspec

from .schema import SCHEMA_VERSION, AnyEvent, NewEvent, Recorded
from .upcasting import upcast

_encoder = msgspec.json.Encoder()
_recorded_decoder = msgspec.json.Decoder(Recorded)
_raw_decoder = msgspec.json.Decoder()
_event_decoder = msgspec.json.Decoder(AnyEvent)


class DecodeError(ValueError):
    """A stored or given line is not a valid event."""


def encode(obj: object) -> bytes:
    return _encoder.encode(obj)


def read_recorded(data: bytes | str) -> Recorded:
    """A stored record as the current schema has it: an older record is upcast
    (events/upcasting.py). Raises msgspec's errors, for the stores to name the bad row."""
    record = _recorded_decoder.decode(data)
    if record.schema_version >= SCHEMA_VERSION:
        return record
    raw = upcast(_raw_decoder.decode(data), record.schema_version, SCHEMA_VERSION)
    return msgspec.convert(raw, Recorded)


def decode_recorded(data: bytes | str) -> Recorded:
    try:
        return read_recorded(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise DecodeError(f"undecodable event: {exc}") from None


def decode_event(data: bytes | str) -> AnyEvent:
    try:
        return _event_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"undecodable event: {exc}") from None


def new_event(event: AnyEvent, actor: str, caused_by: str = "", node: str = "") -> NewEvent:
    return NewEvent(event=event, actor=actor, event_id=uuid.uuid4().hex, time=time.time(), caused_by=caused_by, node=node)


def to_builtins(obj: object) -> object:
    return msgspec.to_builtins(obj)
