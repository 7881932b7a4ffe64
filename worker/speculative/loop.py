"""The speculative decode loop: draft, verify in one batch, keep what the target agrees with.

Each step takes the token chosen last (t), asks the drafter for up to k guesses
d1..dk of what follows, and evaluates t, d1..dk in one batch with logits at every
position. Row i of that batch is the target's distribution after d_i (row 0:
after t). The target's own token is chosen from row 0; if it is d1, d1 is
emitted and the token after it is chosen from row 1, and so on. The first
disagreement ends the step: the target's token replaces the draft (it is the
next t) and the positions of the rejected drafts leave the KV cache. If every
draft is accepted, row k gives one more token for free (the bonus). How many
tokens to draft, if any, is the controller's call (worker.speculative.adaptive);
it sees every output token together with the drafter's guess for it, drafted or
not, so it learns how good the guesses are even while decoding plainly.

Because the token at every position is chosen by the same :class:`Chooser` from
the target's logits in the same order as plain decoding would (one uniform per
position, see worker.speculative.verify), the output is plain decoding's output,
up to the engine's batch numerics. Tokens are emitted one by one through
worker.output.Output, so stop strings, max_tokens and Deltas behave as without
speculation. Nothing here touches llama.cpp: the target, the drafter, the
chooser and the controller are passed in, and the tests pass fakes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from reame.worker.output import Output

Logits = npt.NDArray[np.float32]


class RollbackError(RuntimeError):
    """Rejected draft positions could not be removed from the KV cache (it has been emptied)."""


class Evaluator(Protocol):
    """A model's KV cache as the loop drives it (worker.kv.KvCache)."""

    def __len__(self) -> int: ...

    @property
    def tokens(self) -> tuple[int, ...]: ...

    def append(self, tokens: Sequence[int], logits_last: bool) -> None: ...

    def evaluate(self, tokens: Sequence[int]) -> None: ...

    def logits(self, index: int) -> Logits: ...

    def truncate(self, length: int) -> bool: ...


class Chooser(Protocol):
    """Picks the target's token from a logits row, as the request's sampling asks, and remembers it."""

    def choose(self, logits: Logits) -> int: ...


class Drafter(Protocol):
    """Guesses what follows the text so far."""

    def begin(self, prompt: Sequence[int], check: Callable[[], None]) -> None: ...

    def push(self, token: int) -> None: ...

    def peek(self) -> tuple[int, int]:
        """Return (confidence level, guess) for the next token, free of cost; level 0: no guess."""
        ...

    def draft(self, limit: int) -> tuple[int, ...]: ...


class Controller(Protocol):
    """Decides the draft length of each step (worker.speculative.adaptive)."""

    @property
    def switched_off(self) -> bool: ...

    def observe(self, level: int, hit: bool) -> None: ...

    def length(self, level: int, cap: int) -> int: ...

    def record(self, drafted: int, accepted: int) -> None: ...


@dataclasses.dataclass
class Tally:
    """What speculation did in one request."""

    steps: int = 0  # target decodes that verified a draft
    plain_steps: int = 0  # one-token decodes (nothing drafted)
    drafted: int = 0  # draft tokens the target evaluated
    accepted: int = 0  # ...that became output tokens


def generate(
    target: Evaluator,
    chooser: Chooser,
    drafter: Drafter,
    controller: Controller,
    out: Output,
    check: Callable[[], None],
    max_batch: int,
) -> Tally:
    """Decode from the logits the prompt left until ``out`` ends; return the tally.

    ``check`` runs before every decode (cancel, deadline); ``max_batch`` bounds a
    verification batch. The drafter must have begun with the prompt.
    """
    tally = Tally()
    if out.ended:
        return tally
    token = chooser.choose(target.logits(-1))
    while out.take(token):
        _advance(drafter, controller, token)
        check()
        # Drafts past max_tokens could never be emitted (and the context ends there too).
        cap = min(out.remaining, max_batch - 1)
        length = controller.length(drafter.peek()[0], cap) if cap > 0 else 0
        guesses = drafter.draft(length)[:length] if length > 0 else ()
        if guesses:
            token = _verify(target, chooser, drafter, controller, out, tally, token, guesses)
        else:
            target.append((token,), logits_last=True)
            tally.plain_steps += 1
            token = chooser.choose(target.logits(-1))
    return tally


def _advance(drafter: Drafter, controller: Controller, token: int) -> None:
    """Show the controller how the drafter's guess fared, then extend the drafter's text."""
    level, guess = drafter.peek()
    controller.observe(level, token == guess)
    drafter.push(token)


def _verify(
    target: Evaluator,
    chooser: Chooser,
    drafter: Drafter,
    controller: Controller,
    out: Output,
    tally: Tally,
    token: int,
    guesses: tuple[int, ...],
) -> int:
    """Evaluate ``token`` and ``guesses`` in one batch, emit the accepted run; return the next token."""
    base = len(target)
    target.evaluate((token, *guesses))
    tally.steps += 1
    tally.drafted += len(guesses)
    produced = out.produced
    accepted = 0
    for row, guess in enumerate(guesses):
        token = chooser.choose(target.logits(row))
        if token != guess:
            break
        accepted += 1
        if not out.take(guess):
            break
        _advance(drafter, controller, guess)
    else:
        token = chooser.choose(target.logits(len(guesses)))  # every draft accepted: a bonus token
    tally.accepted += out.produced - produced
    if accepted < len(guesses) and not target.truncate(base + 1 + accepted):
        raise RollbackError("the KV cache cannot drop rejected draft positions")
    controller.record(len(guesses), accepted)
    return token
