"""The modes a request or the configuration can pick, each named once.

They travel in ``Generate`` (``speculative``), are read from the configuration
(``speculative.mode``, ``compress.mode``) and from a request's ``reame`` options, so
the gateway, the worker and the config loader all check against these enums. Being
StrEnums, they compare equal to their wire strings.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the protocol imports these modes
    from reame.shared.protocol import ChatMessage


class SpeculativeMode(enum.StrEnum):
    """How a worker drafts tokens for the model to check in one batch."""

    OFF = "off"
    LOOKUP = "lookup"  # n-grams found earlier in the prompt and answer
    MODEL = "model"  # a small draft model of the same vocabulary


class CompressMode(enum.StrEnum):
    """How the gateway compresses long message contents; each mode up to ``query`` includes the one before."""

    OFF = "off"
    LOSSLESS = "lossless"
    FACTS = "facts"
    QUERY = "query"  # depends on the question, so not cache-stable
    # The document as ``facts`` (cache-stable), plus query's excerpts restated before the question.
    AUTO = "auto"


class ChunkMode(enum.StrEnum):
    """Which requests are read in chunk mode (worker.chunk_plan): pieces reused wherever they sit."""

    OFF = "off"
    # Only a request with a content sent as several text parts: the client marked its documents,
    # each part one chunk, which keeps a document's own attention whole (BENCHMARKS.md, chunk mode).
    PARTS = "parts"
    ON = "on"  # every request; a long text is also cut after its long paragraphs

    def applies(self, asked: bool | None, messages: Sequence[ChatMessage] | None) -> bool:
        """Tell whether a request is read in chunk mode: as it ``asked`` ("reame": {"chunks"}), else as configured."""
        if asked is not None:
            return asked
        if self is ChunkMode.PARTS:
            return any(message.breaks for message in messages or ())
        return self is ChunkMode.ON


def choices(modes: type[enum.StrEnum]) -> str:
    """Return the values of ``modes`` for an error message: "off, lookup, model"."""
    return ", ".join(mode.value for mode in modes)
