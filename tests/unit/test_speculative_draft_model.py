"""Model drafting: the vocabulary check, and the draft's KV cache kept in step with the text."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reame.worker.speculative.draft_model import ModelDrafter, vocabulary_problem
from reame.worker.speculative.ngram import NO_GUESS
from tests.unit.fakes import FakeKv, fake_model


@dataclass
class Vocab:
    n_vocab: int
    changed: int = -1

    def token_text(self, token: int) -> str:
        return f"<{token}{'!' if token == self.changed else ''}>"


def test_same_vocabulary_is_fine() -> None:
    assert vocabulary_problem(Vocab(50_000), Vocab(50_000)) is None


def test_a_different_size_is_refused() -> None:
    problem = vocabulary_problem(Vocab(151_936), Vocab(49_152))
    assert problem is not None
    assert "49152" in problem and "151936" in problem and "same tokenizer" in problem


def test_a_different_token_text_is_refused() -> None:
    problem = vocabulary_problem(Vocab(5000), Vocab(5000, changed=4999))
    assert problem is not None
    assert "token 4999" in problem and "same tokenizer" in problem


def greedy_next(history: list[int]) -> int:
    return int(np.argmax(fake_model(3)(history)))


def test_drafts_are_the_draft_models_greedy_continuation() -> None:
    kv = FakeKv(fake_model(3))
    drafter = ModelDrafter(kv, n_batch=4)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    drafter.begin(prompt, lambda: None)
    assert kv.tokens == tuple(prompt)
    assert kv.decodes == [4, 3, 2]  # in batches of at most n_batch, as the target reads prompts
    drafter.push(5)
    guesses = drafter.draft(4)
    history = [*prompt, 5]
    expected: list[int] = []
    for _ in range(4):
        expected.append(greedy_next(history + expected))
    assert guesses == tuple(expected)
    assert drafter.peek() == (0, NO_GUESS)
    assert drafter.draft(0) == ()


def test_rejected_guesses_leave_the_draft_cache() -> None:
    kv = FakeKv(fake_model(3))
    drafter = ModelDrafter(kv, n_batch=8)
    prompt = [4, 4, 2, 1]
    drafter.begin(prompt, lambda: None)
    drafter.push(3)
    first = drafter.draft(4)
    assert kv.tokens == (*prompt, 3, *first[:3])  # the last guess is never evaluated
    # The target accepted two guesses, then chose its own token.
    drafter.push(first[0])
    drafter.push(first[1])
    other = (first[2] + 1) % 10
    drafter.push(other)
    drafter.draft(2)
    assert kv.tokens[: len(prompt) + 4] == (*prompt, 3, first[0], first[1], other)


def test_a_new_request_keeps_the_shared_prefix() -> None:
    kv = FakeKv(fake_model(3))
    drafter = ModelDrafter(kv, n_batch=8)
    drafter.begin([1, 2, 3, 4, 5], lambda: None)
    drafter.push(6)
    drafter.draft(3)
    decodes = len(kv.decodes)
    drafter.begin([1, 2, 3, 9], lambda: None)
    assert kv.tokens == (1, 2, 3, 9)
    assert kv.decodes[decodes:] == [1]  # only the new token was read


def test_a_cache_emptied_after_a_failure_is_read_again() -> None:
    kv = FakeKv(fake_model(3))
    drafter = ModelDrafter(kv, n_batch=8)
    drafter.begin([1, 2, 3], lambda: None)
    drafter.push(4)
    kv.truncate(0)  # as KvCache.reset does after a failed decode
    drafter.push(5)
    drafter.draft(2)
    assert kv.tokens[:5] == (1, 2, 3, 4, 5)
