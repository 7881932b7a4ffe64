"""n > 1: counting, seeds per choice, and usage that counts the prompt once."""

from __future__ import annotations

from typing import Any

import pytest

from reame.gateway.api.choices import MAX_CHOICES, choice_usage, count_choices, seeded
from reame.gateway.http.errors import APIError
from reame.shared.protocol import Done, FinishReason, SamplingParams


def test_count_choices() -> None:
    assert count_choices({}, MAX_CHOICES) == 1
    assert count_choices({"n": 3}, MAX_CHOICES) == 3
    assert count_choices({"n": 1}, 1) == 1
    bad: list[tuple[dict[str, Any], int]] = [
        ({"n": 2}, 1), ({"n": 0}, 8), ({"n": 9}, 8), ({"n": 2.0}, 8), ({"n": 2, "stream": True, "tools": [{}]}, 8),
    ]
    for fields, limit in bad:
        with pytest.raises(APIError) as caught:
            count_choices(fields, limit)
        assert caught.value.param == "n"


def test_choice_i_uses_seed_plus_i() -> None:
    sampling = SamplingParams(seed=41)
    assert [seeded(sampling, i).seed for i in range(3)] == [41, 42, 43]
    assert seeded(SamplingParams(), 2).seed is None
    assert seeded(SamplingParams(seed=2**64 - 1), 1).seed == 0  # wraps within 64 bits


def test_usage_counts_the_prompt_once() -> None:
    done = Done("r", FinishReason.STOP, prompt_tokens=100, completion_tokens=7, cached_tokens=99)
    first, second = choice_usage(done, 5, 0), choice_usage(done, 5, 1)
    total = first + second
    assert (total.prompt_tokens, total.completion_tokens, total.cached_tokens) == (100, 14, 99)
    assert total.uncompressed_prompt_tokens == 105
