"""Choose the target's token from any logits row, as the request's sampler would.

Plain decoding samples with llama.cpp's chain (worker.sampler), which reads only
the last logits of the context. Verification needs the distribution at every
position of a batch, so here the same chain minus its final draw (logit bias,
penalties, top-k, top-p, min-p, temperature, built from the same
worker.sampler.plan) is applied to a llama_token_data_array filled from a row,
and the draw is done in numpy: argmax when greedy, else inversion of the
filtered distribution with one uniform per position (worker.speculative.verify).
Penalties see every chosen token, in order, as the plain chain does.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, Final

import llama_cpp
import numpy as np
import numpy.typing as npt

from reame.shared.protocol import SamplingParams
from reame.worker.sampler import make_stage, penalty_window, plan, seed_value
from reame.worker.speculative.verify import draw, softmax

# llama_token_data: {int32 id; float logit; float p}
TOKEN_DATA: Final = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
_DRAWS: Final = frozenset({"greedy", "dist"})


class TargetChooser:
    """The request's sampling as a function of a logits row; close it when the request ends."""

    def __init__(self, params: SamplingParams, n_vocab: int, n_ctx: int) -> None:
        if TOKEN_DATA.itemsize != ctypes.sizeof(llama_cpp.llama_token_data):
            raise RuntimeError("llama_token_data has an unexpected layout")
        stages = [stage for stage in plan(params, n_vocab, n_ctx) if stage.name not in _DRAWS]
        self.greedy = params.temperature == 0.0
        self.window = penalty_window(params, n_ctx)
        self._n_vocab = n_vocab
        self._chain: Any = None
        if stages:
            self._chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
            try:
                for stage in stages:
                    llama_cpp.llama_sampler_chain_add(self._chain, make_stage(stage, n_vocab))
            except BaseException:
                self.close()
                raise
        self._data = np.zeros(n_vocab, dtype=TOKEN_DATA)
        self._pointer = self._data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data))
        self._ids = np.arange(n_vocab, dtype=np.int32)
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
        if self._chain is None:  # greedy without bias or penalties: the plain argmax
            return int(np.argmax(logits))
        ids, values = self._filter(logits)
        if self.greedy:
            token = int(ids[int(np.argmax(values))])
        else:
            token = int(ids[draw(softmax(values), float(self._rng.random()))])
        llama_cpp.llama_sampler_accept(self._chain, token)
        return token

    def _filter(self, logits: npt.NDArray[np.float32]) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]:
        data = self._data
        data["id"] = self._ids
        data["logit"] = logits[: self._n_vocab]
        array = llama_cpp.llama_token_data_array(data=self._pointer, size=self._n_vocab, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(self._chain, ctypes.byref(array))
        # Samplers filter in place, but read through the pointer in case one swapped the buffer.
        kept = np.ctypeslib.as_array(array.data, shape=(array.size,)).view(TOKEN_DATA)
        return kept["id"].copy(), kept["logit"].copy()

    def close(self) -> None:
        """Free the chain (idempotent)."""
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None
