"""Build a llama.cpp sampler chain from protocol.SamplingParams.

The chain is the one ``llama_cpp.Llama`` builds for the same parameters
(logit bias, penalties, top-k, top-p, min-p, temperature, then a seeded draw;
greedy at temperature 0), so seeded and greedy outputs match it. (A sampled request
that speculative decoding may serve draws through worker.speculative.chooser instead,
speculated or not: worker.engine.) Unlike
llama-cpp-python, and like llama.cpp's server, the prompt tokens are fed to
the penalty sampler, so repeating the prompt counts as repetition.

:func:`plan` is the pure part (which stages, with which arguments); :class:`Sampler`
turns a plan into C objects.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

import llama_cpp

from reame.shared.protocol import SamplingParams

RANDOM_SEED: Final = llama_cpp.LLAMA_DEFAULT_SEED  # llama.cpp draws a random seed for this value
_SEED_MASK: Final = 0xFFFFFFFF


class SamplingError(ValueError):
    """A sampling parameter this model cannot honour; ``param`` names it."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class Stage(NamedTuple):
    """One sampler in the chain: its name and constructor arguments."""

    name: str
    args: tuple[Any, ...]


def seed_value(seed: int | None) -> int:
    """Map a client seed to llama.cpp's uint32; None draws a random one."""
    if seed is None:
        return RANDOM_SEED
    value = seed & _SEED_MASK
    # The all-ones value means "random" to llama.cpp; a client that asked for a
    # fixed seed must still get a reproducible draw.
    return value - 1 if value == RANDOM_SEED else value


def penalty_window(params: SamplingParams, n_ctx: int) -> int:
    """Return how many recent tokens the penalties look at (0: no penalty stage)."""
    if params.repeat_penalty == 1.0 and params.frequency_penalty == 0.0 and params.presence_penalty == 0.0:
        return 0  # llama.cpp skips a neutral penalty sampler anyway; skip its bookkeeping too
    return n_ctx if params.repeat_last_n == -1 else max(params.repeat_last_n, 0)


def plan(params: SamplingParams, n_vocab: int, n_ctx: int) -> list[Stage]:
    """Return the chain's stages; raise :class:`SamplingError` for a bad logit_bias."""
    stages: list[Stage] = []
    if params.logit_bias:
        bad = [token for token, _ in params.logit_bias if not 0 <= token < n_vocab]
        if bad:
            raise SamplingError(
                f"logit_bias has token ids outside this model's vocabulary (0 to {n_vocab - 1}): "
                + ", ".join(str(t) for t in bad[:10]),
                "logit_bias",
            )
        stages.append(Stage("logit_bias", (tuple(params.logit_bias),)))
    window = penalty_window(params, n_ctx)
    if window:
        stages.append(
            Stage(
                "penalties",
                (window, params.repeat_penalty, params.frequency_penalty, params.presence_penalty),
            )
        )
    if params.temperature == 0.0:
        stages.append(Stage("greedy", ()))
        return stages
    stages += [
        Stage("top_k", (params.top_k,)),
        Stage("top_p", (params.top_p, 1)),
        Stage("min_p", (params.min_p, 1)),
        Stage("temp", (params.temperature,)),
        Stage("dist", (seed_value(params.seed),)),
    ]
    return stages


def _bias_array(pairs: Sequence[tuple[int, float]]) -> ctypes.Array[Any]:
    items = [llama_cpp.llama_logit_bias(token, bias) for token, bias in pairs]
    return (llama_cpp.llama_logit_bias * len(items))(*items)


def make_stage(stage: Stage, n_vocab: int) -> Any:
    """Create the C sampler for one stage of a plan."""
    name, args = stage
    if name == "logit_bias":
        (pairs,) = args
        # llama.cpp copies the array, so it may die with this frame.
        return llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(pairs), _bias_array(pairs))
    elif name == "penalties":
        return llama_cpp.llama_sampler_init_penalties(n_vocab, *args)
    elif name == "greedy":
        return llama_cpp.llama_sampler_init_greedy()
    elif name == "top_k":
        return llama_cpp.llama_sampler_init_top_k(*args)
    elif name == "top_p":
        return llama_cpp.llama_sampler_init_top_p(*args)
    elif name == "min_p":
        return llama_cpp.llama_sampler_init_min_p(*args)
    elif name == "temp":
        return llama_cpp.llama_sampler_init_temp(*args)
    elif name == "dist":
        return llama_cpp.llama_sampler_init_dist(*args)
    else:
        raise ValueError(f"unknown sampler stage {name!r}")


def chain(stages: Sequence[Stage], n_vocab: int) -> Any:
    """A C sampler chain of ``stages``; freed here if a stage cannot be made."""
    made: Any = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    try:
        for stage in stages:
            # The chain owns (and frees) every sampler added to it.
            llama_cpp.llama_sampler_chain_add(made, make_stage(stage, n_vocab))
    except BaseException:
        llama_cpp.llama_sampler_free(made)
        raise
    return made


class Sampler:
    """A C sampler chain for one request; close it when the request ends."""

    def __init__(self, params: SamplingParams, n_vocab: int, n_ctx: int) -> None:
        stages = plan(params, n_vocab, n_ctx)
        self.window = penalty_window(params, n_ctx)
        self._chain: Any = chain(stages, n_vocab)

    def feed_prompt(self, tokens: Sequence[int]) -> None:
        """Let the penalties see the prompt's last tokens, as llama.cpp's server does."""
        if not self.window:
            return
        for token in tokens[-self.window :]:
            llama_cpp.llama_sampler_accept(self._chain, token)

    def sample(self, ctx: Any) -> int:
        """Pick the next token from the last logits; llama.cpp also accepts it into the chain."""
        token: int = llama_cpp.llama_sampler_sample(self._chain, ctx, -1)
        return token

    def close(self) -> None:
        """Free the chain and its samplers (idempotent)."""
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None

