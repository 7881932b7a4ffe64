"""Bounds checked before any expensive work: message count, and a lower bound on prompt tokens."""

from __future__ import annotations

import pytest

from reame.gateway.api import validation
from reame.gateway.http import bounds
from reame.gateway.http.errors import APIError
from reame.shared.config import SamplingConfig, defaults

LONGEST = 162  # bytes of the longest token of the default model's vocabulary


def at_least(n_bytes: int) -> int:
    return -(-n_bytes // LONGEST)


def test_a_prompt_that_certainly_cannot_fit_is_refused() -> None:
    with pytest.raises(APIError) as caught:
        bounds.check_fits(7_500_000, "messages", 4096, None, at_least)
    error = caught.value
    assert error.status == 400 and error.code == "context_length_exceeded" and error.param == "messages"
    assert "at least 46297 tokens" in error.message


def test_room_for_max_tokens_counts() -> None:
    n_bytes = 4000 * LONGEST  # at least 4000 tokens
    bounds.check_fits(n_bytes, "prompt", 4096, 96, at_least)
    with pytest.raises(APIError, match="max_tokens"):
        bounds.check_fits(n_bytes, "prompt", 4096, 97, at_least)


def test_what_might_fit_goes_on_without_looking_the_vocabulary_up() -> None:
    def unused(n_bytes: int) -> int:
        raise AssertionError("small texts need no lookup")

    bounds.check_fits(4095, "messages", 4096, 10_000, unused)
    bounds.check_fits(10**9, "messages", 0, None, unused)  # n_ctx 0: unknown here
    bounds.check_fits(10**9, "messages", 4096, None, lambda n: None)  # no vocabulary


def test_text_bytes_counts_utf8() -> None:
    assert bounds.text_bytes(["héllo", "東", ""]) == 6 + 3


def test_message_count_is_checked_before_the_messages() -> None:
    body = {"messages": [{"role": "user", "content": ""}] * 200_000}
    with pytest.raises(APIError) as caught:
        validation.parse_chat(body, defaults(SamplingConfig), max_messages=1024)
    assert caught.value.param == "messages" and "at most 1024 messages" in caught.value.message
    ok = {"messages": [{"role": "user", "content": "hi"}] * 3}
    assert len(validation.parse_chat(ok, defaults(SamplingConfig), max_messages=3).messages) == 3
    with pytest.raises(APIError, match="at most 2 messages"):
        validation.parse_warm(ok, max_messages=2)
