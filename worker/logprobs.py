"""Log-probabilities of the generated tokens, for requests that ask for them (Generate.logprobs).

They are read off the raw logits of the position each token was chosen at (a
log-softmax over the whole vocabulary), as OpenAI reports them: the model's
distribution, before the request's sampling settings or a grammar reshape it. The
:class:`Recorder` wraps whichever chooser the decode loop uses and keeps the entry
of the last token chosen; worker.output.Output takes it when it emits that token.
Both loops choose each emitted token right before emitting it (worker.speculative.loop),
so the last choice is always the token being emitted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import numpy.typing as npt

from reame.shared.logprobs import MAX_TOP
from reame.shared.protocol import TokenLogprob


class Chooser(Protocol):
    def choose(self, logits: npt.NDArray[np.float32]) -> int: ...


def log_softmax(logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """Return the log-probabilities of a logits row."""
    values = np.asarray(logits, dtype=np.float64)
    peak = values.max()
    shifted = values - peak
    result: npt.NDArray[np.float64] = shifted - np.log(np.exp(shifted).sum())
    return result


def entry(logits: npt.NDArray[np.float32], token: int, top: int, piece: Callable[[int], bytes]) -> TokenLogprob:
    """Return ``token``'s log-probability under ``logits`` and the ``top`` most likely tokens'."""
    logprobs = log_softmax(logits)
    best: list[tuple[bytes, float]] = []
    if top > 0:
        ids = np.argpartition(-logprobs, top - 1)[:top]
        ids = ids[np.argsort(-logprobs[ids], kind="stable")]
        best = [(piece(int(i)), float(logprobs[i])) for i in ids]
    return TokenLogprob(piece(token), float(logprobs[token]), best)


class Recorder:
    """Wraps a chooser and keeps the log-probabilities of its last choice."""

    def __init__(self, top: int, piece: Callable[[int], bytes]) -> None:
        self._top = min(max(top, 0), MAX_TOP)
        self._piece = piece
        self._last: TokenLogprob | None = None

    def wrap(self, chooser: Chooser) -> Chooser:
        """Return a chooser that chooses as ``chooser`` does and records each choice."""
        recorder = self

        class _Recording:
            def choose(self, logits: npt.NDArray[np.float32]) -> int:
                token = chooser.choose(logits)
                recorder._last = entry(logits, token, recorder._top, recorder._piece)
                return token

        return _Recording()

    def last(self) -> TokenLogprob | None:
        """Return the entry of the last token chosen."""
        return self._last
