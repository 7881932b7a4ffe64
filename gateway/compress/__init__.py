"""Prompt compression: fewer tokens for the same facts, deterministic and model-free.

Modes (shared.modes.CompressMode), each including the one before:

- ``off``: the text as given;
- ``lossless``: :mod:`normalize` (whitespace, Unicode, HTML, markdown noise) then
  :mod:`dedupe` (repeated lines, paragraphs and boilerplate). No word of content goes;
- ``facts``: :mod:`facts` drops filler and keeps every sentence, item or row that may
  hold a fact, and :mod:`telegraph` says what is kept in note style. No number,
  negation or condition is ever dropped or altered;
- ``query``: :mod:`query` keeps, of the facts, what is relevant to a question, under a
  token budget. Depends on the question, so it is not cache-stable;
- ``auto``: a text is compressed as in ``facts``; :mod:`messages` adds, before the
  final question, the lines of the original text that ``query`` ranks relevant
  (:func:`excerpts`), so the document stays cache-stable.

``off``, ``lossless`` and ``facts`` are pure functions of the text: a document
compresses to the same bytes whatever question follows it, so its KV cache can be
reused. Every mode is idempotent: compressing its own output changes nothing. Text
that looks like code or structured data (:func:`normalize.looks_like_code`) is left
as it is in every mode, and text that is not English (:func:`lexicon.is_english`) gets
``lossless`` at most, a whole document or one paragraph of it
(:func:`facts.not_english`): the facts rules know English words only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from reame.gateway.compress import lexicon
from reame.gateway.compress.dedupe import dedupe
from reame.gateway.compress.facts import facts
from reame.gateway.compress.fixpoint import Overtime, fixpoint
from reame.gateway.compress.normalize import looks_like_code, normalize
from reame.gateway.compress.query import rank
from reame.gateway.compress.telegraph import telegraph
from reame.shared.modes import CompressMode, choices

# Each rule only removes text, so a few passes reach a text that no rule changes.
MAX_PASSES: Final = 4
# Safety nets against hostile input, which no document that fits a served context
# reaches (a 32k-token context holds ~128 KB of English). Longer than FACTS_MAX_CHARS,
# a text gets ``lossless`` at most (``facts`` costs ~10 µs a character on a small CPU,
# ``lossless`` ~1 µs); longer than MAX_CHARS it is sent as it is. No pass starts after
# TIME_BUDGET_S (ordinary documents take well under a second): the text is then sent
# ``lossless``-normalised. Every rule is linear, so a pass on a capped text is bounded.
FACTS_MAX_CHARS: Final = 256 * 1024
MAX_CHARS: Final = 1024 * 1024
TIME_BUDGET_S: Final = 5.0

log = logging.getLogger(__name__)


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
    if mode == CompressMode.OFF or len(text) > MAX_CHARS or looks_like_code(text):
        return text
    deadline = time.monotonic() + TIME_BUDGET_S
    capped = len(text) > FACTS_MAX_CHARS
    # The facts rules know English words only: in another language a negation would look like filler.
    if mode == CompressMode.AUTO:
        mode = CompressMode.FACTS  # the document part; the excerpts are added by messages
    stage = _lossless if mode == CompressMode.LOSSLESS or capped or not lexicon.is_english(text) else _facts
    try:
        out = fixpoint(stage, text, MAX_PASSES, deadline)
        if mode == CompressMode.QUERY and not capped:
            if time.monotonic() > deadline:
                raise Overtime(out)
            out = rank(out, question, budget, count or approximate_tokens)
    except Overtime as over:
        log.warning("compression of %d characters ran past %.0f s: sent lossless", len(text), TIME_BUDGET_S)
        return over.text if stage is _lossless else _lossless(text)
    return out


def excerpts(
    text: str, question: str, budget: int, count: Callable[[str], int] | None = None
) -> str:
    """Return the lines of ``text`` relevant to ``question``, at most ``budget`` tokens ("" when none are).

    Ranked over the ``lossless`` form, not ``facts``: every word of the original is
    there to match the question, and the model reads each fact as the document said it.
    """
    if not text.strip() or len(text) > MAX_CHARS or looks_like_code(text):
        return ""
    deadline = time.monotonic() + TIME_BUDGET_S
    try:
        base = fixpoint(_lossless, text, MAX_PASSES, deadline)
    except Overtime as over:
        base = over.text
    return rank(base, question, budget, count or approximate_tokens, relevant_only=True).strip()


def approximate_tokens(text: str) -> int:
    """Estimate a token count without a tokenizer (about four bytes a token in English)."""
    return (len(text.encode("utf-8")) + 3) // 4


def _lossless(text: str) -> str:
    return dedupe(normalize(text))


def _facts(text: str) -> str:
    return telegraph(facts(dedupe(normalize(text))))


