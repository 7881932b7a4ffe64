"""The engine's view of the persistent cache, with a fake model and a fake cachekeeper client."""

from __future__ import annotations

from typing import cast

import pytest

from reame.shared.prefix import scoped_fingerprint
from reame.worker.kv import MIN_FRESH, KvCache
from reame.worker.model import Model
from reame.worker.prefix_cache import PrefixCache, Restored
from tests.unit.fakes import BLOCK, FINGERPRINT, FakeModel, FakeService

MIN_TOKENS = 8
N_CTX = 64


@pytest.fixture
def service() -> FakeService:
    return FakeService()


@pytest.fixture
def fake() -> FakeModel:
    return FakeModel()


@pytest.fixture
def kv(fake: FakeModel) -> KvCache:
    return KvCache(cast(Model, fake))


@pytest.fixture
def cache(service: FakeService) -> PrefixCache:
    return PrefixCache(service, FINGERPRINT, "f16", N_CTX, BLOCK, MIN_TOKENS)


DOC = list(range(100, 120))  # five blocks


def prefill(kv: KvCache, prompt: list[int], start: int = 0) -> None:
    kv.append(prompt[start:], logits_last=True)


def test_hit_restores_the_common_prefix(cache: PrefixCache, service: FakeService, kv: KvCache) -> None:
    service.put([*DOC, 1, 2, 3], b"state:23")
    prompt = [*DOC, 7, 8, 9]
    restored = cache.restore(kv, prompt, 0)
    assert restored == Restored(len(DOC), len(DOC))
    assert kv.tokens == tuple(DOC) and kv.stored == len(DOC)


def test_the_last_prompt_tokens_are_always_fresh(cache: PrefixCache, service: FakeService, kv: KvCache) -> None:
    service.put([*DOC, 1, 2, 3], b"state:23")
    restored = cache.restore(kv, DOC, 0)
    assert restored == Restored(len(DOC) - MIN_FRESH, len(DOC))
    assert len(kv) == len(DOC) - MIN_FRESH


def test_miss_keeps_what_memory_has(cache: PrefixCache, service: FakeService, kv: KvCache) -> None:
    assert cache.restore(kv, DOC, 3) == Restored(3)
    assert service.lookups == 1


def test_no_lookup_when_memory_has_as_much(cache: PrefixCache, service: FakeService, kv: KvCache) -> None:
    service.put(DOC, b"state:20")
    assert cache.restore(kv, DOC, len(DOC) - MIN_FRESH) == Restored(len(DOC) - MIN_FRESH)
    assert cache.restore(kv, DOC[:3], 0) == Restored(0)  # not one full block
    assert service.lookups == 0


def test_no_lookup_while_unavailable(cache: PrefixCache, service: FakeService, kv: KvCache) -> None:
    service.put(DOC, b"state:20")
    service.available = False
    assert cache.restore(kv, [*DOC, 5, 6], 0) == Restored(0)
    assert service.lookups == 0


def test_an_entry_giving_no_more_than_memory_is_not_restored(
    cache: PrefixCache, service: FakeService, kv: KvCache, fake: FakeModel
) -> None:
    service.put([*DOC[:8], 9, 9, 9, 9], b"state:12")
    prompt = [*DOC, 1, 2]
    assert cache.restore(kv, prompt, 10) == Restored(10)
    assert not any(call[0] == "restore" for call in fake.calls)


@pytest.mark.parametrize(("kv_type", "n_tokens"), [("q8_0", 22), ("f16", N_CTX + 1)])
def test_entries_that_do_not_fit_are_misses(
    cache: PrefixCache, service: FakeService, kv: KvCache, kv_type: str, n_tokens: int
) -> None:
    service.put([*DOC, *range(n_tokens - len(DOC))], b"state:%d" % n_tokens, kv_type)
    assert cache.restore(kv, [*DOC, 1, 2], 0) == Restored(0)
    assert service.corrupt == [] and len(kv) == 0


def test_a_refused_state_is_reported_and_everything_recomputed(
    cache: PrefixCache, service: FakeService, kv: KvCache, fake: FakeModel
) -> None:
    header = service.put([*DOC, 1], b"not a state")
    kv.append(DOC[:5], logits_last=True)
    assert cache.restore(kv, [*DOC, 7, 8], 4) == Restored(0)
    assert service.corrupt == [header.key()]
    assert len(kv) == 0 and fake.held == 0


# -- saves -------------------------------------------------------------------------------


def test_save_keeps_the_reply_with_its_prompt(cache: PrefixCache, service: FakeService, kv: KvCache) -> None:
    # A conversation's next turn repeats the reply: it stays in memory and in the entry.
    prompt = DOC[:10]
    prefill(kv, [*prompt, 55, 56])  # two generated tokens after the prompt
    assert cache.save(kv, prompt, warm=False)
    assert service.saved == [([*prompt, 55, 56], b"state:12", False)]
    assert kv.tokens == (*prompt, 55, 56) and kv.stored == len(prompt) + 2
    assert cache.save(kv, prompt, warm=False)  # known to be stored: not sent again
    assert len(service.saved) == 1


def test_short_prompts_are_not_saved(cache: PrefixCache, service: FakeService, kv: KvCache) -> None:
    prompt = DOC[: MIN_TOKENS - 1]
    prefill(kv, prompt)
    assert not cache.save(kv, prompt, warm=False)
    assert service.saved == []


def test_a_warm_request_saves_short_prompts_and_waits(cache: PrefixCache, service: FakeService, kv: KvCache) -> None:
    prompt = DOC[:3]
    prefill(kv, prompt)
    assert cache.save(kv, prompt, warm=True)
    assert service.saved == [(prompt, b"state:3", True)]


def test_a_background_warm_saves_short_prompts_without_waiting(
    cache: PrefixCache, service: FakeService, kv: KvCache
) -> None:
    prompt = DOC[:3]
    prefill(kv, prompt)
    assert cache.save(kv, prompt, warm=True, wait=False)  # queued: a user request may be waiting for the worker
    assert service.saved == [(prompt, b"state:3", False)]


def test_a_restored_prefix_is_not_saved_again(cache: PrefixCache, service: FakeService, kv: KvCache) -> None:
    service.put(DOC, b"state:20")
    prompt = [*DOC, 1, 2, 3]  # three new tokens: fewer than MIN_TOKENS
    restored = cache.restore(kv, prompt, 0)
    prefill(kv, prompt, restored.cached)
    kv.mark_stored(restored.stored)
    assert not cache.save(kv, prompt, warm=False)
    assert service.saved == []


def test_warming_a_stored_prompt_needs_no_save(cache: PrefixCache, service: FakeService, kv: KvCache) -> None:
    service.put(DOC, b"state:20")
    restored = cache.restore(kv, DOC, 0)
    prefill(kv, DOC, restored.cached)
    kv.mark_stored(restored.stored)
    assert cache.save(kv, DOC, warm=True)
    assert service.saved == []


def test_nothing_is_saved_while_unavailable_or_when_refused(
    cache: PrefixCache, service: FakeService, kv: KvCache
) -> None:
    prefill(kv, DOC)
    service.available = False
    assert not cache.save(kv, DOC, warm=True)
    service.available = True
    service.accept = False
    assert not cache.save(kv, DOC, warm=True)
    assert kv.stored == 0


# -- cache scopes ------------------------------------------------------------------


def test_an_entry_is_found_only_under_the_scope_that_stored_it(
    cache: PrefixCache, service: FakeService, kv: KvCache
) -> None:
    service.put([*DOC, 1, 2, 3], b"state:23", fingerprint=scoped_fingerprint(FINGERPRINT, "key-a"))
    prompt = [*DOC, 7, 8, 9]
    for other in ("", "key-b"):
        kv.enter_scope(other)
        assert cache.restore(kv, prompt, 0) == Restored(0)
        assert len(kv) == 0
    kv.enter_scope("key-a")
    assert cache.restore(kv, prompt, 0) == Restored(len(DOC), len(DOC))


def test_a_save_is_filed_under_the_scope_of_the_kv_cache(
    cache: PrefixCache, service: FakeService, kv: KvCache
) -> None:
    prompt = list(range(MIN_TOKENS + 4))
    kv.enter_scope("key-a")
    prefill(kv, prompt)
    assert cache.save(kv, prompt, warm=False)
    kv.enter_scope("")
    prefill(kv, prompt)
    assert cache.save(kv, prompt, warm=True)
    assert service.saved_under == [scoped_fingerprint(FINGERPRINT, "key-a"), FINGERPRINT]


def test_a_queued_save_that_the_store_did_not_take_is_saved_again(
    cache: PrefixCache, service: FakeService, kv: KvCache
) -> None:
    # The same prompt asked over and over (a restarted cachekeeper dropped the first save):
    # were the queued save still counted as stored, the prompt would never be stored.
    prefill(kv, DOC)
    assert cache.save(kv, DOC, warm=False)
    assert kv.stored == len(DOC) and len(service.saved) == 1
    service.finish_saves(False)
    assert cache.save(kv, DOC, warm=False)
    assert len(service.saved) == 2
    service.finish_saves(True)
    assert cache.save(kv, DOC, warm=False)
    assert len(service.saved) == 2 and kv.stored == len(DOC)
