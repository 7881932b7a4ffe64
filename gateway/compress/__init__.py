"""Prompt compression: fewer tokens for the same facts, deterministic and model-free.

Modes (shared.modes.CompressMode), each including the one before:

- ``off``: the text as given;
- ``lossless``: :mod:`normalize` (whitespace, Unicode, HTML, markdown noise) then
  :mod:`dedupe` (repeated lines, paragraphs and boilerplate). No word of content goes;
- ``facts``: :mod:`facts` drops filler and keeps every sentence, item or row that may
  hold a fact, and :mod:`telegraph` says what is kept in note style. No number,
  negation or condition is ever dropped or altered;
- ``query``: :mod:`query` keeps, of the facts, what is relevant to a question, under a
  token budget. Depends on the question, so it is not cache-stable.

``off``, ``lossless`` and ``facts`` are pure functions of the text: a document
compresses to the same bytes whatever question follows it, so its KV cache can be
reused. Every mode is idempotent: compressing its own output changes nothing. Text
that looks like code or structured data (:func:`normalize.looks_like_code`) is left
as it is in every mode, and text that is not English (:func:`lexicon.is_english`) gets
``lossless`` at most, a whole document or one paragraph of it
(:func:`facts.not_english`): the facts rules know English words only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from reame.gateway.compress import lexicon
from reame.gateway.compress.dedupe import dedupe
from reame.gateway.compress.facts import facts
from reame.gateway.compress.fixpoint import fixpoint
from reame.gateway.compress.normalize import looks_like_code, normalize
from reame.gateway.compress.query import rank
from reame.gateway.compress.telegraph import telegraph
from reame.shared.modes import CompressMode, choices

# Each rule only removes text, so a few passes reach a text that no rule changes.
MAX_PASSES: Final = 4


def compress(
    text: str,
    mode: CompressMode | str,
    *,
    question: str = "",
    budget: int = 0,
    count: Callable[[str], int] | None = None,
) -> str:
    """Compress ``text`` in ``mode``; ``question``, ``budget`` and ``count`` serve ``query`` only."""
    try:
        mode = CompressMode(mode)
    except ValueError:
        raise ValueError(f"unknown compression mode {mode!r}; expected one of {choices(CompressMode)}") from None
    if mode == CompressMode.OFF or looks_like_code(text):
        return text
    # The facts rules know English words only: in another language a negation would look like filler.
    stage = _lossless if mode == CompressMode.LOSSLESS or not lexicon.is_english(text) else _facts
    text = fixpoint(stage, text, MAX_PASSES)
    if mode == CompressMode.QUERY:
        text = rank(text, question, budget, count or approximate_tokens)
    return text


def approximate_tokens(text: str) -> int:
    """Estimate a token count without a tokenizer (about four bytes a token in English)."""
    return (len(text.encode("utf-8")) + 3) // 4


def _lossless(text: str) -> str:
    return dedupe(normalize(text))


def _facts(text: str) -> str:
    return telegraph(facts(dedupe(normalize(text))))


