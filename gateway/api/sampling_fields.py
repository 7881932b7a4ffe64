"""The sampling fields of a completion request (OpenAI's names and ranges) as SamplingParams.

Pure, like gateway.api.validation. Absent fields take the configuration's [sampling]
defaults; ``max_completion_tokens`` wins over the older ``max_tokens``.
"""

from __future__ import annotations

import math
from typing import Any, Final

from reame.gateway.api.fields import integer, is_number, json_object, number, text
from reame.gateway.http.errors import invalid
from reame.shared.config import SamplingConfig
from reame.shared.protocol import SamplingParams

MAX_STOP: Final = 4  # as OpenAI allows
# A stop string's possible start is held back from the stream until it is settled, so
# its length bounds that delay (and the tail kept per token). Stop sequences in use are
# end markers and turn prefixes ("\n\nUser:", "</answer>"), far shorter than this.
MAX_STOP_CHARS: Final = 256
MAX_INT32: Final = 2**31 - 1
# msgpack carries signed and unsigned 64-bit integers, nothing wider.
SEED_RANGE: Final = (-(2**63), 2**64 - 1)


def parse_sampling(fields: dict[str, Any], default_max_tokens: int, defaults: SamplingConfig) -> SamplingParams:
    max_tokens = integer(fields, "max_completion_tokens", 1, MAX_INT32)
    if max_tokens is None:  # the newer name wins when a client sends both
        max_tokens = integer(fields, "max_tokens", 1, MAX_INT32)
    if max_tokens is None:
        max_tokens = default_max_tokens or None  # 0 in the config: until the context is full
    return SamplingParams(
        temperature=number(fields, "temperature", 0.0, 2.0, defaults.temperature),
        top_p=number(fields, "top_p", 0.0, 1.0, defaults.top_p),
        top_k=_or(integer(fields, "top_k", 0, MAX_INT32), defaults.top_k),
        min_p=number(fields, "min_p", 0.0, 1.0, defaults.min_p),
        seed=integer(fields, "seed", *SEED_RANGE),
        max_tokens=max_tokens,
        stop=_stop(fields.get("stop")),
        presence_penalty=number(fields, "presence_penalty", -2.0, 2.0, 0.0),
        frequency_penalty=number(fields, "frequency_penalty", -2.0, 2.0, 0.0),
        repeat_penalty=number(fields, "repeat_penalty", 0.0, math.inf, defaults.repeat_penalty),
        repeat_last_n=defaults.repeat_last_n,
        logit_bias=_logit_bias(fields.get("logit_bias")),
    )


def _stop(value: object) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise invalid("stop", "stop must be a string or an array of strings", "invalid_type")
    if len(items) > MAX_STOP:
        raise invalid("stop", f"at most {MAX_STOP} stop sequences")
    stops = []
    for i, item in enumerate(items):
        where = "stop" if isinstance(value, str) else f"stop[{i}]"
        stop = text(item, where)
        if not stop:
            raise invalid(where, "stop sequences must not be empty")
        if len(stop) > MAX_STOP_CHARS:
            raise invalid(where, f"stop sequences must be at most {MAX_STOP_CHARS} characters")
        stops.append(stop)
    return stops


def _logit_bias(value: object) -> list[tuple[int, float]]:
    if value is None:
        return []
    pairs = []
    for key, bias in json_object(value, "logit_bias").items():
        where = f"logit_bias.{key[:40]}"
        if not (len(key) <= 10 and key.isascii() and key.isdigit() and int(key) <= MAX_INT32):
            raise invalid(where, "logit_bias keys must be token ids (non-negative integers)")
        if not is_number(bias) or not -100 <= bias <= 100:
            raise invalid(where, "a logit bias must be a number from -100 to 100")
        pairs.append((int(key), float(bias)))
    return sorted(pairs)


def _or(value: int | None, default: int) -> int:
    return default if value is None else value
