"""The sampling rule that keeps speculative output distributed as the target's.

Standard speculative sampling accepts a draft token d with probability
min(1, p(d) / q(d)) and, on rejection, draws from the normalised residual
max(0, p - q), where p is the target's distribution and q the drafter's. Both of
reame's drafters are deterministic (lookup copies, the draft model proposes its
argmax), so q is one-hot at d: accept with probability p(d), else draw from p
without d. The decode loop (worker.speculative.loop) does exactly that with a
single uniform per position: it draws x from p by inversion (:func:`draw`) and
accepts iff x == d. P(accept) = p(d), and given a rejection x is distributed as p
restricted to tokens other than d, renormalised: the residual. The token at every
position is therefore the one plain sampling draws from the same uniform,
whatever was drafted, and greedy decoding (p one-hot at the argmax) is the
special case "accept while the argmax agrees".

:func:`verify_general` is the textbook rule for a drafter that samples (q not
one-hot); no drafter uses it yet, the tests hold it to the same guarantee.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

Probs = npt.NDArray[np.float64]


def softmax(logits: npt.NDArray[Any]) -> Probs:
    """Return the probabilities of ``logits`` (float64, summing to 1)."""
    values = np.asarray(logits, dtype=np.float64)
    weights = np.exp(values - values.max())
    total: Probs = weights / weights.sum()
    return total


def draw(probs: npt.NDArray[Any], u: float) -> int:
    """Return the index that the uniform ``u`` in [0, 1) selects from ``probs`` (inverse CDF)."""
    cumulative = np.cumsum(probs, dtype=np.float64)
    index = int(np.searchsorted(cumulative, u * cumulative[-1], side="right"))
    return min(index, len(cumulative) - 1)


def verify_general(
    p: npt.NDArray[Any], q: npt.NDArray[Any], draft: int, rng: np.random.Generator
) -> tuple[bool, int]:
    """Judge ``draft``, drawn from ``q``, against the target ``p``: (accepted, the index to emit)."""
    q_d = float(q[draft])
    if q_d <= 0.0:
        raise ValueError("the draft must have been possible under q")
    if rng.random() < min(1.0, float(p[draft]) / q_d):
        return True, draft
    residual = np.maximum(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64), 0.0)
    if residual.sum() <= 0.0:  # p == q: a rejection cannot happen; stay safe anyway
        residual = np.asarray(p, dtype=np.float64)
    return False, draw(residual, float(rng.random()))
