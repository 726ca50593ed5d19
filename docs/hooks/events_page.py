"""The events reference, made from the msgspec structs of the schema (events/schema.py): the
envelope a log holds, every event type of the tagged union with its tag, fields, types and
defaults, and the value types they hold, with the comments and docstrings of the source."""
from __future__ import annotations

import inspect
import re
import typing
from typing import Any, Iterable

import msgspec
from msgspec import inspect as mi

from magis_ray.events import schema

from field_comments import field_comments
from type_words import cell, default_of, type_words


def _anchor(struct: type) -> str:
    return struct.__name__.lower()


def _linked(struct: type) -> str:
    return f"[`{struct.__name__}`](#{_anchor(struct)})"


def _default(field: msgspec.structs.FieldInfo) -> str:
    value = default_of(field)
    if value is msgspec.NODEFAULT:
        return "(required)"
    if isinstance(value, msgspec.Struct):
        return f"`{type(value).__name__}()`"
    return f"`{msgspec.json.encode(value).decode()}`"


def _doc(struct: type) -> str:
    """The struct's own docstring (not one it inherits), unwrapped into paragraphs."""
    doc = struct.__dict__.get("__doc__")
    if not doc:
        return ""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def _field_type(field: msgspec.structs.FieldInfo) -> str:
    if field.type == schema.AnyEvent:
        return "an event: one of the [event types](#event-types)"
    return type_words(field.type, _linked)


def fields_table(struct: type) -> str:
    comments = field_comments(struct)
    for base in struct.__mro__[1:]:  # a field a base declares carries the base's comment
        if isinstance(base, type) and issubclass(base, msgspec.Struct) and base is not msgspec.Struct:
            comments = {**field_comments(base), **comments}
    rows = ["| Field | Type | Default | What it holds |", "|---|---|---|---|"]
    for field in msgspec.structs.fields(struct):
        comment = comments.get(field.name, "")
        rows.append("| " + " | ".join(cell(text) for text in (
            f"`{field.encode_name}`", _field_type(field), _default(field), comment[:1].upper() + comment[1:])) + " |")
    return "\n".join(rows)


def event_types(union: Any = schema.AnyEvent) -> list[type]:
    return list(typing.get_args(union))


def value_types(structs: Iterable[type]) -> list[type]:
    """The structs that events' fields hold (not events themselves), in the order they are first met."""
    found: list[type] = []

    def visit(kind: Any) -> None:
        if isinstance(kind, mi.StructType):
            if kind.cls not in found and not issubclass(kind.cls, schema.Event):
                found.append(kind.cls)
                for field in kind.fields:
                    visit(field.type)
        for attribute in ("item_type", "key_type", "value_type"):
            if hasattr(kind, attribute):
                visit(getattr(kind, attribute))
        for member in getattr(kind, "types", ()):
            visit(member)

    for struct in structs:
        for field in mi.type_info(struct).fields:
            visit(field.type)
    return found


def _tag(struct: type) -> str:
    config = struct.__struct_config__
    return str(config.tag)


def schema_versions(module_doc: str | None = schema.__doc__) -> list[str]:
    """The paragraphs of the schema's docstring that say what each version changed."""
    text = " ".join(inspect.cleandoc(module_doc or "").split())
    return [part.strip() for part in re.split(r"(?=\bVersion \d+:)", text) if re.match(r"Version \d+:", part)]


def events_markdown(union: Any = schema.AnyEvent, envelope: type = schema.Recorded,
                    version: int = schema.SCHEMA_VERSION, versions: list[str] | None = None) -> str:
    """The generated part of reference/events.md."""
    events = event_types(union)
    parts = [f"The schema is at version **{version}**: each record carries the version it was written at "
             f"(`schema_version`), and older records are upcast to the current shape when they are read.",
             "\n".join(f"- {line}" for line in (schema_versions() if versions is None else versions)),
             "## The envelope",
             _doc(envelope),
             "Every line of `magis-ray events RUN` is one of these, as JSON.",
             fields_table(envelope),
             "## Event types",
             f"{len(events)} types. An event is a JSON object whose `type` field is its tag: "
             + ", ".join(f"[`{_tag(e)}`](#{_anchor(e)})" for e in events) + "."]
    for event in events:
        parts += [f"### {event.__name__}", f"Tag `{_tag(event)}`. {_doc(event)}".strip(), fields_table(event)]
    parts += ["## Value types", "The structs that events hold."]
    for struct in value_types([*events, envelope]):
        parts += [f"### {struct.__name__}", _doc(struct), fields_table(struct)]
    return "\n\n".join(part for part in parts if part) + "\n"
