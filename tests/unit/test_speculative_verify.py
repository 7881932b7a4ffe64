"""The sampling rule: speculative sampling leaves the target's distribution unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from reame.worker.speculative.verify import draw, softmax, verify_general

N = 40_000


def test_draw_inverts_the_cumulative_distribution() -> None:
    probs = np.array([0.0, 0.25, 0.5, 0.25])
    assert draw(probs, 0.0) == 1  # a zero-probability token is never drawn
    assert draw(probs, 0.2499) == 1
    assert draw(probs, 0.25) == 2
    assert draw(probs, 0.7499) == 2
    assert draw(probs, 0.75) == 3
    assert draw(probs, 0.999999) == 3
    assert draw(np.array([2.0, 2.0]), 0.6) == 1  # unnormalised weights work too


def test_softmax_is_stable_and_sums_to_one() -> None:
    probs = softmax(np.array([1000.0, 1000.0, -1000.0], dtype=np.float32))
    assert probs == pytest.approx([0.5, 0.5, 0.0])


def total_variation(counts: np.ndarray, probs: np.ndarray) -> float:
    return 0.5 * float(np.abs(counts / counts.sum() - probs).sum())


@pytest.mark.parametrize("seed", range(3))
def test_general_rule_keeps_the_target_distribution(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = softmax(rng.normal(0, 1.5, 6))
    q = softmax(rng.normal(0, 1.5, 6))
    counts = np.zeros(6)
    accepted = 0
    for _ in range(N):
        guess = draw(q, float(rng.random()))
        ok, token = verify_general(p, q, guess, rng)
        accepted += ok
        counts[token] += 1
    assert total_variation(counts, p) < 0.015
    # The acceptance rate is the overlap of the two distributions.
    assert accepted / N == pytest.approx(float(np.minimum(p, q).sum()), abs=0.015)


def test_one_hot_drafts_by_coupling_are_the_general_rule() -> None:
    """Draw x from p with one uniform, accept iff x is the draft: accepted with p(d), else the residual."""
    rng = np.random.default_rng(7)
    p = softmax(rng.normal(0, 1.5, 5))
    draft = 2
    q = np.eye(5)[draft]
    coupled = np.zeros((2, 5))
    general = np.zeros((2, 5))
    for _ in range(N):
        token = draw(p, float(rng.random()))
        coupled[int(token == draft), token] += 1
        ok, token = verify_general(p, q, draft, rng)
        general[int(ok), token] += 1
    assert coupled[1].sum() / N == pytest.approx(p[draft], abs=0.01)
    assert general[1].sum() / N == pytest.approx(p[draft], abs=0.01)
    residual = np.where(np.arange(5) == draft, 0.0, p) / (1 - p[draft])
    assert total_variation(coupled[0], residual) < 0.02
    assert total_variation(general[0], residual) < 0.02


def test_a_draft_outside_q_is_refused() -> None:
    with pytest.raises(ValueError, match="possible under q"):
        verify_general(np.array([0.5, 0.5]), np.array([1.0, 0.0]), 1, np.random.default_rng(0))
