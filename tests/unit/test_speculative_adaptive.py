"""The draft-length controllers: pay-off under measured costs, growth, shrinking, switching off."""

from __future__ import annotations

import pytest

from reame.shared.modes import SpeculativeMode
from reame.worker.speculative.adaptive import (
    CEILING,
    MIN_EVIDENCE,
    PAYS,
    STEP_OVERHEAD,
    LookupController,
    ModelController,
    StepCosts,
    expected_tokens,
    lookup_can_pay,
)
from reame.worker.speculative.setup import Speculation

# One thread on Qwen2.5-Coder-1.5B here: batches are dear, only long runs pay.
DEAR = StepCosts.from_timings({1: 0.040, 2: 0.081, 4: 0.147, 8: 0.267, 16: 0.285})
CHEAP = StepCosts.from_timings({1: 1.0, 2: 1.1, 4: 1.3, 8: 1.6, 16: 2.0})
# Qwen2.5-Coder-1.5B Q4_K_M at one thread on an AVX2 EPYC (issue #20): nearly linear.
LINEAR = StepCosts.from_timings({1: 1.0, 2: 1.86, 4: 3.6, 8: 7.3, 16: 13.8})


def test_costs_are_ratios_to_one_token_and_never_fall() -> None:
    costs = StepCosts.from_timings({1: 0.02, 4: 0.05, 8: 0.04, 16: 0.08}, draft=0.01)
    assert costs.points == ((1, 1.0), (4, 2.5), (8, 2.5), (16, 4.0))
    assert costs.sizes == (1, 4, 8, 16)
    assert costs.batch(2) == pytest.approx(1.5)
    assert costs.batch(12) == pytest.approx(3.25)
    assert costs.batch(20) == pytest.approx(4.75)  # beyond: the last slope
    assert costs.draft == pytest.approx(0.5)
    assert costs.step(3) == pytest.approx(2.5 + 1.5)


def test_costs_need_the_one_token_time() -> None:
    with pytest.raises(ValueError, match="one-token"):
        StepCosts.from_timings({4: 0.1})


def test_expected_tokens_of_a_geometric_run() -> None:
    assert expected_tokens(1.0, 5) == 5
    assert expected_tokens(0.0, 5) == 0
    assert expected_tokens(0.5, 2) == pytest.approx(0.5 + 0.25)


def test_candidates_are_the_measured_sizes_within_bounds() -> None:
    controller = LookupController(CHEAP, 2, 15)
    assert controller.candidates(15) == [3, 7, 15]
    assert controller.candidates(5) == [3, 5]  # near max_tokens: what is left
    assert controller.candidates(1) == [1]


def test_sizes_that_could_not_pay_with_every_draft_accepted_are_never_tried() -> None:
    controller = LookupController(DEAR, 1, 15)
    assert controller.candidates(15) == [15]  # 16 tokens for 7.1 decodes; 8 for 6.7 could not pay
    assert controller.candidates(5) == []
    assert lookup_can_pay(DEAR, 1, 15) and lookup_can_pay(CHEAP, 1, 15)
    assert not lookup_can_pay(LINEAR, 1, 15)


def test_lookup_never_drafts_where_batches_are_nearly_linear() -> None:
    controller = LookupController(LINEAR, 1, 15)
    for level in range(1, 200):
        controller.observe(level, True)  # a perfect copy, as long as one gets
    assert all(controller.length(level, cap) == 0 for level in (1, 16, 199) for cap in (1, 4, 15))


def test_the_ceiling_counts_the_python_overhead_of_a_step() -> None:
    # All 15 drafts accepted would make 16 tokens for exactly 16 / CEILING decodes of batch:
    # the step's own overhead tips it under the ceiling.
    edge = StepCosts(((1, 1.0), (16, 16 / CEILING)))
    assert not lookup_can_pay(edge, 1, 15)
    below = StepCosts(((1, 1.0), (16, 16 / CEILING - 2 * STEP_OVERHEAD)))
    assert lookup_can_pay(below, 15, 15)


def test_lookup_mode_runs_plainly_where_it_cannot_pay() -> None:
    speculation = Speculation(SpeculativeMode.LOOKUP, 1, 15)
    speculation.costs = LINEAR
    assert not speculation.lookup_pays
    assert speculation.resolve(None) == SpeculativeMode.OFF
    speculation.costs = DEAR
    assert speculation.resolve(None) == SpeculativeMode.LOOKUP
    forced = Speculation(SpeculativeMode.LOOKUP, 1, 15, adaptive=False)
    forced.costs = LINEAR
    assert forced.resolve(None) == SpeculativeMode.LOOKUP  # benchmarks force drafting


def test_lookup_does_not_draft_without_evidence_when_batches_are_dear() -> None:
    controller = LookupController(DEAR, 1, 15)
    assert all(controller.length(level, 15) == 0 for level in (1, 3, 8, 16, 32))
    assert controller.length(0, 15) == 0  # no guess, nothing to draft


def test_lookup_starts_once_the_text_is_being_copied() -> None:
    controller = LookupController(DEAR, 1, 15)
    level = 1
    while controller.length(level, 15) == 0:
        controller.observe(level, True)
        level += 1
        assert level < 20, "a copy of 20 tokens should have been enough"
    assert controller.length(level, 15) == 15  # the only size that pays here
    assert controller.length(level, 4) == 0  # what is left of max_tokens could not pay


def test_lookup_stops_when_guesses_fail_and_free_text_never_starts() -> None:
    controller = LookupController(DEAR, 1, 15)
    for level in range(1, 30):
        controller.observe(level, True)
    assert controller.length(16, 15) == 15
    misses = 0
    while controller.length(16, 15):
        controller.observe(16, False)
        misses += 1
    assert misses <= 4
    # Free text: guesses at low alignment mostly fail; nothing is drafted.
    chat = LookupController(DEAR, 1, 15)
    for i in range(300):
        chat.observe(1 + i % 3, i % 4 == 0)
    assert all(chat.length(level, 15) == 0 for level in (1, 2, 3))


def test_lookup_length_grows_with_acceptance_when_batches_are_cheap() -> None:
    lengths = []
    for hit_rate in (0.3, 0.6, 0.9, 1.0):
        controller = LookupController(CHEAP, 1, 15)
        for i in range(200):
            controller.observe(3, (i * hit_rate) % 1.0 + hit_rate >= 1.0)
        lengths.append(controller.length(3, 15))
    assert lengths == sorted(lengths)
    assert lengths[0] < lengths[-1] == 15


def test_longer_alignment_is_trusted_more() -> None:
    controller = LookupController(DEAR, 1, 15)
    for _ in range(40):
        controller.observe(1, False)
        controller.observe(16, True)
    hazards = controller.hazards()
    assert hazards[0] > 0.8 and hazards[-1] < 0.25
    assert controller.expected(16, 15) > 4 > 1 > controller.expected(1, 15)


def test_fixed_lengths_when_not_adaptive() -> None:
    controller = LookupController(DEAR, 1, 7, adaptive=False)
    assert controller.length(1, 15) == 7
    assert controller.length(1, 3) == 3
    assert controller.length(0, 15) == 0


def test_model_drafts_switch_off_for_the_request_when_they_fail() -> None:
    costs = StepCosts.from_timings({1: 1.0, 2: 1.2, 4: 1.5, 8: 2.0}, draft=0.2)
    controller = ModelController(costs, 1, 7)
    steps = 0
    while (length := controller.length(0, 7)) > 0:
        controller.record(length, 0)
        steps += 1
    assert steps == MIN_EVIDENCE
    assert controller.switched_off
    for _ in range(5):
        controller.record(7, 7)  # too late: off for the rest of the request
    assert controller.length(0, 7) == 0


def test_model_drafts_that_are_accepted_go_on_and_grow() -> None:
    costs = StepCosts.from_timings({1: 1.0, 2: 1.2, 4: 1.5, 8: 2.0}, draft=0.2)
    controller = ModelController(costs, 1, 7)
    first = controller.length(0, 7)
    for _ in range(10):
        length = controller.length(0, 7)
        controller.record(length, length)
    assert controller.length(0, 7) >= first
    assert controller.length(0, 7) == 7
    assert not controller.switched_off


def test_a_draft_model_that_could_never_pay_is_never_run() -> None:
    # A draft token costing as much as a target token: even perfect drafts lose.
    costs = StepCosts.from_timings({1: 1.0, 2: 1.9, 4: 3.5, 8: 6.5, 16: 7.0}, draft=1.0)
    assert (1 + 15) / costs.step(15) < PAYS
    controller = ModelController(costs, 1, 15)
    assert controller.length(0, 15) == 0
    assert controller.switched_off
