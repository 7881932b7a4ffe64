"""The sampler chain plan (pure) and building it in C (no model needed)."""

from __future__ import annotations

import pytest

from reame.shared.protocol import SamplingParams
from reame.worker.sampler import RANDOM_SEED, Sampler, SamplingError, Stage, penalty_window, plan, seed_value

N_VOCAB = 1000
N_CTX = 512


def names(stages: list[Stage]) -> list[str]:
    return [stage.name for stage in stages]


def test_default_chain_matches_llama_cpp_python_order() -> None:
    stages = plan(SamplingParams(temperature=0.7, top_k=20, top_p=0.9, min_p=0.1, seed=5), N_VOCAB, N_CTX)
    assert stages == [
        Stage("top_k", (20,)),
        Stage("top_p", (0.9, 1)),
        Stage("min_p", (0.1, 1)),
        Stage("temp", (0.7,)),
        Stage("dist", (5,)),
    ]


def test_temperature_zero_is_greedy_after_bias_and_penalties() -> None:
    params = SamplingParams(temperature=0.0, repeat_penalty=1.3, logit_bias=[(3, -100.0)])
    assert names(plan(params, N_VOCAB, N_CTX)) == ["logit_bias", "penalties", "greedy"]


def test_neutral_penalties_are_left_out() -> None:
    assert "penalties" not in names(plan(SamplingParams(), N_VOCAB, N_CTX))
    assert penalty_window(SamplingParams(repeat_penalty=1.0), N_CTX) == 0


@pytest.mark.parametrize(
    ("params", "window"),
    [
        (SamplingParams(repeat_penalty=1.1), 64),
        (SamplingParams(frequency_penalty=0.5, repeat_last_n=16), 16),
        (SamplingParams(presence_penalty=-0.5, repeat_last_n=-1), N_CTX),
        (SamplingParams(repeat_penalty=1.1, repeat_last_n=0), 0),
    ],
)
def test_penalty_window(params: SamplingParams, window: int) -> None:
    assert penalty_window(params, N_CTX) == window
    stages = plan(params, N_VOCAB, N_CTX)
    assert ("penalties" in names(stages)) == (window > 0)
    if window:
        (penalties,) = [s for s in stages if s.name == "penalties"]
        assert penalties.args == (
            window, params.repeat_penalty, params.frequency_penalty, params.presence_penalty,
        )


@pytest.mark.parametrize("token", [-1, N_VOCAB, 10**9])
def test_logit_bias_outside_vocabulary_is_an_invalid_request(token: int) -> None:
    params = SamplingParams(logit_bias=[(5, 1.0), (token, 2.0)])
    with pytest.raises(SamplingError) as info:
        plan(params, N_VOCAB, N_CTX)
    assert info.value.param == "logit_bias"
    assert str(token) in str(info.value)
    assert f"0 to {N_VOCAB - 1}" in str(info.value)


def test_logit_bias_edges_are_accepted() -> None:
    stages = plan(SamplingParams(logit_bias=[(0, 1.0), (N_VOCAB - 1, -1.0)]), N_VOCAB, N_CTX)
    assert stages[0] == Stage("logit_bias", (((0, 1.0), (N_VOCAB - 1, -1.0)),))


def test_seed_mapping() -> None:
    assert seed_value(None) == RANDOM_SEED
    assert seed_value(42) == 42
    assert seed_value(-1) == RANDOM_SEED - 1  # a fixed seed never means "random"
    assert seed_value(2**32 + 7) == 7


def test_c_chain_builds_for_every_stage_and_frees() -> None:
    params = SamplingParams(
        temperature=0.5, repeat_penalty=1.2, logit_bias=[(1, 5.0), (2, -5.0)], seed=1,
    )
    sampler = Sampler(params, N_VOCAB, N_CTX)
    sampler.feed_prompt(list(range(100)))
    sampler.close()
    sampler.close()
    greedy = Sampler(SamplingParams(temperature=0.0), N_VOCAB, N_CTX)
    greedy.close()
