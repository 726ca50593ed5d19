"""The structured answer of each step, as msgspec Structs: decoding validates, and the JSON
schema sent to the model is derived from the same type."""
from __future__ import annotations

from functools import lru_cache

import msgspec


class Answer(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    pass


class SummaryAnswer(Answer, frozen=True):
    summary: str


class CommitMessageAnswer(Answer, frozen=True):
    message: str


class RelevanceAnswer(Answer, frozen=True):
    relevant: bool
    reason: str = ""


class NewFileAnswer(Answer, frozen=True):
    path: str
    task: str


class TaskAnswer(Answer, frozen=True):
    needed: bool
    task: str = ""
    new_files: list[NewFileAnswer] = []


class PersonaAnswer(Answer, frozen=True):
    name: str
    profile: str


class UtteranceAnswer(Answer, frozen=True):
    text: str


class PlanAnswer(Answer, frozen=True):
    stages: list[list[str]]
    rationale: str = ""


class RangeAnswer(Answer, frozen=True):
    start: int
    end: int


class LinesAnswer(Answer, frozen=True):
    ranges: list[RangeAnswer]
    reason: str = ""


class EditAnswer(Answer, frozen=True):
    start: int
    end: int
    new_code: str


class CodeAnswer(Answer, frozen=True):
    edits: list[EditAnswer]


class ReviewAnswer(Answer, frozen=True):
    approved: bool
    comment: str = ""


class ReproductionAnswer(Answer, frozen=True):
    content: str  # a whole pytest file


class ChoiceAnswer(Answer, frozen=True):
    candidate: int
    reason: str = ""


@lru_cache(maxsize=None)
def json_schema(answer_type: type[Answer]) -> dict:
    """A self-contained JSON schema (definitions inlined) that servers can enforce."""
    schema = msgspec.json.schema(answer_type)
    defs = schema.pop("$defs", {})

    def inline(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if ref:
                return inline(defs[ref.rsplit("/", 1)[-1]])
            return {k: inline(v) for k, v in node.items() if k != "title"}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return inline(schema)


def _strip_fences(text: str) -> str:
    """Models often wrap JSON in ``` fences or add prose; keep the outermost JSON object."""
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if 0 <= start < end else text


def parse_answer(text: str, answer_type: type[Answer]) -> Answer:
    """Decode and validate; raises ValueError with a message the model can act on."""
    if not text.strip():
        raise ValueError("the answer was empty")
    try:
        return msgspec.json.decode(_strip_fences(text), type=answer_type)
    except msgspec.ValidationError as exc:
        raise ValueError(f"the JSON does not match the schema: {exc}") from None
    except msgspec.DecodeError:
        raise ValueError("the answer is not a JSON object") from None
