"""KV-cache bookkeeping: which prefix is reused, and the token list staying in step."""

from __future__ import annotations

from typing import cast

import pytest

from reame.worker.kv import MIN_FRESH, KvCache, common_prefix, prefill_chunks, reusable
from reame.worker.model import DecodeError, Model
from tests.unit.fakes import FakeModel


def kv_with(fake: FakeModel) -> KvCache:
    return KvCache(cast(Model, fake))


@pytest.mark.parametrize(
    ("a", "b", "n"),
    [([], [1], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2), ([1, 2], [1, 2, 3], 2), ([1], [2], 0),
     ([1, 2, 3], (1, 2, 4), 2)],
)
def test_common_prefix(a: list[int], b: list[int], n: int) -> None:
    assert common_prefix(a, b) == n


def test_common_prefix_on_long_sequences() -> None:
    a = list(range(8192))
    for cut in (0, 255, 256, 257, 5000, 8191):
        b = (*a[:cut], -1, *a[cut + 1 :])
        assert common_prefix(a, b) == cut
    assert common_prefix(a, tuple(a)) == 8192


def test_reusable_always_leaves_the_last_two_prompt_tokens() -> None:
    assert MIN_FRESH == 2
    assert reusable([1, 2, 3, 4], [1, 2, 3]) == 1
    assert reusable([1, 2, 3], [1, 2, 3]) == 1
    assert reusable([1, 2, 3], [1, 2, 3, 4, 5]) == 3
    assert reusable([1, 2, 3], [1, 2, 3, 4]) == 2
    assert reusable([1], [1]) == 0
    assert reusable([1, 2], []) == 0


@pytest.mark.parametrize(
    ("start", "end", "n_batch", "chunks"),
    [
        (0, 5, 512, [(0, 5)]),
        (0, 1, 512, [(0, 1)]),
        (0, 1024, 512, [(0, 512), (512, 1024)]),
        (0, 513, 512, [(0, 511), (511, 513)]),
        (3, 516, 512, [(3, 514), (514, 516)]),
        (0, 514, 512, [(0, 512), (512, 514)]),
        (0, 3, 1, [(0, 1), (1, 2), (2, 3)]),
        (4, 4, 512, []),
    ],
)
def test_prefill_chunks_never_end_with_a_lone_token(
    start: int, end: int, n_batch: int, chunks: list[tuple[int, int]]
) -> None:
    assert prefill_chunks(start, end, n_batch) == chunks


def test_append_tracks_positions() -> None:
    fake = FakeModel()
    kv = kv_with(fake)
    kv.append([5, 6, 7], logits_last=False)
    kv.append([8], logits_last=True)
    assert kv.tokens == (5, 6, 7, 8)
    assert fake.calls == [("decode", (5, 6, 7), 0, False), ("decode", (8,), 3, True)]


def test_keep_prefix_cuts_the_rest() -> None:
    fake = FakeModel()
    kv = kv_with(fake)
    kv.append([1, 2, 3, 4, 5], logits_last=True)
    assert kv.keep_prefix_of([1, 2, 3, 4, 9]) == 3
    assert kv.tokens == (1, 2, 3)
    assert fake.calls[-1] == ("truncate", 3)


def test_keep_prefix_of_the_same_prompt_drops_its_last_two_tokens() -> None:
    fake = FakeModel()
    kv = kv_with(fake)
    kv.append([1, 2, 3], logits_last=True)
    assert kv.keep_prefix_of([1, 2, 3]) == 1
    assert kv.tokens == (1,)


def test_keep_prefix_without_anything_to_cut_does_not_touch_the_cache() -> None:
    fake = FakeModel()
    kv = kv_with(fake)
    kv.append([1, 2], logits_last=True)
    assert kv.keep_prefix_of([1, 2, 3, 4]) == 2
    assert ("truncate", 2) not in fake.calls


def test_cache_that_cannot_truncate_is_cleared() -> None:
    fake = FakeModel(can_truncate=False)
    kv = kv_with(fake)
    kv.append([1, 2, 3], logits_last=True)
    assert kv.keep_prefix_of([1, 2, 9]) == 0
    assert kv.tokens == ()
    assert fake.calls[-1] == ("clear",)


def test_decode_failure_resets_everything() -> None:
    fake = FakeModel()
    kv = kv_with(fake)
    kv.append([1, 2], logits_last=True)
    fake.fail = True
    with pytest.raises(DecodeError):
        kv.append([3], logits_last=True)
    assert kv.tokens == ()
    assert fake.calls[-1] == ("clear",)


def test_restore_keeps_the_matched_positions() -> None:
    fake = FakeModel()
    kv = kv_with(fake)
    kv.append([7, 7, 7], logits_last=True)
    assert kv.restore(b"state:10", [1, 2, 3, 4, 5, 6])
    assert kv.tokens == (1, 2, 3, 4, 5, 6)
    assert fake.held == 6
    assert kv.stored == 6
    assert fake.calls[-3:] == [("clear",), ("restore", b"state:10"), ("truncate", 6)]


@pytest.mark.parametrize("state", [b"garbage", b"state:4"])
def test_failed_restore_empties_the_cache(state: bytes) -> None:
    """A refused state, or one holding fewer positions than its tokens, leaves nothing behind."""
    fake = FakeModel()
    kv = kv_with(fake)
    kv.append([7, 7, 7], logits_last=True)
    assert not kv.restore(state, [1, 2, 3, 4, 5, 6])
    assert kv.tokens == () and kv.stored == 0
    assert fake.held == 0 and fake.calls[-1] == ("clear",)


def test_restore_into_a_cache_that_cannot_truncate_fails() -> None:
    fake = FakeModel(can_truncate=False)
    kv = kv_with(fake)
    assert not kv.restore(b"state:10", [1, 2, 3])
    assert kv.tokens == () and fake.held == 0


def test_stored_prefix_follows_truncation_and_reset() -> None:
    fake = FakeModel()
    kv = kv_with(fake)
    kv.append([1, 2, 3, 4, 5, 6], logits_last=True)
    assert kv.stored == 0
    kv.mark_stored(10)  # never more than the tokens held
    assert kv.stored == 6
    kv.mark_stored(2)  # knowing less does not forget more
    assert kv.stored == 6
    assert kv.keep_prefix_of([1, 2, 3, 4, 9, 9]) == 4
    assert kv.stored == 4
    assert kv.truncate(2) and kv.stored == 2 and kv.tokens == (1, 2)
    assert kv.truncate(5) and kv.tokens == (1, 2)  # nothing to cut
    kv.reset()
    assert kv.stored == 0


def test_save_state_copies_the_models_state() -> None:
    fake = FakeModel()
    kv = kv_with(fake)
    kv.append([1, 2, 3], logits_last=True)
    assert kv.save_state() == b"state:3"


def test_a_prompt_of_another_cache_scope_reuses_nothing() -> None:
    fake = FakeModel()
    kv = kv_with(fake)
    prompt = [1, 2, 3, 4, 5, 6]
    assert kv.keep_prefix_of(prompt, "key-a") == 0
    kv.append(prompt, logits_last=True)
    kv.mark_stored(len(prompt))
    # Another key asking about the same document gets a full prefill: nothing kept, nothing known stored.
    assert kv.keep_prefix_of(prompt, "key-b") == 0
    assert len(kv) == 0 and kv.stored == 0 and fake.held == 0 and kv.scope == "key-b"
    assert kv.keep_prefix_of(prompt, "") == 0  # the shared scope is a scope of its own
    kv.append(prompt, logits_last=True)
    assert kv.keep_prefix_of(prompt, "") == len(prompt) - MIN_FRESH


def test_the_same_cache_scope_reuses_its_prefix() -> None:
    kv = kv_with(FakeModel())
    prompt = [1, 2, 3, 4, 5, 6]
    kv.keep_prefix_of(prompt, "key-a")
    kv.append(prompt, logits_last=True)
    assert kv.keep_prefix_of([*prompt, 7, 8], "key-a") == len(prompt)
    kv.reset()  # an emptied cache stays in its scope
    assert kv.scope == "key-a"


def test_a_placed_chunk_is_held_whole_and_only_a_chunked_read_reuses_it() -> None:
    fake = FakeModel()
    kv = kv_with(fake)
    kv.append([1, 2, 3], logits_last=False)
    chunk = list(range(10, 30))
    assert kv.place(b"chunk:20", chunk, 4)
    assert fake.calls[-2:] == [("decode", (10, 11, 12, 13), 3, False), ("place", b"chunk:20", 3)]
    assert kv.tokens == (1, 2, 3, *chunk) and kv.spans == ((3, 23),)
    kv.append([7, 8], logits_last=True)
    # A prompt read whole keeps what precedes the chunk only: the chunk's cells are not a whole read's.
    assert kv.keep_prefix_of([1, 2, 3, *chunk, 7, 8, 9]) == 3
    assert kv.spans == ()


def test_a_refused_chunk_state_leaves_the_cache_as_it_was() -> None:
    fake = FakeModel()
    kv = kv_with(fake)
    kv.append([1, 2, 3], logits_last=False)
    assert not kv.place(b"garbage", list(range(10, 30)), 4)
    assert kv.tokens == (1, 2, 3) and kv.spans == () and fake.held == 3


def test_keeping_tokens_of_another_scope_keeps_none() -> None:
    kv = kv_with(FakeModel())
    kv.enter_scope("a")
    kv.append([1, 2, 3], logits_last=False)
    assert kv.keep(2, "a") == 2
    assert kv.keep(2, "b") == 0 and kv.tokens == ()
