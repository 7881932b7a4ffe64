"""Model drafting: a small model with the target's vocabulary proposes its greedy continuation.

The draft model has its own context. Its KV cache follows the accepted text: at
each draft it catches up with the tokens accepted since the last one (cutting
its own rejected guesses with llama_memory_seq_rm through worker.kv), then
decodes k tokens one at a time. Its guesses are deterministic (argmax), so the
verification treats them as one-hot proposals (worker.speculative.verify).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Protocol

import numpy as np

from reame.worker.kv import common_prefix, prefill_chunks
from reame.worker.speculative.loop import Evaluator
from reame.worker.speculative.ngram import NO_GUESS

VOCAB_SAMPLES: Final = 1024  # token texts compared between target and draft at start-up


class Vocabulary(Protocol):
    """What the start-up check reads from a model (worker.model.Model)."""

    n_vocab: int

    def token_text(self, token: int) -> str: ...


def vocabulary_problem(target: Vocabulary, draft: Vocabulary) -> str | None:
    """Return why ``draft`` cannot draft for ``target`` (different vocabularies), or None."""
    if target.n_vocab != draft.n_vocab:
        return (
            f"the draft model's vocabulary has {draft.n_vocab} tokens, the target's {target.n_vocab}: "
            "a draft model must use the same tokenizer as the model it drafts for"
        )
    n = target.n_vocab
    step = max(1, n // VOCAB_SAMPLES)
    for token in sorted({*range(0, n, step), *range(max(0, n - 16), n)}):
        ours, theirs = target.token_text(token), draft.token_text(token)
        if ours != theirs:
            return (
                f"token {token} is {ours!r} for the target but {theirs!r} for the draft model: "
                "a draft model must use the same tokenizer as the model it drafts for"
            )
    return None


class ModelDrafter:
    """Draft with a second model whose KV cache is kept in step with the accepted text."""

    def __init__(self, kv: Evaluator, n_batch: int) -> None:
        self._kv = kv
        self._n_batch = n_batch
        self._history: list[int] = []
        self._synced = 0  # leading history tokens that sit in the draft's KV cache
        self._guesses: list[int] = []  # evaluated after them: guesses not yet judged

    def begin(self, prompt: Sequence[int], check: Callable[[], None]) -> None:
        """Read the prompt into the draft model, keeping what its cache shares with it."""
        self._history = list(prompt)
        self._guesses = []
        keep = common_prefix(self._kv.tokens, prompt)
        if not self._kv.truncate(keep):
            keep = 0  # the cache was emptied instead
        self._synced = keep
        self._catch_up(check, logits_last=False)

    def push(self, token: int) -> None:
        """Record a token of the output."""
        self._history.append(token)

    def peek(self) -> tuple[int, int]:
        """Return no guess: the model's guesses cost a decode, so they are made only to be verified."""
        return 0, NO_GUESS

    def draft(self, limit: int) -> tuple[int, ...]:
        """Propose the draft model's greedy continuation of up to ``limit`` tokens."""
        if limit <= 0:
            return ()
        self._sync()
        kv = self._kv
        guesses: list[int] = []
        while True:
            guess = int(np.argmax(kv.logits(-1)))
            guesses.append(guess)
            if len(guesses) == limit:
                break
            kv.append((guess,), logits_last=True)
            self._guesses.append(guess)
        return tuple(guesses)

    def _sync(self) -> None:
        """Bring the draft's cache to the history, with logits after its last token."""
        history = self._history
        kept = 0
        for guess in self._guesses:
            at = self._synced + kept
            if at >= len(history) or history[at] != guess:
                break
            kept += 1
        self._synced += kept
        self._guesses = []
        if self._synced >= len(history):
            self._synced = len(history) - 1  # logits are needed: evaluate the last token again
        if len(self._kv) < self._synced:  # the cache was emptied after a failure
            self._synced = common_prefix(self._kv.tokens, history)
        if len(self._kv) > self._synced and not self._kv.truncate(self._synced):
            self._synced = 0
        self._catch_up(lambda: None, logits_last=True)

    def _catch_up(self, check: Callable[[], None], logits_last: bool) -> None:
        history = self._history
        for start, end in prefill_chunks(self._synced, len(history), self._n_batch):
            check()
            self._kv.append(history[start:end], logits_last=logits_last and end == len(history))
        self._synced = len(history)
