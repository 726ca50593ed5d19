"""What a stream of the store holds. A run's stream is named by its run id alone; every other kind
of stream is named "KIND:NAME" (a grading's: "grading:NAME", a validation's: "validation:NAME"), so the kind is read from the id and
stored ids stay as they were written. The one place that knows how a stream id is spelled."""
from __future__ import annotations

from enum import Enum

SEPARATOR = ":"


class StreamKind(Enum):
    """A stream's kind; the value is the prefix of its ids (a run's ids have none)."""

    RUN = ""
    GRADING = "grading"  # a grading batch (`magis-ray grade`): its events only, never a run's
    VALIDATION = "validation"  # a validation of candidate tasks (`magis-ray tasks validate`)

    @classmethod
    def of(cls, stream_id: str) -> StreamKind:
        """The kind of the stream `stream_id` names."""
        prefix, separator, _ = stream_id.partition(SEPARATOR)
        if separator:
            for kind in cls:
                if kind is not cls.RUN and kind.value == prefix:
                    return kind
        return cls.RUN

    def stream_id(self, name: str) -> str:
        """The id of this kind's stream called `name` (a run's: the run id itself)."""
        return name if self is StreamKind.RUN else f"{self.value}{SEPARATOR}{name}"

    def name_in(self, stream_id: str) -> str:
        """The name `stream_id` gives a stream of this kind; ValueError if it is another kind's."""
        if StreamKind.of(stream_id) is not self:
            raise ValueError(f"{stream_id!r} is not a {self.name.lower()} stream")
        return stream_id if self is StreamKind.RUN else stream_id[len(self.value) + len(SEPARATOR):]
