"""Choose the target's token from any logits row, as the request's sampler would.

Plain decoding samples with llama.cpp's chain (worker.sampler), which reads only
the last logits of the context. Verification needs the distribution at every
position of a batch, so here the same chain minus its final draw (logit bias,
penalties, top-k, top-p, min-p, temperature, built from the same
worker.sampler.plan) is applied to a llama_token_data_array filled from a row,
and the draw is done in numpy: argmax when greedy, else inversion of the
filtered distribution with one uniform per position (worker.speculative.verify).
Penalties see every chosen token, in order, as the plain chain does.

A request with a grammar (Generate.grammar) gets llama.cpp's grammar sampler
before that chain, applied and advanced here, outside the chain, so the prompt fed
to the penalties never reaches it. Both decode loops then choose through this
class (worker.engine): in verification a draft token survives only if the
grammar-constrained choice at its position is that token, so drafts can never
take the reply outside the grammar.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, Final

import llama_cpp
import numpy as np
import numpy.typing as npt

from reame.shared.protocol import SamplingParams
from reame.worker.sampler import chain, penalty_window, plan, seed_value
from reame.worker.speculative.verify import draw, softmax

# llama_token_data: {int32 id; float logit; float p}
TOKEN_DATA: Final = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
_DRAWS: Final = frozenset({"greedy", "dist"})


class GrammarDeadEnd(RuntimeError):
    """The grammar allows no token after the reply so far."""


class TargetChooser:
    """The request's sampling as a function of a logits row; close it when the request ends.

    ``grammar`` is a llama.cpp grammar sampler (worker.grammar); the chooser owns and frees it.
    """

    def __init__(self, params: SamplingParams, n_vocab: int, n_ctx: int, grammar: Any = None) -> None:
        self._grammar: Any = grammar
        self._chain: Any = None
        try:
            if TOKEN_DATA.itemsize != ctypes.sizeof(llama_cpp.llama_token_data):
                raise RuntimeError("llama_token_data has an unexpected layout")
            stages = [stage for stage in plan(params, n_vocab, n_ctx) if stage.name not in _DRAWS]
        except BaseException:
            self.close()
            raise
        self.greedy = params.temperature == 0.0
        self.window = penalty_window(params, n_ctx)
        self._n_vocab = n_vocab
        if stages:
            try:
                self._chain = chain(stages, n_vocab)
            except BaseException:
                self.close()
                raise
        self._data = np.zeros(n_vocab, dtype=TOKEN_DATA)
        self._pointer = self._data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data))
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._one = np.zeros(1, dtype=TOKEN_DATA)
        self._one_pointer = self._one.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data))
        seed = None if params.seed is None else seed_value(params.seed)
        self._rng = np.random.default_rng(seed)

    def feed_prompt(self, tokens: Sequence[int]) -> None:
        """Let the penalties see the prompt's last tokens, as worker.sampler.Sampler does."""
        if not self.window:
            return
        for token in tokens[-self.window :]:
            llama_cpp.llama_sampler_accept(self._chain, token)

    def choose(self, logits: npt.NDArray[np.float32]) -> int:
        """Pick the token from ``logits`` (one row, n_vocab values) and remember it."""
        if self._chain is None and self._grammar is None:  # greedy without bias or penalties: the plain argmax
            return int(np.argmax(logits))
        token = self._pick(*self._filter(logits, under_grammar=False))
        if self._grammar is not None and not self._allowed(token):
            # The grammar is applied to the whole vocabulary only when the free choice breaks it,
            # as llama.cpp's common sampler does: a second draw from the allowed tokens gives
            # exactly the distribution restricted to them, at a fraction of the cost.
            ids, values = self._filter(logits, under_grammar=True)
            if not np.isfinite(values).any():
                raise GrammarDeadEnd("the grammar allows no token here")
            token = self._pick(ids, values)
        if self._grammar is not None:
            llama_cpp.llama_sampler_accept(self._grammar, token)
        if self._chain is not None:
            llama_cpp.llama_sampler_accept(self._chain, token)
        return token

    def _pick(self, ids: npt.NDArray[np.int32], values: npt.NDArray[np.float32]) -> int:
        if self.greedy:
            return int(ids[int(np.argmax(values))])
        return int(ids[draw(softmax(values), float(self._rng.random()))])

    def _allowed(self, token: int) -> bool:
        """Return whether the grammar accepts ``token`` next (a one-token apply)."""
        one = self._one
        one["id"][0] = token
        one["logit"][0] = 0.0
        array = llama_cpp.llama_token_data_array(data=self._one_pointer, size=1, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(array))
        return bool(np.isfinite(one["logit"][0]))

    def _filter(
        self, logits: npt.NDArray[np.float32], under_grammar: bool
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]:
        data = self._data
        data["id"] = self._ids
        data["logit"] = logits[: self._n_vocab]
        array = llama_cpp.llama_token_data_array(data=self._pointer, size=self._n_vocab, selected=-1, sorted=False)
        if under_grammar:  # first, so top-k and the rest pick among allowed tokens only
            llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(array))
        if self._chain is not None:
            llama_cpp.llama_sampler_apply(self._chain, ctypes.byref(array))
        # Samplers filter in place, but read through the pointer in case one swapped the buffer.
        kept = np.ctypeslib.as_array(array.data, shape=(array.size,)).view(TOKEN_DATA)
        return kept["id"].copy(), kept["logit"].copy()

    def close(self) -> None:
        """Free the chain and the grammar (idempotent)."""
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None
        if self._grammar is not None:
            llama_cpp.llama_sampler_free(self._grammar)
            self._grammar = None
