"""The modes a request or the configuration can pick, each named once.

They travel in ``Generate`` (``speculative``), are read from the configuration
(``speculative.mode``, ``compress.mode``) and from a request's ``reame`` options, so
the gateway, the worker and the config loader all check against these enums. Being
StrEnums, they compare equal to their wire strings.
"""

from __future__ import annotations

import enum


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


def choices(modes: type[enum.StrEnum]) -> str:
    """Return the values of ``modes`` for an error message: "off, lookup, model"."""
    return ", ".join(mode.value for mode in modes)
