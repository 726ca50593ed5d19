"""A field's type in a reader's words, from msgspec's view of it (its bounds and choices included),
for the reference tables."""
from __future__ import annotations

from typing import Any, Callable

import msgspec
from msgspec import inspect as mi

# How a struct named in a type is shown: by default its name; a page links it to its own section
StructName = Callable[[type], str]


def _plain(struct: type) -> str:
    return f"`{struct.__name__}`"


def _bounds(kind: Any) -> str:
    words = []
    for attribute, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
        value = getattr(kind, attribute, None)
        if value is not None:
            words.append(f"{sign} {value}")
    return (" " + ", ".join(words)) if words else ""


def type_words(annotation: Any, struct_name: StructName = _plain, patterns: dict[str, str] | None = None) -> str:
    """`annotation` as text: "integer ≥ 1", "one of `bwrap`, `none`", "list of `RankedFile`",
    "integer or null". `patterns` words a patterned string (else "text matching `PATTERN`")."""
    return _words(mi.type_info(annotation), struct_name, patterns or {})


def _words(kind: Any, struct_name: StructName, patterns: dict[str, str]) -> str:
    if isinstance(kind, mi.BoolType):
        return "boolean"
    if isinstance(kind, mi.IntType):
        return "integer" + _bounds(kind)
    if isinstance(kind, mi.FloatType):
        return "number" + _bounds(kind)
    if isinstance(kind, mi.StrType):
        if kind.pattern is not None:
            return patterns.get(kind.pattern, f"text matching `{kind.pattern}`")
        return "text"
    if isinstance(kind, mi.LiteralType):
        return "one of " + ", ".join(f"`{value}`" if value != "" else '`""`' for value in kind.values)
    if isinstance(kind, (mi.ListType, mi.VarTupleType, mi.SetType, mi.FrozenSetType)):
        return "list of " + _words(kind.item_type, struct_name, patterns)
    if isinstance(kind, mi.DictType):
        return f"map of {_words(kind.key_type, struct_name, patterns)} to {_words(kind.value_type, struct_name, patterns)}"
    if isinstance(kind, mi.StructType):
        return struct_name(kind.cls)
    if isinstance(kind, mi.UnionType):
        return " or ".join(_words(member, struct_name, patterns) for member in kind.types)
    if isinstance(kind, mi.NoneType):
        return "null"
    if isinstance(kind, mi.AnyType):
        return "any"
    return type(kind).__name__.removesuffix("Type").lower()


def default_of(field: msgspec.structs.FieldInfo) -> Any:
    """The field's default value (msgspec.NODEFAULT when it is required)."""
    if field.default is not msgspec.NODEFAULT:
        return field.default
    if field.default_factory is not msgspec.NODEFAULT:
        return field.default_factory()
    return msgspec.NODEFAULT


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")
