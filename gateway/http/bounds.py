"""Refuse a prompt that certainly cannot fit the context, before compressing or sending it.

The worker counts a prompt's tokens exactly, but only after the gateway has
compressed it and the dispatcher has queued it: a 7.5 MB chat body was refused
after 19 s. Here the bound is free: no token stands for more bytes than the
longest token of the vocabulary (gateway.compress.tokenizer), so ``bytes / longest`` tokens
is a lower bound, and the chat template only adds tokens. A request is refused only
when even that bound leaves no room; anything closer to the limit goes on, and the
worker decides exactly. (Compression never rescues such a request: the size
checked is the one the client sent.)

Pure: the lower bound comes in as a callable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from reame.gateway.http.errors import APIError
from reame.shared.protocol import ErrorCode

MinTokens = Callable[[int], "int | None"]


def text_bytes(texts: Iterable[str]) -> int:
    """Return the UTF-8 size of ``texts`` (validation has checked that they encode)."""
    return sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)


def check_fits(n_bytes: int, what: str, n_ctx: int, max_tokens: int | None, min_tokens: MinTokens) -> None:
    """Raise a 400 context_length_exceeded if ``n_bytes`` of text cannot fit ``n_ctx`` with ``max_tokens``.

    ``n_ctx`` 0 (the model's own context, unknown here) checks nothing.
    """
    if n_ctx <= 0 or n_bytes < n_ctx:  # each token is at least a byte: nothing to look up
        return
    at_least = min_tokens(n_bytes)
    if at_least is None:
        return
    if at_least >= n_ctx:
        raise _exceeded(
            f"This model's maximum context length is {n_ctx} tokens, but the {what} has at least "
            f"{at_least} tokens ({n_bytes} bytes), which leaves no room for the completion. "
            f"Please reduce the length of the {what}.",
            what,
        )
    if max_tokens is not None and at_least + max_tokens > n_ctx:
        raise _exceeded(
            f"This model's maximum context length is {n_ctx} tokens, but the request needs at least "
            f"{at_least + max_tokens} tokens ({at_least} in the {what}, {max_tokens} for the completion). "
            f"Please reduce the length of the {what} or max_tokens.",
            what,
        )


def _exceeded(message: str, what: str) -> APIError:
    code = ErrorCode.CONTEXT_LENGTH_EXCEEDED.value
    return APIError(400, message, param=what, code=code)
