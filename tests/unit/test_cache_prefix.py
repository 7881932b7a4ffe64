"""Chained block hashes name token prefixes: stable under extension, sensitive to every token."""

from __future__ import annotations

import hashlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reame.shared import prefix
from reame.worker.kv import common_prefix

FP = b"model-a"
tokens_st = st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=200)


def test_chain_matches_its_definition() -> None:
    tokens = [5, 6, 7, 8, 9, 10, 11]
    h0 = hashlib.blake2b(FP, digest_size=16).digest()
    h1 = hashlib.blake2b(h0 + struct.pack("<3i", 5, 6, 7), digest_size=16).digest()
    h2 = hashlib.blake2b(h1 + struct.pack("<3i", 8, 9, 10), digest_size=16).digest()
    assert prefix.block_hashes(FP, tokens, 3) == [h1, h2]  # token 11 is a partial block: no hash


def test_only_full_blocks_get_a_hash() -> None:
    assert prefix.block_hashes(FP, [], 4) == []
    assert prefix.block_hashes(FP, [1, 2, 3], 4) == []
    assert len(prefix.block_hashes(FP, list(range(8192)), 64)) == 128


def test_changing_a_token_changes_its_block_and_every_later_one() -> None:
    tokens = list(range(40))
    base = prefix.block_hashes(FP, tokens, 8)
    changed = prefix.block_hashes(FP, [*tokens[:20], 999, *tokens[21:]], 8)
    assert changed[:2] == base[:2]
    assert all(a != b for a, b in zip(changed[2:], base[2:], strict=True))


def test_the_fingerprint_separates_models() -> None:
    tokens = list(range(16))
    assert not set(prefix.block_hashes(FP, tokens, 4)) & set(prefix.block_hashes(b"model-b", tokens, 4))
    assert prefix.entry_key(FP, tokens) != prefix.entry_key(b"model-b", tokens)


def test_entry_key_covers_exactly_the_tokens() -> None:
    key = prefix.entry_key(FP, [1, 2, 3])
    assert prefix.is_entry_key(key)
    assert key == prefix.entry_key(FP, (1, 2, 3))
    assert key != prefix.entry_key(FP, [1, 2, 3, 4])
    assert key != prefix.entry_key(FP, [1, 2])
    assert bytes.fromhex(key) not in prefix.block_hashes(FP, [1, 2, 3], 3)


@pytest.mark.parametrize("bad", [2**31, -(2**31) - 1])
def test_out_of_range_token_is_a_clear_error(bad: int) -> None:
    with pytest.raises(ValueError, match=str(bad)):
        prefix.block_hashes(FP, [1, bad], 1)


def test_bad_block_size_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="block_tokens"):
        prefix.block_hashes(FP, [1], 0)


def test_token_bytes_round_trip() -> None:
    tokens = (0, 1, -1, 2**31 - 1, -(2**31), 49151)
    data = prefix.token_bytes(tokens)
    assert data[:8] == b"\0\0\0\0\1\0\0\0"  # little-endian int32
    assert prefix.tokens_from_bytes(data) == tokens
    with pytest.raises(ValueError):
        prefix.tokens_from_bytes(b"\0\0\0")


@given(tokens=tokens_st, cut=st.integers(min_value=0, max_value=200), block=st.integers(min_value=1, max_value=9))
def test_hashes_of_a_prefix_are_a_prefix_of_the_hashes(tokens: list[int], cut: int, block: int) -> None:
    whole = prefix.block_hashes(FP, tokens, block)
    part = prefix.block_hashes(FP, tokens[:cut], block)
    assert part == whole[: min(cut, len(tokens)) // block]


@given(a=tokens_st, keep=st.integers(min_value=0, max_value=200), tail=tokens_st, block=st.integers(1, 9))
def test_shared_hashes_count_the_shared_full_blocks(a: list[int], keep: int, tail: list[int], block: int) -> None:
    b = a[:keep] + tail
    ha, hb = prefix.block_hashes(FP, a, block), prefix.block_hashes(FP, b, block)
    shared = next((i for i, (x, y) in enumerate(zip(ha, hb, strict=False)) if x != y), min(len(ha), len(hb)))
    assert shared == common_prefix(a, b) // block


def test_a_cache_scope_changes_the_root_of_every_chain() -> None:
    fp = b"\x01" * 32
    tokens = list(range(40))
    assert prefix.scoped_fingerprint(fp, "") == fp  # the shared scope keeps every stored entry
    roots = {prefix.root_hash(prefix.scoped_fingerprint(fp, scope)) for scope in ("", "key-a", "key-b")}
    assert len(roots) == 3
    chains = [prefix.block_hashes(prefix.scoped_fingerprint(fp, s), tokens, 8) for s in ("", "key-a", "key-b")]
    # Not one block hash, nor entry key, of one scope matches another's.
    assert len({h for chain in chains for h in chain}) == 3 * 5
    keys = {prefix.entry_key(prefix.scoped_fingerprint(fp, s), tokens) for s in ("", "key-a", "key-b")}
    assert len(keys) == 3
    assert len(prefix.scoped_fingerprint(fp, "key-a")) == len(fp)
