"""Decide how many tokens to draft, and when drafting does not pay.

The cost model. A decode of b tokens with logits at every position costs
``batch(b)`` one-token decodes, measured by each worker at start-up
(worker.speculative.costs) because it depends on the model, the threads and the
CPU. Measured on a 2-core EPYC: Qwen2.5-Coder-1.5B Q4_K_M costs 1.9 for 2
tokens, 6.5 for 8 and 6.9 for 16 at one thread (1.7, 4.4 and 4.9 at two
threads); the 135M default model 10.5 for 16 at one thread. On CPUs, then, a
verification pays only when long runs of drafts are accepted. Draft lengths are
chosen among the measured batch sizes, so a cost is never a guess. A model
draft adds ``draft`` per drafted token (the draft model's own one-token
decode); lookup drafting costs nothing. A step with k drafts yields 1 + E_k
tokens (E_k: the accepted run expected) for ``step(k)``, where a plain step
yields 1 token for 1: the draft length is the k that maximises tokens per cost,
and nothing is drafted unless that beats plain decoding by PAYS. So the length
grows while acceptance is high and shrinks, to nothing, when it falls.

Where batches cost nearly as much as their tokens decoded one by one (one thread
on some x86 CPUs: 8 tokens for 7.3 to 10 one-token decodes of Qwen2.5-Coder-1.5B
Q4_K_M on an AVX2 EPYC, issue #20), a predicted gain of a few per cent is
within the error of the prediction, and a step whose drafts are rejected early
loses almost all of its cost: lookup measured 0.95x of plain decoding there. So a
draft length is never tried unless, all its drafts accepted, it would yield CEILING
times the tokens per cost of plain decoding (a batch of k + 1 must cost at most
(k + 1) / CEILING one-token decodes), counting STEP_OVERHEAD for the Python work a
verification step adds. On such a CPU lookup then never drafts and costs only its
guesses (about 20 us a token). The costs come from the kept cost file and the
acceptance from the request's own tokens, so the decision stays reproducible.

Lookup (:class:`LookupController`). Every output token tells whether the lookup
guess for it was right, drafted or not, so acceptance is learnt for free while
decoding plainly, and speculation starts only once the text is being copied.
The chance that a guess fails (the hazard) is learnt separately for each level
of alignment, i.e. how many tokens back the text already agrees with the match
(worker.speculative.ngram): a text that has followed its source for 16 tokens
is more likely to go on than one matching a single common token. A draft of k
from alignment L expects E_k = the sum over i <= k of the chance of surviving
levels L to L + i - 1.

Draft model (:class:`ModelController`). A model draft must be run to be judged:
it is tried for MIN_EVIDENCE steps and, when its acceptance is too low to pay,
switched off for the rest of the request. When even drafts accepted with
probability LIKELY_ACCEPT could not pay (the draft model costs too much next to
the target, as on a 2-core CPU), it is never run at all (:func:`model_can_pay`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping
from typing import Final

# A step must be predicted this much faster than plain decoding: the model leaves out
# Python's per-step work and the noise in the measured costs, and a loss on free chat
# is worse than a missed gain.
PAYS: Final = 1.1
# A draft length must be able to pay this much with every draft accepted (see above): the
# 2-core EPYC's 16-token batch of the 1.5B model (0.43-0.6 per token) passes, the default
# model's (0.5-0.66) too, and the 8-token batch of 7.3 (0.91 per token) does not.
CEILING: Final = 1.4
# What a verification step costs beyond its batch, in one-token decodes. Measured on the
# 2-core EPYC: the loop's Python work is 15-40 us a token with or without drafts (a free
# fake target), reading and judging a row of logits 16 us (49k vocabulary), rolling
# rejected positions back 18 us; so a step adds well under 0.1 ms, and 0.03 decodes (0.4 ms
# of the default model's 14 ms one-token decode, 1.4 ms of the 1.5B model's) leaves room.
STEP_OVERHEAD: Final = 0.03
DECAY: Final = 0.95  # per observation: estimates follow about the last twenty tokens judged
# Lookup: alignment levels whose hazards are learnt apart (a level holds alignments up to the next).
LEVELS: Final = (1, 2, 3, 8, 16)
PRIOR_HAZARD: Final = 0.5  # before any evidence, for level 1; each higher level starts from the one below
PRIOR_WEIGHT: Final = 4.0  # observations that outweigh the prior
# Draft model: acceptance assumed before evidence, and the steps it gets to prove itself.
PRIOR_ACCEPT: Final = 0.6
MIN_EVIDENCE: Final = 3
LIKELY_ACCEPT: Final = 0.9  # about the best a small draft model does on text it could copy


@dataclasses.dataclass(frozen=True)
class StepCosts:
    """What a verification step costs, in one-token decodes of the target model."""

    points: tuple[tuple[int, float], ...]  # (batch size, cost) as measured, sizes ascending from 1
    draft: float = 0.0  # one one-token decode of the draft model

    @classmethod
    def from_timings(cls, seconds: Mapping[int, float], draft: float | None = None) -> StepCosts:
        """Build the costs from measured decode times (seconds per batch size, 1 included).

        A bigger batch is never taken to cost less than a smaller one.
        """
        one = seconds.get(1, 0.0)
        if one <= 0:
            raise ValueError("the one-token decode time is needed")
        points: list[tuple[int, float]] = []
        for size, time in sorted(seconds.items()):
            if size >= 1:
                points.append((size, max(time / one, points[-1][1] if points else 1.0)))
        return cls(tuple(points), 0.0 if draft is None else max(draft / one, 0.0))

    @property
    def sizes(self) -> tuple[int, ...]:
        """Return the measured batch sizes."""
        return tuple(size for size, _ in self.points)

    def batch(self, size: int) -> float:
        """Return the cost of decoding ``size`` tokens (interpolated between measured sizes)."""
        points = self.points
        if len(points) == 1:
            return points[0][1] * size
        for (x0, y0), (x1, y1) in itertools.pairwise(points):
            if size <= x1:
                return y0 + (y1 - y0) * (size - x0) / (x1 - x0)
        (x0, y0), (x1, y1) = points[-2], points[-1]
        return y1 + (y1 - y0) * (size - x1) / (x1 - x0)

    def step(self, drafts: int) -> float:
        """Return the cost of a step that drafts and verifies ``drafts`` tokens."""
        return self.batch(drafts + 1) + self.draft * drafts


# Measured on Qwen2.5-Coder-1.5B Q4_K_M, one thread (see above); used until a worker has
# measured its own, and by tests.
DEFAULT_COSTS: Final = StepCosts.from_timings({1: 0.040, 2: 0.081, 4: 0.147, 8: 0.267, 16: 0.285})


def expected_tokens(accept: float, drafts: int) -> float:
    """Return the accepted run expected of ``drafts`` tokens each accepted with ``accept``."""
    if accept >= 1.0:
        return float(drafts)
    return accept * (1.0 - accept**drafts) / (1.0 - accept)


class _Planner:
    """Draft lengths and their gains under measured costs."""

    def __init__(self, costs: StepCosts, draft_min: int, draft_max: int, adaptive: bool) -> None:
        if not 1 <= draft_min <= draft_max:
            raise ValueError(f"need 1 <= draft_min <= draft_max, got {draft_min} and {draft_max}")
        self.costs = costs
        self.draft_min = draft_min
        self.draft_max = draft_max
        self.adaptive = adaptive  # False: always draft as much as allowed (tests, benchmarks)

    def cost(self, drafts: int) -> float:
        """Return what a step drafting ``drafts`` tokens costs, its Python work included."""
        return self.costs.step(drafts) + STEP_OVERHEAD

    def can_pay(self, drafts: int) -> bool:
        """Tell whether ``drafts`` tokens could beat plain decoding by CEILING if all were accepted."""
        return drafts >= 1 and (drafts + 1) / self.cost(drafts) >= CEILING

    def candidates(self, most: int) -> list[int]:
        """Return the draft lengths worth considering: measured batch sizes up to ``most`` that could pay."""
        lengths = {size - 1 for size in self.costs.sizes if self.draft_min <= size - 1 <= most}
        if most < self.draft_max or not lengths:
            lengths.add(most)  # near max_tokens: what is left
        return sorted(drafts for drafts in lengths if self.can_pay(drafts))

    def best(self, expected: Callable[[int], float], most: int) -> tuple[int, float]:
        """Return the draft length of at most ``most`` (>= 1) with the highest gain, and that gain.

        ``expected(k)``: the accepted run expected of a draft of k tokens.
        """
        choice, gain = 0, 0.0
        for drafts in self.candidates(most):
            value = (1.0 + expected(drafts)) / self.cost(drafts)
            if value > gain:
                choice, gain = drafts, value
        return choice, gain


class LookupController(_Planner):
    """Lookup draft lengths for one request, from the hazard at each alignment level."""

    switched_off = False  # never for good: plain steps go on judging the guesses

    def __init__(self, costs: StepCosts, draft_min: int, draft_max: int, adaptive: bool = True) -> None:
        super().__init__(costs, draft_min, draft_max, adaptive)
        self._hits = [0.0] * len(LEVELS)
        self._misses = [0.0] * len(LEVELS)

    def observe(self, level: int, hit: bool) -> None:
        """Record whether the guess made at alignment ``level`` (0: none was made) was right."""
        if level <= 0:
            return
        bucket = _bucket(level)
        self._hits[bucket] = self._hits[bucket] * DECAY + hit
        self._misses[bucket] = self._misses[bucket] * DECAY + (not hit)

    def hazards(self) -> list[float]:
        """Return, per level of LEVELS, the estimated chance that a guess fails."""
        hazards: list[float] = []
        prior = PRIOR_HAZARD
        for hits, misses in zip(self._hits, self._misses, strict=True):
            prior = (misses + PRIOR_WEIGHT * prior) / (hits + misses + PRIOR_WEIGHT)
            hazards.append(prior)
        return hazards

    def expected(self, level: int, drafts: int, hazards: list[float] | None = None) -> float:
        """Return the accepted run expected of a draft of ``drafts`` from alignment ``level``."""
        hazards = hazards or self.hazards()
        total, alive = 0.0, 1.0
        for i in range(drafts):
            alive *= 1.0 - hazards[_bucket(level + i)]
            total += alive
        return total

    def length(self, level: int, cap: int) -> int:
        """Return how many tokens to draft now from alignment ``level`` (0: none), at most ``cap``."""
        most = min(self.draft_max, cap)
        if most <= 0 or level <= 0:
            return 0
        if not self.adaptive:
            return most
        hazards = self.hazards()
        choice, gain = self.best(lambda drafts: self.expected(level, drafts, hazards), most)
        return choice if gain >= PAYS else 0

    def record(self, drafted: int, accepted: int) -> None:
        """Nothing to learn: every token was observed as it came."""


class ModelController(_Planner):
    """Draft-model draft lengths for one request; switched off for good when it does not pay."""

    def __init__(self, costs: StepCosts, draft_min: int, draft_max: int, adaptive: bool = True) -> None:
        super().__init__(costs, draft_min, draft_max, adaptive)
        self._accepted = PRIOR_ACCEPT * PRIOR_WEIGHT
        self._rejected = (1.0 - PRIOR_ACCEPT) * PRIOR_WEIGHT
        self.steps = 0
        self.switched_off = False
        self._can_pay = model_can_pay(costs, draft_min, draft_max)

    @property
    def accept(self) -> float:
        """Return the estimated chance that a draft token is accepted (given the previous one was)."""
        return self._accepted / (self._accepted + self._rejected)

    def observe(self, level: int, hit: bool) -> None:
        """Nothing to learn: model drafts are judged only when verified."""

    def length(self, level: int, cap: int) -> int:
        """Return how many tokens to draft now (0: none), at most ``cap``."""
        most = min(self.draft_max, cap)
        if most <= 0 or self.switched_off:
            return 0
        if not self.adaptive:
            return most
        accept = self.accept
        choice, gain = self.best(lambda drafts: expected_tokens(accept, drafts), most)
        if gain >= PAYS or (self._can_pay and self.steps < MIN_EVIDENCE):
            return choice
        self.switched_off = True
        return 0

    def record(self, drafted: int, accepted: int) -> None:
        """Learn from a verified draft: its first ``accepted`` of ``drafted`` tokens were right."""
        if drafted <= 0:
            return
        # One observation per judged token; tokens after a rejection were never judged.
        for _ in range(accepted):
            self._accepted = self._accepted * DECAY + 1.0
            self._rejected *= DECAY
        if accepted < drafted:
            self._accepted *= DECAY
            self._rejected = self._rejected * DECAY + 1.0
        self.steps += 1


def lookup_can_pay(costs: StepCosts, draft_min: int, draft_max: int) -> bool:
    """Tell whether any draft length could pay at these batch costs (if not, lookup never drafts)."""
    return bool(_Planner(costs, draft_min, draft_max, adaptive=True).candidates(draft_max))


def model_can_pay(costs: StepCosts, draft_min: int, draft_max: int) -> bool:
    """Tell whether a draft model with these costs could pay at a likely acceptance rate."""
    planner = _Planner(costs, draft_min, draft_max, adaptive=True)
    return planner.best(lambda drafts: expected_tokens(LIKELY_ACCEPT, drafts), draft_max)[1] >= PAYS


def _bucket(level: int) -> int:
    """Return the index in LEVELS of the level that holds alignment ``level`` (>= 1)."""
    for index in range(len(LEVELS) - 1, 0, -1):
        if level >= LEVELS[index]:
            return index
    return 0
