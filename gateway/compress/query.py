"""Keep what answers the question, under a token budget: the ``query`` mode.

Applied to the output of ``facts``. When that already fits the budget it is returned
unchanged. Otherwise every line is scored against the question:

- the sum, over the question's content words that the line shares (with the headings
  above it: a table row is read with its header row), of the word's
  rarity in the document (``log(1 + lines / lines with the word)``), so a shared
  product name weighs more than a shared "price";
- plus a small bonus when the line holds a hard fact (a number, a negation, a
  condition), since questions ask for those.

A paragraph line longer than SPLIT_CHARS is first cut into its sentences, and a
sentence longer than WINDOW_CHARS (text without punctuation) into runs of words, so
that one long paragraph is never a single unit too big for the budget: the
sentences that match are kept, whatever the layout of the document.

Lines are taken best first (ties, and lines sharing nothing with the question: in
document order) while they fit the budget, each with the headings above it so it
keeps its context, and printed in document order. A line next to a hit in its
paragraph gets half the hit's score, since a fact is often stated beside the line
that names it. Words are compared lower-cased, stemmed, and with the common business
words of a group taken as one (:mod:`synonyms`: "fee" = "cost" = "price").

The result depends on the question, so it is never cache-stable: for one-off questions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Final

from reame.gateway.compress import synonyms
from reame.gateway.compress.facts import is_hard
from reame.gateway.compress.segment import Kind, Line, join, section_ends, sentences, split_lines

HARD_BONUS: Final = 0.5
# Paragraph lines longer than this are ranked sentence by sentence; a shorter line is
# one fact already ("1. Rental rates" is not two sentences).
SPLIT_CHARS: Final = 160
# A "sentence" longer than this (no punctuation) is ranked in runs of words of about
# this size: still a few facts' worth, well under any budget.
WINDOW_CHARS: Final = 200
# What a line next to a hit gets of the hit's score (see _with_neighbours).
NEIGHBOUR_SHARE: Final = 0.5
# A line is scored with the text of the headings above it. When those texts, summed
# over the lines, exceed this many times the document (a long heading above many
# lines: only a hostile input has that), each line's words are counted once and the
# sums are built from them instead, which is linear; float sums may then differ in
# their last bit, so ordinary documents keep the exact arithmetic.
PARENT_TEXT_FACTOR: Final = 4
_SAME: Final = {
    "tel": "phone", "telephone": "phone", "mobile": "phone", "e-mail": "email", "mail": "email",
    "web": "website", "site": "website", "www": "website", "addr": "address",
}
# Words that say how to answer, not what about ("Answer in a few words, using only the document").
_FRAMING_WORDS: Final = "answer brief briefly short word words sentence line lines document text using only few please"
_WORD: Final = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)?")
_STOPWORDS: Final = frozenset("""
a about after all also am an and any are as at be been before but by can could did do does doing for from
had has have how i if in into is it its me my of on or our out so than that the their them then there these
they this those to up us was we were what when where which while who whom why will with would you your
""".split())  # noqa: SIM905 - a word list reads better as text


def rank(text: str, question: str, budget: int, count: Callable[[str], int], *, relevant_only: bool = False) -> str:
    """Return the lines of ``text`` most relevant to ``question`` that fit ``budget`` tokens.

    With ``relevant_only`` (``auto``'s excerpts, which restate lines the model also reads
    in the document) lines that share nothing with the question are never taken, and a
    text within the budget is ranked too.
    """
    if budget <= 0 or (count(text) <= budget and not relevant_only):
        return text
    lines = one_sentence_a_line(split_lines(text))
    asked = terms(question) - _FRAMING
    units = _units(lines)
    parents = _parents(lines)
    if sum(len(lines[h].text) + 1 for unit in units for h in parents[unit[0]]) <= PARENT_TEXT_FACTOR * len(text):
        # A line is read with the headings above it: a table row with its header row, an item with its title.
        texts = [_text(lines, [*parents[unit[0]], *unit]) for unit in units]
        weights = _rarity([terms(text) for text in texts], len(units))
        scores = [score(text, asked, weights) for text in texts]
    else:
        scores = _scores_linear(lines, units, parents, asked)
    scores = _with_neighbours(units, scores)
    sizes: dict[int, int] = {}  # a heading is counted once, however many lines it heads
    chosen: set[int] = set()
    used = 0
    for u in sorted(range(len(units)), key=lambda u: (-scores[u], u)):
        new = [j for j in (*parents[units[u][0]], *units[u]) if j not in chosen]
        for j in new:
            if j not in sizes:
                sizes[j] = count(lines[j].text) + 1
        cost = sum(sizes[j] for j in new)
        if used + cost > budget or (relevant_only and scores[u] <= 0):
            continue
        chosen.update(new)
        used += cost
    return join(_with_breaks(lines, chosen))


def one_sentence_a_line(lines: list[Line]) -> list[Line]:
    """Put each sentence of a long paragraph line on a line of its own, so a unit is the sentence that matters.

    A paragraph of six sentences would cost the whole budget for the one that answers,
    and a paragraph larger than the budget would never be taken at all; the sentences
    stay consecutive, so their neighbours still count.
    """
    out: list[Line] = []
    for line in lines:
        if line.kind in (Kind.TEXT, Kind.ITEM) and len(line.text) > SPLIT_CHARS:
            out.extend(Line(piece, line.kind) for sentence in sentences(line.text) for piece in _windows(sentence))
        else:
            out.append(line)
    return out


def _windows(sentence: str) -> list[str]:
    """Cut a sentence longer than WINDOW_CHARS into runs of whole words (one over-long word stays whole)."""
    if len(sentence) <= WINDOW_CHARS:
        return [sentence]
    out: list[str] = []
    run: list[str] = []
    size = 0
    for word in sentence.split():
        if run and size + 1 + len(word) > WINDOW_CHARS:
            out.append(" ".join(run))
            run, size = [], 0
        run.append(word)
        size += len(word) + (1 if size else 0)
    if run:
        out.append(" ".join(run))
    return out


def _with_neighbours(units: list[list[int]], scores: list[float]) -> list[float]:
    """Give a line part of the score of the lines next to it in its paragraph.

    A fact is often stated beside the line that names it ("Opening season:" then
    "1 April - 31 October"), so a neighbour of a hit is worth NEIGHBOUR_SHARE of it.
    Only the own scores spread, one line each way: a paragraph is not taken whole.
    """
    out = list(scores)
    for u in range(len(units)):
        for v in (u - 1, u + 1):
            if 0 <= v < len(units) and _adjacent(units[min(u, v)], units[max(u, v)]):
                out[u] = max(out[u], NEIGHBOUR_SHARE * scores[v])
    return out


def _adjacent(first: list[int], second: list[int]) -> bool:
    """Tell whether two units are consecutive lines: no blank line or heading between them."""
    return second[0] == first[-1] + 1


def _units(lines: list[Line]) -> list[list[int]]:
    """Group line indexes into the units chosen whole: one line, or one fenced code block."""
    units: list[list[int]] = []
    closes = _closing_fences(lines)
    for i, line in enumerate(lines):
        if line.kind is Kind.BLANK or (line.kind is Kind.HEADING and not is_hard(line.text)):
            continue  # a short line with a fact ("Tel: 0117 496 0291") looks like a title but is chosen on its own
        if line.kind is Kind.CODE and i > 0 and lines[i - 1].kind is Kind.CODE and not closes[i - 1]:
            units[-1].append(i)
        else:
            units.append([i])
    return units


def _closing_fences(lines: list[Line]) -> list[bool]:
    """Tell, for each line, whether it is the closing fence of its block of code lines.

    It is when the fences from the start of its run of code lines up to it, itself
    included, are an even number (two or more); counted in one pass.
    """
    out: list[bool] = []
    fences = 0
    for line in lines:
        if line.kind is not Kind.CODE:
            fences = 0
            out.append(False)
            continue
        fences += line.text.strip().startswith(("```", "~~~"))
        out.append(fences >= 2 and fences % 2 == 0)
    return out


def _text(lines: list[Line], unit: list[int]) -> str:
    return "\n".join(lines[i].text for i in unit)


def terms(text: str) -> set[str]:
    """Return the folded content words of ``text``."""
    return {fold(word) for word in _WORD.findall(text.lower()) if word not in _STOPWORDS}


def fold(word: str) -> str:
    """Fold a word to what it is compared by: "days" = "day", "fees" = "price" (see :mod:`synonyms`)."""
    return synonyms.fold(_SAME.get(word, word))


_FRAMING: Final = frozenset(fold(word) for word in _FRAMING_WORDS.split())


def score(line: str, asked: set[str], weights: dict[str, float]) -> float:
    """Score one line against the question's terms."""
    shared = asked & terms(line)
    if not shared:
        return 0.0
    return sum(weights.get(term, 0.0) for term in shared) + (HARD_BONUS if is_hard(line) else 0.0)


def _rarity(documents: list[set[str]], total: int) -> dict[str, float]:
    frequency: dict[str, int] = {}
    for words in documents:
        for word in words:
            frequency[word] = frequency.get(word, 0) + 1
    return {word: math.log(1 + total / n) for word, n in frequency.items()}


def _parents(lines: list[Line]) -> list[tuple[int, ...]]:
    """For each line, the headings whose sections contain it (outermost first).

    The headings still open are kept as they come, not looked for again above every
    line; sections nest, each heading within one of a higher level, so they are few.
    """
    ends = section_ends(lines)
    parents: list[tuple[int, ...]] = []
    above: list[int] = []
    for i, line in enumerate(lines):
        above = [h for h in above if ends[h] > i]
        parents.append(tuple(above))
        if line.kind is Kind.HEADING:
            above.append(i)
    return parents


def _scores_linear(
    lines: list[Line], units: list[list[int]], parents: list[tuple[int, ...]], asked: set[str]
) -> list[float]:
    """Score units as :func:`score` does, reading each line once (for long headings).

    A unit shares the question's terms found in its headings or its own lines; the
    headings' share, its rarity counts and its sum are worked out once per run of
    headings, not once per line under them.
    """
    own: dict[int, set[str]] = {}
    hard: dict[int, bool] = {}
    for unit in units:
        for j in (*parents[unit[0]], *unit):
            if j not in own:
                own[j] = asked & terms(lines[j].text)
                hard[j] = is_hard(lines[j].text)
    heads: dict[tuple[int, ...], set[str]] = {}
    under: dict[tuple[int, ...], int] = {}  # units below each run of headings
    extras: list[set[str]] = []  # per unit: its own terms that its headings do not have
    for unit in units:
        chain = parents[unit[0]]
        if chain not in heads:
            heads[chain] = set().union(*(own[h] for h in chain))
        under[chain] = under.get(chain, 0) + 1
        extras.append(set().union(*(own[j] for j in unit)) - heads[chain])
    frequency: dict[str, int] = {}
    for chain, head in heads.items():
        for term in head:
            frequency[term] = frequency.get(term, 0) + under[chain]
    for extra in extras:
        for term in extra:
            frequency[term] = frequency.get(term, 0) + 1
    weights = {term: math.log(1 + len(units) / n) for term, n in frequency.items()}
    head_sums = {chain: sum(weights[t] for t in head) for chain, head in heads.items()}
    scores: list[float] = []
    for unit, extra in zip(units, extras, strict=True):
        chain = parents[unit[0]]
        if not heads[chain] and not extra:
            scores.append(0.0)
            continue
        bonus = HARD_BONUS if any(hard[j] for j in (*chain, *unit)) else 0.0
        scores.append(head_sums[chain] + sum(weights[t] for t in extra) + bonus)
    return scores


def _with_breaks(lines: list[Line], chosen: set[int]) -> list[Line]:
    """Keep the chosen lines, and the paragraph breaks between them."""
    return [line for i, line in enumerate(lines) if i in chosen or line.kind is Kind.BLANK]
