"""Drop filler and keep every sentence that may carry a fact: the ``facts`` mode.

Applied to normalised, de-duplicated text. Each sentence (and each clause, list
item, table row and heading) gets one verdict:

- ``HARD``: it holds a digit, a number word, a currency sign or ``%``, an e-mail or
  web address, a calendar word (day, month, "weekly"), a negation ("not", "no",
  "never", "without", "n't", "non-"...) or a condition or exception ("if", "unless",
  "except", "only", "until", "provided"...). Always kept;
- ``QUESTION``: it ends with ``?`` (an FAQ entry, or a question to the model), or it
  is an instruction to the model ("Answer briefly.", "You are a..."): kept;
- ``SOFT``: no hard fact, but a rule ("must", "can", "at least") or the vocabulary of
  terms and prices ("deposit", "included", "refund", "available"...): kept even
  beside praise;
- ``FILLER``: praise, pleasantries, sales talk (see :mod:`lexicon`) or an
  exclamation: dropped. Navigation lines ("Home > Services", "[Book a demo]") go too;
- ``PLAIN``: none of the above: kept. Most such prose in a business document states
  a fact in words no list knows ("Downgrades take effect at the start of the next
  billing period", "The practice is fully accessible to wheelchair users"); only
  what is recognisably filler goes.

Inside a kept sentence, a clause (after ``;``, ``, and``, ``, which``...) or a
bracketed aside of filler goes; a clause is never cut inside,
and a sentence with a condition is kept whole, since the condition may govern any
part of it. So no number, negation or condition is ever dropped or altered.

A list item's first sentence and a table row are facts by their form (a feature
list, a price grid) and are kept unless filler. A heading, a label ending in ``:``
or a table's header row is kept when it holds a hard fact or when anything in its
section is kept, so every kept fact keeps the title that gives it its context.
Dotted clause numbers ("4.2 ...") of a document that numbers its clauses are labels,
not facts: they go with their clause.

Lines and paragraphs never merge and what is kept is kept again, so the output is
idempotent.
"""

from __future__ import annotations

import enum
import re
from typing import Final

from reame.gateway.compress import lexicon
from reame.gateway.compress.segment import (
    CLAUSE_LABEL,
    ITEM_MARK,
    LEVEL_TABLE,
    Kind,
    Line,
    is_question,
    join,
    section_ends,
    sentences,
    split_lines,
)


class Verdict(enum.Enum):
    HARD = "hard"
    QUESTION = "question"
    SOFT = "soft"
    FILLER = "filler"
    PLAIN = "plain"


KEPT: Final = frozenset({Verdict.HARD, Verdict.QUESTION, Verdict.SOFT, Verdict.PLAIN})
NAV_SEGMENT_MAX_WORDS: Final = 5
# Dotted clause numbers ("4.2 ...") are labels only in a document that numbers its clauses.
MIN_LABELS: Final = 3
ASIDE_MIN_WORDS: Final = 4

_DIGIT: Final = re.compile(r"\d")
_MONEY: Final = re.compile(r"[$€£¥₹¢%‰]")
# Only searched for, never replaced: each address form is tried from the start of a
# run of its characters only (an attempt from inside a run reaches the same "@" or "."
# and can only succeed if the one from its start does), so a long run costs its length,
# not its length squared. A domain needs a letter or digit in its run, as "\b" did.
_ADDRESS: Final = re.compile(
    r"(?<![\w.+-])[\w.+-]++@[\w-]++\.[\w.-]+|\bhttps?://|\bwww\."
    r"|(?<![\w-])-*+\w[\w-]*+\.(?:com|org|net|io|co|uk|ie|de|fr|eu|gov|edu|info|biz|app|dev)\b",
    re.I,
)
# A capitalised word (or an acronym) after a word, a comma or a bracket: not the first of a sentence.
_NAME: Final = re.compile(
    r"(?:(?<=[\w,;)] )|(?<=[\w,;)] [\"'\u201c\u2018(]))(?:[A-Z][\w'\u2019&.-]*[a-z0-9]|[A-Z]{2,})(?![\w'\u2019])"
)
_NOT_NAMES: Final = frozenset({"I", "I'm", "I've", "I'll", "I'd", "OK"})
# A separator starting with spaces starts at the first of them (one from inside the run
# would fail as the one from its start did; a match always takes the spaces after it).
_NAV_SEPARATORS: Final = re.compile(r"(?:(?<!\s)|(?!\s))(?:\s++[|·•»>/]\s++|\s*+\|\s*+)")
_BUTTONS: Final = re.compile(r"^(?:\[[^\]]{1,60}\]\s*)+$")
_CLAUSE: Final = re.compile(
    r"(;\s+|,\s+(?:and|so|while|whereas|which|who|because|although|though|so that)\s+)"
)
_DEPENDENT: Final = re.compile(r",\s+(?:which|who|because|although|though|so that)\s+$")
_ENDINGS: Final = (".", "!", "?")
# An instruction to the model ("Answer in one word.", "You are a support agent."): kept like a question.
_INSTRUCTION: Final = re.compile(
    r"^(?:you are|you're|you will|your task|answer|respond|reply|use only|using only|based on|given the|"
    r"summari[sz]e|translate|extract|classify|act as|keep (?:it|your answers?)|be (?:brief|concise))\b",
    re.I,
)
# "one of the best", "no one", "one another": idioms, not counts.
_NOT_A_COUNT: Final = re.compile(r"\b(?:one of (?:the|our|these|those|its|their|my|your)|no one|one another)\b", re.I)
_ASIDE: Final = re.compile(r" \(([^()]{3,})\)(?=[\s.,;:!?]|$)")
_AS_IF: Final = re.compile(r"\bas\s+if\b", re.I)  # a comparison, not a condition
_EXCLAMATION: Final = re.compile(r"(?<!!)!++[\"'\u201d\u2019)\]]*+$")  # from a run's start: linear


def facts(text: str) -> str:
    """Keep the facts of normalised ``text`` (see the module doc)."""
    lines = split_lines(text)
    labelled = sum(1 for line in lines if line.kind is Kind.TEXT and CLAUSE_LABEL.match(line.text)) >= MIN_LABELS
    foreign = not_english(lines)
    kept: list[Line | None] = [
        line if i in foreign else _keep_line(line, lines, i, labelled) for i, line in enumerate(lines)
    ]
    ends = section_ends(lines)
    # Decide headings from the innermost out: a sub-heading kept keeps its parent too.
    for i in reversed(range(len(lines))):
        line = lines[i]
        if line.kind is Kind.HEADING and kept[i] is None:
            section = range(i + 1, ends[i])
            if any(kept[j] is not None and lines[j].kind is not Kind.BLANK for j in section):
                kept[i] = line
    return join([line for line in kept if line is not None])


def not_english(lines: list[Line]) -> set[int]:
    """Return the indexes of the lines in paragraphs that are not English: the rules leave them as they are."""
    out: set[int] = set()
    start = 0
    for end in [*(i for i, line in enumerate(lines) if line.kind is Kind.BLANK), len(lines)]:
        if lexicon.is_other_language("\n".join(line.text for line in lines[start:end])):
            out.update(range(start, end))
        start = end + 1
    return out


def _keep_line(line: Line, lines: list[Line], index: int, labelled: bool) -> Line | None:
    if line.kind in (Kind.BLANK, Kind.CODE):
        return line
    if line.kind is Kind.HEADING:
        return line if is_hard(line.text) else None
    if line.kind is Kind.TABLE:
        # A row under a header or another row is part of a grid of facts; a lone row is a menu.
        above = lines[index - 1] if index > 0 else None
        in_table = above is not None and (above.kind is Kind.TABLE or above.level == LEVEL_TABLE)
        if is_hard(line.text) or (in_table and verdict(line.text) is not Verdict.FILLER):
            return line
        return None
    if is_navigation(line.text):
        return line if is_hard(line.text) else None
    marker = ""
    body = line.text
    match = ITEM_MARK.match(body) if line.kind is Kind.ITEM else None
    if match:
        marker, body = match.group(0), body[match.end():]
    elif labelled and (match := CLAUSE_LABEL.match(body)):
        # "4.2 Please provide...": a clause number labels the text, it is not a fact in it.
        marker, body = match.group(0), body[match.end():]
    parts = [_without_asides(s) for s in sentences(body)]
    kept: list[str] = []
    if line.kind is Kind.ITEM and parts:
        # A list item opens with a terse statement of a feature or a rule: only filler goes.
        head, parts = parts[0], parts[1:]
        if verdict(head) is not Verdict.FILLER:
            kept.append(head)
    kept += [text for text in map(trim, parts) if text]
    if not kept:
        return None
    return Line(marker + " ".join(kept), line.kind, line.level)


def trim(sentence: str) -> str:
    """Return the sentence without its filler clauses; empty if nothing in it is kept.

    A sentence with a condition is kept whole: the condition may govern any part of
    it. Otherwise a clause (after ``;``, ``, and``, ``, so``, ``, while``, ``, which``,
    ``, because``...) that is filler goes ("The fee is £5, which is lovely"); a plain
    one stays, since in a sentence of facts it is most often one more ("..., and for
    patients receiving certain benefits"). A dependent clause that stays keeps the
    clause it hangs on. A clause is never cut inside. A sentence that loses its first
    clause starts with a capital.
    """
    if verdict(sentence) not in KEPT:
        return ""
    pieces = _CLAUSE.split(sentence)
    if len(pieces) == 1 or has_condition(sentence):
        return sentence
    clauses = pieces[0::2]
    separators = ["", *pieces[1::2]]
    keep = [verdict(clause) is not Verdict.FILLER for clause in clauses]
    for i in reversed(range(1, len(clauses))):
        if keep[i] and _DEPENDENT.match(separators[i]):
            keep[i - 1] = True
    out = ""
    for separator, clause, kept in zip(separators, clauses, keep, strict=True):
        if kept:
            out += (separator if out else "") + clause
    if out[:1].islower():
        out = out[0].upper() + out[1:]
    if not out.endswith(_ENDINGS) and sentence.endswith(_ENDINGS):
        out += sentence[-1]
    return out


def _without_asides(sentence: str) -> str:
    """Drop bracketed asides of a few words that carry no fact: "(although the coffee is really good)".

    Short ones stay: "(SSO)", "(optional)" define or qualify what they follow.
    """

    def keep(match: re.Match[str]) -> str:
        aside = match.group(1)
        return match.group(0) if len(aside.split()) < ASIDE_MIN_WORDS or verdict(aside) in KEPT else ""

    return _ASIDE.sub(keep, sentence)


def verdict(sentence: str) -> Verdict:
    """Classify one sentence (see the module doc)."""
    if is_hard(sentence):
        return Verdict.HARD
    if _INSTRUCTION.match(sentence):  # "You are a helpful assistant." is not praise
        return Verdict.QUESTION
    # A term of business outweighs an adjective: "included free with a map of our favourite routes".
    if lexicon.RULES.search(sentence) or lexicon.POLICY.search(sentence):
        return Verdict.SOFT
    if is_filler(sentence):
        return Verdict.FILLER
    if is_question(sentence):
        return Verdict.QUESTION
    return Verdict.PLAIN


def is_hard(text: str) -> bool:
    """Tell whether ``text`` holds a number, price, date, address, negation, condition or rule."""
    return bool(
        _DIGIT.search(text)
        or _MONEY.search(text)
        or _ADDRESS.search(text)
        or lexicon.NUMBER_WORDS.search(_NOT_A_COUNT.sub(" ", text))
        or lexicon.DATE_WORDS.search(text)
        or is_negated(text)
        or has_condition(text)
    )


def has_condition(text: str) -> bool:
    """Tell whether ``text`` holds a condition or an exception."""
    return bool(lexicon.CONDITIONS.search(_AS_IF.sub(" ", text)))


def is_negated(text: str) -> bool:
    """Tell whether ``text`` holds a negation."""
    return any(p.search(text) for p in (lexicon.NEGATIONS, lexicon.NEGATED_CONTRACTION, lexicon.NEGATED_PREFIX))


def is_filler(text: str) -> bool:
    """Tell whether ``text`` is praise, a pleasantry or an exclamation."""
    return bool(lexicon.FILLER.search(text) or _EXCLAMATION.search(text.strip()))


def document_names(text: str) -> frozenset[str]:
    """Return the words ``text`` capitalises inside a sentence: its names."""
    return frozenset(m.group(0) for m in _NAME.finditer(text)) - _NOT_NAMES


def is_navigation(text: str) -> bool:
    """Tell whether a line is a menu, breadcrumb or row of buttons."""
    if _BUTTONS.match(text):
        return True
    segments = [s for s in _NAV_SEPARATORS.split(text) if s.strip()]
    return len(segments) >= 2 and all(len(s.split()) <= NAV_SEGMENT_MAX_WORDS for s in segments) and not any(
        s.rstrip().endswith((".", ":")) for s in segments
    )
