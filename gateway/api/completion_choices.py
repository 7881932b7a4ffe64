"""``n`` and ``best_of`` on /v1/completions: which generations run and which become choices.

Each prompt gets ``best_of`` generations (``n`` when absent), run in turn like chat's
choices (gateway.api.choices): the dispatcher sends the later ones to the worker holding the
prompt's KV state, so each prompt is read once and counted once in ``usage``; generation
j of a prompt samples with seed + j. Prompt i's choices are numbered i*n to i*n + n - 1,
as OpenAI numbers them. With ``best_of`` > ``n`` the n generations with the highest
log-probability per token (OpenAI's "best") are returned, best first, and ``usage`` counts
the tokens of every generation, as OpenAI bills them; OpenAI cannot stream those either.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from reame.gateway.api.choices import MAX_CHOICES
from reame.gateway.api.logprobs import legacy
from reame.gateway.api.responses import Choice
from reame.gateway.http.errors import invalid
from reame.shared.protocol import TokenLogprob


def count_candidates(fields: dict[str, Any], n: int, stream: bool) -> int:
    """Return ``best_of`` (``n`` if absent), or raise a 400 naming it."""
    best_of = fields.get("best_of")
    if best_of is None:
        return n
    if isinstance(best_of, bool) or not isinstance(best_of, int) or not 1 <= best_of <= MAX_CHOICES:
        raise invalid("best_of", f"best_of must be an integer from 1 to {MAX_CHOICES}")
    if best_of < n:
        raise invalid("best_of", f"best_of ({best_of}) must be at least n ({n})")
    if best_of > n and stream:
        raise invalid("best_of", "best_of greater than n cannot be streamed", "unsupported_parameter")
    return best_of


def worker_logprobs(asked: int | None, n: int, best_of: int) -> int | None:
    """Return the ``logprobs`` to ask the worker for: at least each token's own to rank by."""
    return 0 if asked is None and best_of > n else asked


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One finished generation of a prompt."""

    text: str
    finish_reason: str
    logprobs: list[TokenLogprob] | None


def score(candidate: Candidate) -> float:
    """Return the mean log-probability of the candidate's tokens; an empty one ranks last."""
    entries = candidate.logprobs or []
    return sum(e.logprob for e in entries) / len(entries) if entries else -math.inf


def select(
    prompts: list[str], candidates: list[Candidate], n: int, echo: bool, logprobs: bool
) -> list[Choice]:
    """Return the choices: per prompt (``len(candidates) // len(prompts)`` candidates each) its n best."""
    per_prompt = len(candidates) // len(prompts)
    choices = []
    for i, prompt in enumerate(prompts):
        group = candidates[i * per_prompt:(i + 1) * per_prompt]
        if per_prompt > n:  # sorted() is stable: equal scores keep the generation order
            group = sorted(group, key=score, reverse=True)[:n]
        for rank, c in enumerate(group):
            entries = legacy(c.logprobs) if logprobs and c.logprobs is not None else None
            choices.append(Choice(i * n + rank, prompt + c.text if echo else c.text, c.finish_reason, entries))
    return choices
