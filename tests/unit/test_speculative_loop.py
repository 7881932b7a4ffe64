"""The speculative loop on a fake model: its output is plain decoding's, token for token.

The fake target computes logits from the token history (hashed noise plus an
"induction" pull towards what followed the last two tokens before, so that
lookup drafts are often right and sometimes wrong). The plain reference below
is the engine's plain loop (worker.engine.Engine._plain) on the same fake.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from reame.shared.protocol import Delta, FinishReason, Message
from reame.worker.output import Output
from reame.worker.speculative.adaptive import LookupController, ModelController, StepCosts
from reame.worker.speculative.draft_model import ModelDrafter
from reame.worker.speculative.loop import Controller, Drafter, Tally, generate
from reame.worker.speculative.ngram import LookupDrafter
from reame.worker.speculative.verify import draw, softmax
from reame.worker.stops import TextStream
from tests.unit.fakes import ALPHABET, EOG, VOCAB, FakeKv, Logits, ModelFn, fake_model

# Cheap batches, so that adaptive lookup drafts often: the loop is what is tested here.
CHEAP = StepCosts.from_timings({1: 1.0, 2: 1.05, 4: 1.1, 8: 1.2, 16: 1.3})


class GreedyChooser:
    def choose(self, logits: Logits) -> int:
        return int(np.argmax(logits))


class SamplingChooser:
    """Temperature sampling with one uniform per chosen token, as worker.speculative.chooser does."""

    def __init__(self, seed: int, temperature: float = 1.0) -> None:
        self._rng = np.random.default_rng(seed)
        self._temperature = temperature

    def choose(self, logits: Logits) -> int:
        return draw(softmax(logits / self._temperature), float(self._rng.random()))


def piece(token: int) -> bytes:
    return b"" if token == EOG else ALPHABET[token].encode()


class Run:
    """One generation: its messages, the tokens emitted, the tally and the target's cache."""

    def __init__(self, budget: int, stops: Sequence[str] = ()) -> None:
        self.messages: list[Message] = []
        self.emitted: list[int] = []

        def traced_piece(token: int) -> bytes:
            self.emitted.append(token)
            return piece(token)

        self.out = Output("r", budget, TextStream(stops), traced_piece, lambda t: t == EOG, self.messages.append)
        self.tally = Tally()
        self.kv: FakeKv | None = None

    @property
    def text(self) -> str:
        return "".join(m.text for m in self.messages if isinstance(m, Delta))


def plain(prompt: list[int], model: ModelFn, chooser: GreedyChooser | SamplingChooser, budget: int,
          stops: Sequence[str] = ()) -> Run:
    """Decode as worker.engine.Engine._plain does."""
    run = Run(budget, stops)
    kv = run.kv = FakeKv(model)
    kv.append(prompt, logits_last=True)
    while not run.out.ended:
        token = chooser.choose(kv.logits(-1))
        if run.out.take(token):
            kv.append((token,), logits_last=True)
    run.out.close()
    return run


def speculative(
    prompt: list[int], model: ModelFn, chooser: GreedyChooser | SamplingChooser, budget: int,
    drafter: Drafter, controller: Controller, stops: Sequence[str] = (), check: Callable[[], None] = lambda: None,
    max_batch: int = 64,
) -> Run:
    run = Run(budget, stops)
    kv = run.kv = FakeKv(model)
    kv.append(prompt, logits_last=True)
    drafter.begin(prompt, check)
    run.tally = generate(kv, chooser, drafter, controller, run.out, check, max_batch)
    run.out.close()
    return run


def lookup(draft_max: int = 7, adaptive: bool = False) -> tuple[LookupDrafter, LookupController]:
    return LookupDrafter(), LookupController(CHEAP, 1, draft_max, adaptive)


def model_drafter(seed: int, draft_max: int = 5, adaptive: bool = False) -> tuple[ModelDrafter, ModelController]:
    return ModelDrafter(FakeKv(fake_model(seed)), n_batch=8), ModelController(CHEAP, 1, draft_max, adaptive)


def prompts(count: int, seed: int = 1) -> list[list[int]]:
    """Prompts with repeated phrases, so that lookups find matches."""
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        phrase = [rng.randrange(EOG) for _ in range(rng.randint(3, 8))]
        noise = [rng.randrange(EOG) for _ in range(rng.randint(0, 6))]
        found.append(phrase + noise + phrase + [rng.randrange(EOG)])
    return found


def assert_same(spec: Run, ref: Run) -> None:
    assert spec.emitted == ref.emitted
    assert spec.messages == ref.messages
    assert spec.out.finish is ref.out.finish
    assert spec.out.produced == ref.out.produced


def assert_cache_holds_the_output(run: Run, prompt: list[int]) -> None:
    """The target's cache holds the prompt and the emitted tokens, never a rejected draft."""
    assert run.kv is not None
    held = list(run.kv.tokens[len(prompt) :])
    assert run.kv.tokens[: len(prompt)] == tuple(prompt)
    assert held == run.emitted[: len(held)]
    assert len(held) >= len(run.emitted) - 1


@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("draft_max", [1, 3, 7, 15])
def test_greedy_lookup_equals_plain(draft_max: int, adaptive: bool) -> None:
    model = fake_model()
    drafted = 0
    for prompt in prompts(25):
        ref = plain(prompt, model, GreedyChooser(), 40)
        drafter, controller = lookup(draft_max, adaptive)
        spec = speculative(prompt, model, GreedyChooser(), 40, drafter, controller)
        assert_same(spec, ref)
        assert_cache_holds_the_output(spec, prompt)
        drafted += spec.tally.drafted
    assert drafted > 0


@pytest.mark.parametrize("draft_seed", [0, 7])  # the target's own weights (all accepted), other weights
def test_greedy_model_drafts_equal_plain(draft_seed: int) -> None:
    model = fake_model()
    accepted = drafted = 0
    for prompt in prompts(15, seed=2):
        ref = plain(prompt, model, GreedyChooser(), 30)
        drafter, controller = model_drafter(draft_seed)
        spec = speculative(prompt, model, GreedyChooser(), 30, drafter, controller)
        assert_same(spec, ref)
        assert_cache_holds_the_output(spec, prompt)
        accepted += spec.tally.accepted
        drafted += spec.tally.drafted
    assert drafted > 0
    if draft_seed == 0:
        assert accepted == pytest.approx(drafted, rel=0.2)  # the same model guesses right
    else:
        assert 0 < accepted < drafted


def test_stop_strings_and_max_tokens_inside_drafts() -> None:
    """Every way of ending, wherever it falls in a draft, ends exactly as plain decoding does."""
    model = fake_model()
    prompt = prompts(1, seed=3)[0] * 3
    full = plain(prompt, model, GreedyChooser(), 40)
    assert len(full.text) >= 20
    for budget in range(0, 41):
        ref = plain(prompt, model, GreedyChooser(), budget)
        spec = speculative(prompt, model, GreedyChooser(), budget, *lookup(7))
        assert_same(spec, ref)
        assert spec.out.produced == min(budget, full.out.produced)
    for start in range(len(full.text) - 3):
        stops = [full.text[start : start + 3]]
        ref = plain(prompt, model, GreedyChooser(), 40, stops)
        spec = speculative(prompt, model, GreedyChooser(), 40, *lookup(7), stops=stops)
        assert_same(spec, ref)
        assert spec.out.finish is FinishReason.STOP
        assert spec.text == full.text[: full.text.index(stops[0])]


def test_end_of_generation_drafted_ends_the_text() -> None:
    """A draft that contains the end-of-generation token stops where plain decoding stops."""
    model = fake_model(eog_bias=1.0)  # ends come soon
    ended = 0
    for prompt in prompts(20, seed=4):
        prompt = [*prompt, EOG, *prompt]  # an end in the prompt: lookups may draft it
        ref = plain(prompt, model, GreedyChooser(), 40)
        spec = speculative(prompt, model, GreedyChooser(), 40, *lookup(7))
        assert_same(spec, ref)
        ended += ref.out.finish is FinishReason.STOP
    assert ended > 0


class Recording:
    """Wrap a drafter and remember each draft with the output position it guesses from."""

    def __init__(self, inner: Drafter) -> None:
        self.inner = inner
        self.pushed = 0
        self.drafts: list[tuple[int, tuple[int, ...]]] = []

    def begin(self, prompt: Sequence[int], check: Callable[[], None]) -> None:
        self.inner.begin(prompt, check)

    def push(self, token: int) -> None:
        self.pushed += 1
        self.inner.push(token)

    def peek(self) -> tuple[int, int]:
        return self.inner.peek()

    def draft(self, limit: int) -> tuple[int, ...]:
        guesses = self.inner.draft(limit)
        if guesses:
            self.drafts.append((self.pushed, guesses))
        return guesses


@pytest.mark.parametrize("stops", [(), ("ca", "j", "ab")])
def test_counters_add_up(stops: tuple[str, ...]) -> None:
    model = fake_model(eog_bias=0.0)
    for prompt in prompts(30, seed=5):
        drafter = Recording(LookupDrafter())
        controller = LookupController(CHEAP, 1, 5, adaptive=False)
        spec = speculative(prompt, model, GreedyChooser(), 30, drafter, controller, stops=stops)
        tally = spec.tally
        assert tally.steps == len(drafter.drafts)
        assert tally.drafted == sum(len(guesses) for _, guesses in drafter.drafts)
        # Accepted: the drafted tokens that are in the output where they were guessed.
        accepted = 0
        for at, guesses in drafter.drafts:
            for guess, token in zip(guesses, spec.emitted[at:], strict=False):
                if guess != token:
                    break
                accepted += 1
        assert tally.accepted == accepted <= tally.drafted
        assert tally.accepted <= spec.out.produced
        assert spec.kv is not None
        assert len(spec.kv.decodes) == 1 + tally.steps + tally.plain_steps


class WrongAt:
    """A drafter that copies the plain output but guesses wrong at chosen positions."""

    def __init__(self, truth: list[int], wrong: set[int], length: int) -> None:
        self._truth = truth
        self._wrong = wrong
        self._length = length
        self._at = 0
        self.drafts: list[tuple[int, ...]] = []

    def begin(self, prompt: Sequence[int], check: Callable[[], None]) -> None:
        self._at = 0

    def push(self, token: int) -> None:
        self._at += 1

    def peek(self) -> tuple[int, int]:
        return 1, -1

    def draft(self, limit: int) -> tuple[int, ...]:
        guesses = []
        for i in range(self._at, min(self._at + limit, len(self._truth))):
            guesses.append((self._truth[i] + 1) % EOG if i in self._wrong else self._truth[i])
        self.drafts.append(tuple(guesses))
        return tuple(guesses)


def test_generation_goes_on_correctly_after_a_rejection() -> None:
    model = fake_model()
    prompt = prompts(1, seed=6)[0]
    ref = plain(prompt, model, GreedyChooser(), 30)
    truth = ref.emitted
    drafter = WrongAt(truth, wrong={3, 4, 9, 17}, length=6)
    spec = speculative(prompt, model, GreedyChooser(), 30, drafter, LookupController(CHEAP, 6, 6, adaptive=False))
    assert_same(spec, ref)
    assert_cache_holds_the_output(spec, prompt)
    assert spec.tally.drafted > spec.tally.accepted > 0
    assert any(guess != token for guesses in drafter.drafts for guess, token in zip(guesses, truth[1:], strict=False))


def test_check_runs_before_every_decode() -> None:
    model = fake_model()
    prompt = prompts(1, seed=8)[0]
    calls: list[int] = []

    class Cancelled(Exception):
        pass

    def check() -> None:
        calls.append(1)
        if len(calls) == 4:
            raise Cancelled

    drafter, controller = lookup(4)
    with pytest.raises(Cancelled):
        speculative(prompt, model, GreedyChooser(), 40, drafter, controller, check=check)
    assert len(calls) == 4


def test_nothing_is_drafted_past_max_tokens_or_the_batch() -> None:
    model = fake_model()
    prompt = prompts(1, seed=9)[0] * 2
    spec = speculative(prompt, model, GreedyChooser(), 6, *lookup(15), max_batch=4)
    assert spec.kv is not None
    assert max(spec.kv.decodes[1:]) <= 4
    assert spec.tally.drafted <= 6


@pytest.mark.parametrize("seed", range(8))
def test_sampled_output_is_plain_sampling_drawn_from_the_same_uniforms(seed: int) -> None:
    """With one uniform per position, speculation changes how fast tokens come, not which."""
    model = fake_model()
    for prompt in prompts(5, seed=seed):
        ref = plain(prompt, model, SamplingChooser(seed, 0.7), 30)
        spec = speculative(prompt, model, SamplingChooser(seed, 0.7), 30, *lookup(5))
        assert_same(spec, ref)
        spec = speculative(prompt, model, SamplingChooser(seed, 0.7), 30, *model_drafter(3))
        assert_same(spec, ref)


def test_sampled_distribution_matches_plain_sampling() -> None:
    """Independent draws: each of the first three tokens is distributed as under plain sampling.

    The exact marginals are computed from the fake model; plain and speculative
    samples (different seeds) are each held to them with a total-variation bound
    well above sampling noise (about 0.02 here); a sampler that is off by a little
    (AcceptingChooser) is caught.
    """
    model = fake_model(copy_bias=2.0)
    prompt = [1, 2, 3, 4, 1, 2, 3]
    exact = [np.zeros(VOCAB) for _ in range(3)]

    def walk(history: list[int], depth: int, prob: float) -> None:
        probs = softmax(model(history))
        for token in range(VOCAB):
            exact[depth][token] += prob * probs[token]
            if depth < 2 and token != EOG:
                walk([*history, token], depth + 1, prob * float(probs[token]))

    walk(list(prompt), 0, 1.0)
    for depth in (1, 2):  # after an end nothing follows: count it as an end again
        exact[depth][EOG] += 1.0 - exact[depth].sum()
    n = 3000
    for name in ("plain", "lookup", "always accept"):
        counts = [np.zeros(VOCAB) for _ in range(3)]
        for i in range(n):
            if name == "plain":
                run = plain(prompt, model, SamplingChooser(i), 3)
            elif name == "lookup":
                run = speculative(prompt, model, SamplingChooser(n + i), 3, *lookup(3))
            else:
                run = speculative(prompt, model, AcceptingChooser(2 * n + i), 3, *lookup(3))
            tokens = _with_end(run)
            for depth in range(3):
                counts[depth][tokens[min(depth, len(tokens) - 1)]] += 1
        tv = max(0.5 * float(np.abs(c / n - e).sum()) for c, e in zip(counts, exact, strict=True))
        if name == "always accept":
            assert tv > 0.1  # the test can tell a wrong rule
        else:
            assert tv < 0.05, name


class AcceptingChooser(SamplingChooser):
    """A wrong sampler, as a bad acceptance rule would be: it turns tokens 5 and 6 into the guess 4."""

    def choose(self, logits: Logits) -> int:
        token = super().choose(logits)
        return 4 if token in (4, 5, 6) else token


def _with_end(run: Run) -> list[int]:
    """Return the emitted tokens, with EOG appended if the text ended on it."""
    return run.emitted + ([EOG] if run.out.finish is FinishReason.STOP else [])


def test_zero_budget_evaluates_nothing() -> None:
    model = fake_model()
    prompt = prompts(1)[0]
    spec = speculative(prompt, model, GreedyChooser(), 0, *lookup())
    assert spec.emitted == [] and spec.messages == []
    assert spec.kv is not None and spec.kv.decodes == [len(prompt)]
