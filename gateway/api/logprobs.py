"""Chat ``logprobs`` / ``top_logprobs``: reading the request and writing OpenAI's shape.

Pure, like gateway.api.validation. The worker sends one protocol.TokenLogprob per
generated token (worker.logprobs); a token's bytes may be part of a UTF-8
character, so ``token`` is their lenient decoding and ``bytes`` the exact ones,
as OpenAI gives them.
"""

from __future__ import annotations

from typing import Any, Final

from reame.gateway.http.errors import invalid
from reame.shared.logprobs import MAX_TOP
from reame.shared.protocol import TokenLogprob

Json = dict[str, Any]


def chat_logprobs(fields: dict[str, Any]) -> int | None:
    """Return how many top tokens to report per token (None: no logprobs), or raise a 400."""
    asked = fields.get("logprobs")
    top = fields.get("top_logprobs")
    if asked is not None and not isinstance(asked, bool):
        raise invalid("logprobs", "logprobs must be a boolean", "invalid_type")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP):
        raise invalid("top_logprobs", f"top_logprobs must be an integer from 0 to {MAX_TOP}")
    if not asked:
        if top is not None:
            raise invalid("top_logprobs", "top_logprobs needs logprobs: true")
        return None
    return top or 0


def _token(piece: bytes, logprob: float) -> Json:
    return {"token": piece.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(piece)}


def content(entries: list[TokenLogprob]) -> list[Json]:
    """Return the ``logprobs.content`` list of a chat choice or chunk."""
    return [
        {**_token(e.piece, e.logprob), "top_logprobs": [_token(piece, logprob) for piece, logprob in e.top]}
        for e in entries
    ]


def choice_logprobs(entries: list[TokenLogprob] | None) -> Json | None:
    """Return a chat choice's ``logprobs`` value (None when the request did not ask)."""
    return None if entries is None else {"content": content(entries), "refusal": None}


MAX_COMPLETION_TOP: Final = 5  # OpenAI's bound on a completion's logprobs


def completion_logprobs(fields: dict[str, Any]) -> int | None:
    """Return a completion's ``logprobs`` (top tokens per token; None: none), or raise a 400."""
    value = fields.get("logprobs")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COMPLETION_TOP:
        raise invalid("logprobs", f"logprobs must be an integer from 0 to {MAX_COMPLETION_TOP}")
    if fields.get("echo") is True:  # the prompt's own tokens would need their logprobs too
        raise invalid("logprobs", "logprobs with echo is not supported", "unsupported_parameter")
    return value


def legacy(entries: list[TokenLogprob], offset: int = 0) -> Json:
    """Return a completion choice's ``logprobs``: tokens, token_logprobs, top_logprobs, text_offset."""
    tokens: list[str] = []
    offsets: list[int] = []
    for e in entries:
        offsets.append(offset)
        tokens.append(e.piece.decode("utf-8", "replace"))
        offset += len(tokens[-1])
    return {
        "tokens": tokens,
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [{piece.decode("utf-8", "replace"): logprob for piece, logprob in e.top} for e in entries],
        "text_offset": offsets,
    }
