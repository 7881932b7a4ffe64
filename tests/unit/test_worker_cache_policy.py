"""When the worker asks the store, what it restores and what it saves."""

from __future__ import annotations

import pytest

from reame.shared.kv_entry import EntryHeader, encode_payload
from reame.worker.cache_policy import entry_problem, lookup_worthwhile, restore_length, should_save
from reame.worker.kv import MIN_FRESH

FINGERPRINT = bytes(range(32))


def header(tokens: list[int], fingerprint: bytes = FINGERPRINT, kv_type: str = "f16") -> EntryHeader:
    return EntryHeader.build(fingerprint, kv_type, tokens, 4, encode_payload(b"state"), 0.0)


@pytest.mark.parametrize(
    ("n_prompt", "local", "block_tokens", "worth"),
    [
        (10, 0, 4, True),  # two full blocks, nothing in memory
        (10, 7, 4, True),  # the blocks reach 8 > 7
        (10, 8, 4, False),  # the blocks reach 8, memory has 8 already
        (3, 0, 4, False),  # no full block: the store cannot find anything
        (8, 5, 4, True),  # blocks reach 8 but the last MIN_FRESH are fresh: 6 > 5
        (8, 6, 4, False),  # ... 6 is not more than 6
        (2, 0, 1, False),  # nothing left once MIN_FRESH are set aside
    ],
)
def test_lookup_worthwhile(n_prompt: int, local: int, block_tokens: int, worth: bool) -> None:
    assert MIN_FRESH == 2
    assert lookup_worthwhile(n_prompt, local, block_tokens) is worth


def test_restore_length_extends_past_the_blocks_and_keeps_the_fresh_tail() -> None:
    prompt = list(range(100, 120))
    assert restore_length([*prompt[:15], 1, 2, 3], prompt, 0) == 15  # token by token, not per block
    assert restore_length([*prompt, 5, 6], prompt, 0) == len(prompt) - MIN_FRESH  # longer entry
    assert restore_length(prompt, prompt, 0) == len(prompt) - MIN_FRESH
    assert restore_length(prompt[:10], prompt, 0) == 10  # a shorter entry


def test_restore_length_is_zero_when_memory_has_as_much() -> None:
    prompt = list(range(20))
    assert restore_length(prompt[:10], prompt, 10) == 0
    assert restore_length(prompt[:10], prompt, 12) == 0
    assert restore_length(prompt[:10], prompt, 9) == 10
    assert restore_length([7, 7, 7], prompt, 0) == 0


def test_entry_problem() -> None:
    tokens = list(range(12))
    assert entry_problem(header(tokens), FINGERPRINT, "f16", 100) is None
    assert entry_problem(header(tokens), FINGERPRINT, "f16", 12) is None
    assert "context of 11" in (entry_problem(header(tokens), FINGERPRINT, "f16", 11) or "")
    assert "KV type is q8_0" in (entry_problem(header(tokens, kv_type="q8_0"), FINGERPRINT, "f16", 100) or "")
    assert "another model" in (entry_problem(header(tokens, bytes(32)), FINGERPRINT, "f16", 100) or "")


@pytest.mark.parametrize(
    ("n_prompt", "stored", "warm", "save"),
    [
        (256, 0, False, True),  # long enough
        (255, 0, False, False),  # too short
        (255, 0, True, True),  # a warm request saves regardless of length
        (600, 590, False, False),  # a stored document with a short question after it
        (600, 344, False, True),  # 256 new tokens after the stored prefix
        (600, 345, False, False),
        (600, 600, False, False),  # all of it is stored
        (600, 600, True, False),  # ... even when warming
        (600, 599, True, True),
    ],
)
def test_should_save(n_prompt: int, stored: int, warm: bool, save: bool) -> None:
    assert should_save(n_prompt, stored, 256, warm) is save


def test_a_restore_must_gain_at_least_min_gain_tokens() -> None:
    prompt = list(range(200))
    assert restore_length(prompt[:150], prompt, 100, min_gain=64) == 0  # 50 more than memory: not worth it
    assert restore_length(prompt[:170], prompt, 100, min_gain=64) == 170
    assert not lookup_worthwhile(200, 150, 64, min_gain=64)
    assert lookup_worthwhile(200, 0, 64, min_gain=64)
