"""``n`` > 1 on chat completions: how many choices, each one's seed, and the usage of all of them.

The choices are generated in turn, one Generate each with the same messages: the
dispatcher sends each to the worker holding that prompt (dispatcher.placement), which
reuses its KV state, so the prompt is read once and counted once in ``usage``. With a
seed, choice i samples with seed + i, so the choices differ and each is reproducible.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from reame.gateway.api.responses import Usage
from reame.gateway.http.errors import invalid
from reame.shared.protocol import Done, SamplingParams

MAX_CHOICES: Final = 8  # each choice is a whole generation, run in turn
_U64: Final = 2**64


def count_choices(fields: dict[str, Any], limit: int) -> int:
    """Return ``n`` (1 if absent), or raise a 400; ``limit`` 1 means the endpoint has no ``n``."""
    n = fields.get("n")
    if n is None or (n == 1 and not isinstance(n, bool)):
        return 1
    if limit == 1:
        raise invalid("n", "only n 1 is supported", "unsupported_parameter")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= limit:
        raise invalid("n", f"n must be an integer from 1 to {limit}")
    if fields.get("stream") is True and fields.get("tools"):
        raise invalid("n", "n > 1 with tools is supported without stream only", "unsupported_parameter")
    return n


def seeded(sampling: SamplingParams, index: int) -> SamplingParams:
    """Return the sampling of choice ``index``: seed + index when a seed is given."""
    if index == 0 or sampling.seed is None:
        return sampling
    seed = sampling.seed + index
    # Seeds travel as 64-bit integers: wrap rather than overflow the wire.
    return msgspec.structs.replace(sampling, seed=seed - _U64 if seed >= _U64 else seed)


def choice_usage(done: Done, saved_tokens: int, index: int, compression: str = "") -> Usage:
    """Return what choice ``index`` adds to the usage: the prompt only for the first."""
    usage = Usage.from_done(done, saved_tokens, compression)
    if index == 0:
        return usage
    return Usage(
        completion_tokens=usage.completion_tokens, draft_tokens=usage.draft_tokens,
        accepted_draft_tokens=usage.accepted_draft_tokens,
    )
