"""The speculative path's sampler: llama.cpp's filters on any logits row, then a numpy draw.

No model is needed: the chain's samplers work on a bare token array.
"""

from __future__ import annotations

import numpy as np
import pytest

from reame.shared.protocol import SamplingParams
from reame.worker.sampler import SamplingError
from reame.worker.speculative.chooser import TargetChooser
from reame.worker.speculative.verify import softmax

VOCAB = 50


def logits_row(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2, VOCAB).astype(np.float32)


def chooser(**params: object) -> TargetChooser:
    return TargetChooser(SamplingParams(**params), VOCAB, 256)  # type: ignore[arg-type]


def test_greedy_is_the_argmax() -> None:
    row = logits_row()
    picker = chooser(temperature=0.0)
    assert picker.choose(row) == int(np.argmax(row))
    picker.close()


def test_logit_bias_applies_before_the_argmax() -> None:
    row = logits_row()
    picker = chooser(temperature=0.0, logit_bias=[(7, 100.0)])
    assert picker.choose(row) == 7
    picker.close()


def test_a_bias_outside_the_vocabulary_is_refused() -> None:
    with pytest.raises(SamplingError) as caught:
        chooser(logit_bias=[(VOCAB, 1.0)])
    assert caught.value.param == "logit_bias"


def test_penalties_see_the_prompt_and_the_chosen_tokens() -> None:
    row = np.zeros(VOCAB, dtype=np.float32)
    row[3], row[4], row[5] = 3.0, 2.9, 2.8
    picker = chooser(temperature=0.0, repeat_penalty=2.0, repeat_last_n=16)
    picker.feed_prompt([3])
    assert picker.choose(row) == 4  # 3 was in the prompt
    assert picker.choose(row) == 5  # 4 was just chosen
    picker.close()


def test_the_same_seed_draws_the_same_tokens() -> None:
    rows = [logits_row(i) for i in range(20)]
    first = chooser(temperature=0.9, seed=42)
    again = chooser(temperature=0.9, seed=42)
    assert [first.choose(r) for r in rows] == [again.choose(r) for r in rows]
    first.close()
    again.close()


def test_sampling_follows_top_k_and_temperature() -> None:
    row = logits_row(3)
    picker = chooser(temperature=0.7, top_k=3, top_p=1.0, min_p=0.0, seed=1)
    counts = np.zeros(VOCAB)
    n = 20_000
    for _ in range(n):
        counts[picker.choose(row)] += 1
    picker.close()
    top = np.argsort(row)[::-1][:3]
    expected = np.zeros(VOCAB)
    expected[top] = softmax(row[top] / 0.7)
    assert set(np.nonzero(counts)[0]) <= set(top)
    assert 0.5 * np.abs(counts / n - expected).sum() < 0.015


def test_min_p_drops_unlikely_tokens() -> None:
    row = np.full(VOCAB, -10.0, dtype=np.float32)
    row[0], row[1] = 5.0, 4.0
    picker = chooser(temperature=1.0, top_k=0, top_p=1.0, min_p=0.05, seed=2)
    assert {picker.choose(row) for _ in range(500)} == {0, 1}
    picker.close()
