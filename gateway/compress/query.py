"""Keep what answers the question, under a token budget: the ``query`` mode.

Applied to the output of ``facts``. When that already fits the budget it is returned
unchanged. Otherwise every line is scored against the question:

- the sum, over the question's content words that the line shares (with the headings
  above it: a table row is read with its header row), of the word's
  rarity in the document (``log(1 + lines / lines with the word)``), so a shared
  product name weighs more than a shared "price";
- plus a small bonus when the line holds a hard fact (a number, a negation, a
  condition), since questions ask for those.

Lines are taken best first (ties, and lines sharing nothing with the question: in
document order) while they fit the budget, each with the headings above it so it
keeps its context, and printed in document order. Words
are compared lower-cased, with a crude plural/inflection folding ("days" = "day").

The result depends on the question, so it is never cache-stable: for one-off questions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Final

from reame.gateway.compress.facts import is_hard
from reame.gateway.compress.segment import Kind, Line, join, section_ends, split_lines

HARD_BONUS: Final = 0.5
_SAME: Final = {
    "tel": "phone", "telephone": "phone", "mobile": "phone", "e-mail": "email", "mail": "email",
    "web": "website", "site": "website", "www": "website", "addr": "address",
}
_WORD: Final = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)?")
_STOPWORDS: Final = frozenset("""
a about after all also am an and any are as at be been before but by can could did do does doing for from
had has have how i if in into is it its me my of on or our out so than that the their them then there these
they this those to up us was we were what when where which while who whom why will with would you your
""".split())  # noqa: SIM905 - a word list reads better as text


def rank(text: str, question: str, budget: int, count: Callable[[str], int]) -> str:
    """Return the lines of ``text`` most relevant to ``question`` that fit ``budget`` tokens."""
    if budget <= 0 or count(text) <= budget:
        return text
    lines = split_lines(text)
    asked = terms(question)
    units = _units(lines)
    parents = _parents(lines)
    # A line is read with the headings above it: a table row with its header row, an item with its title.
    texts = [_text(lines, [*parents[unit[0]], *unit]) for unit in units]
    weights = _rarity([terms(text) for text in texts], len(units))
    scores = [score(text, asked, weights) for text in texts]
    chosen: set[int] = set()
    used = 0
    for u in sorted(range(len(units)), key=lambda u: (-scores[u], u)):
        new = [j for j in (*parents[units[u][0]], *units[u]) if j not in chosen]
        cost = sum(count(lines[j].text) + 1 for j in new)
        if used + cost > budget:
            continue
        chosen.update(new)
        used += cost
    return join(_with_breaks(lines, chosen))


def _units(lines: list[Line]) -> list[list[int]]:
    """Group line indexes into the units chosen whole: one line, or one fenced code block."""
    units: list[list[int]] = []
    for i, line in enumerate(lines):
        if line.kind is Kind.BLANK or (line.kind is Kind.HEADING and not is_hard(line.text)):
            continue  # a short line with a fact ("Tel: 0117 496 0291") looks like a title but is chosen on its own
        if line.kind is Kind.CODE and i > 0 and lines[i - 1].kind is Kind.CODE and not _closes(lines, i - 1):
            units[-1].append(i)
        else:
            units.append([i])
    return units


def _closes(lines: list[Line], i: int) -> bool:
    """Tell whether code line ``i`` is the closing fence of its block."""
    start = i
    while start > 0 and lines[start - 1].kind is Kind.CODE:
        start -= 1
    fences = sum(1 for j in range(start, i + 1) if lines[j].text.strip().startswith(("```", "~~~")))
    return fences >= 2 and fences % 2 == 0


def _text(lines: list[Line], unit: list[int]) -> str:
    return "\n".join(lines[i].text for i in unit)


def terms(text: str) -> set[str]:
    """Return the folded content words of ``text``."""
    return {fold(word) for word in _WORD.findall(text.lower()) if word not in _STOPWORDS}


def fold(word: str) -> str:
    """Fold an English inflection away: "days" -> "day", "charged" -> "charg", "booking" -> "book".

    Abbreviations of how to reach someone fold to one word: "tel" and "telephone" are "phone".
    """
    word = _SAME.get(word, word)
    for suffix in ("ies", "es", "s", "ed", "ing"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


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
    """For each line, the headings whose sections contain it (outermost first)."""
    ends = section_ends(lines)
    parents: list[tuple[int, ...]] = []
    for i in range(len(lines)):
        parents.append(tuple(h for h in range(i) if lines[h].kind is Kind.HEADING and ends[h] > i))
    return parents


def _with_breaks(lines: list[Line], chosen: set[int]) -> list[Line]:
    """Keep the chosen lines, and the paragraph breaks between them."""
    return [line for i, line in enumerate(lines) if i in chosen or line.kind is Kind.BLANK]
