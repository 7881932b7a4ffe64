"""Measuring step costs at start-up, and what calibration decides from them."""

from __future__ import annotations

import time
from typing import cast

import pytest

from reame.shared.modes import SpeculativeMode
from reame.worker.kv import KvCache
from reame.worker.speculative.costs import CONTEXT, batch_sizes, clock, measure, time_decodes
from reame.worker.speculative.setup import Speculation
from tests.unit.fakes import FakeKv, fake_model


@pytest.mark.parametrize(
    ("smallest", "largest", "sizes"),
    [(2, 16, [1, 2, 4, 8, 16]), (2, 9, [1, 2, 4, 8, 9]), (4, 16, [1, 4, 8, 16]), (2, 2, [1, 2]), (1, 1, [1])],
)
def test_batch_sizes(smallest: int, largest: int, sizes: list[int]) -> None:
    assert batch_sizes(smallest, largest) == sizes


def test_every_size_is_decoded_after_a_short_context_then_the_cache_is_emptied() -> None:
    fake = FakeKv(fake_model())
    seconds = time_decodes(cast(KvCache, fake), [1, 4], filler=3, n_batch=8, rounds=2)
    assert set(seconds) == {1, 4} and all(t > 0 for t in seconds.values())
    assert fake.decodes == [8, 8, 8, 8, 1, 4, 1, 4]  # the context in batches of n_batch
    assert len(fake) == 0
    assert CONTEXT == 32


def test_measure_gives_ratios_to_one_token() -> None:
    costs = measure(cast(KvCache, FakeKv(fake_model())), 1, 7, filler=3, n_batch=64)
    assert costs.sizes == (1, 2, 4, 8)
    assert costs.batch(1) == 1.0
    assert costs.draft == 0.0


def test_calibration_caps_drafts_to_the_batch() -> None:
    speculation = Speculation(SpeculativeMode.LOOKUP, 4, 15)
    speculation.calibrate(cast(KvCache, FakeKv(fake_model())), filler=3, n_batch=8)
    assert (speculation.draft_min, speculation.draft_max) == (4, 7)
    assert speculation.costs.sizes == (1, 5, 8)
    assert speculation.available


def test_a_batch_of_one_leaves_no_room_for_drafts() -> None:
    speculation = Speculation(SpeculativeMode.LOOKUP, 1, 15)
    speculation.calibrate(cast(KvCache, FakeKv(fake_model())), filler=3, n_batch=1)
    assert speculation.resolve(SpeculativeMode.LOOKUP) == SpeculativeMode.OFF


def test_one_thread_is_timed_by_its_cpu_time() -> None:
    # Other processes' share of the core must not make long batches look dear.
    assert clock(1) is time.thread_time
    assert clock(2) is time.perf_counter and clock(0) is time.perf_counter


def test_measure_takes_the_clock_of_its_threads() -> None:
    costs = measure(cast(KvCache, FakeKv(fake_model())), 1, 7, filler=3, n_batch=64, threads=1)
    assert costs.sizes == (1, 2, 4, 8)
