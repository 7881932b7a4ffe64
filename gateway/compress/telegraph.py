"""Say the kept facts in fewer words: the last rule of ``facts``, in the style of notes.

Applied to what :mod:`facts` kept. Only closed classes of words go or get shorter,
and none of them is a digit, a number word, a negation or a condition, so every fact
reads as before:

- articles: "the", "a" and "an" go ("Rent is due on the 1st" → "Rent due on 1st"),
  except where they carry a count or a name: "a"/"an" after a number or before a
  unit of time or quantity ("€4 an hour", "twice a year", "a day", "a few"), and any
  article before a capitalised word ("the Team plan", "An Garda Síochána");
- copulas: "is"/"are" after a noun go ("Deposits are refundable" → "Deposits
  refundable"); after a pronoun or a question word they stay ("you are", "what is"),
  and so do "is not", "is to", "are welcome" and a copula before an article or a
  possessive ("Team is the plan for you" must not read "Team plan for you"). "There is
  no X" becomes "No X";
- future passives: "will be" before a participle goes ("Late returns will be charged"
  → "Late returns charged"), but not after a pronoun ("you will be asked");
- politeness: "please", "kindly", "please note that", "note that";
- wordy phrases with a shorter equivalent ("in order to" → "to", "prior to" →
  "before", "free of charge" → "free");
- praise before a word ("a stunning, bright apartment" → "apartment") goes; a
  capitalised word is a name and stays;
- ALL-CAPS headings become markdown headings in sentence case ("# Opening hours", the
  same heading level), keeping acronyms (a word in capitals elsewhere in the text),
  the capital of names (capitalised inside a sentence elsewhere) and words with
  digits: capitals cost a model's tokenizer two to three times more.

Questions (a sentence ending with ``?``) and table rows are left as they are. Every
rule only shortens, and applying them to their own output changes nothing.
"""

from __future__ import annotations

import re
from typing import Final

from reame.gateway.compress.facts import document_names, not_english
from reame.gateway.compress.fixpoint import fixpoint
from reame.gateway.compress.segment import (
    CLAUSE_LABEL,
    ITEM_MARK,
    LEVEL_CAPS,
    Kind,
    Line,
    is_question,
    join,
    last_token,
    sentences,
    split_lines,
)

# Words after which "is"/"are"/"will be" are the verb a sentence cannot lose.
_SUBJECTS: Final = frozenset({
    "i", "you", "we", "they", "he", "she", "it", "there", "here", "this", "that", "these", "those", "what",
    "which", "who", "whom", "whose", "where", "when", "why", "how", "whether", "everything", "nothing",
    "something", "anything", "everyone", "anyone", "someone", "nobody",
})
# "a"/"an" before these is a count: "a day", "a few", "a dozen".
_COUNTED: Final = (
    "few|little|lot|lots|couple|bit|dozen|half|quarter|hundred|thousand|million|billion|second|minute|hour|"
    "day|night|week|weekend|fortnight|month|year|term|season|time|visit|person|head|piece|unit|pair|set"
)
# Not after a copula that stays ("Team is the plan"): without either it reads "Team plan".
_ARTICLE: Final = re.compile(r"(?<![\w'\u2019.&/-])(?<!\bis )(?<!\bare )(?:the|an?)\s+(?=[a-z0-9£$€¥₹\"\u201c(])")
_COUNT_NEXT: Final = re.compile(rf"(?:{_COUNTED})\b")
_FIRST_ARTICLE: Final = re.compile(rf"^(?:The\s+|An?\s+(?!(?:{_COUNTED})\b))(?=[a-z0-9£$€¥₹])")
# An article right after a number, a price or a rate is "per": "€4 an hour", "twice a week":
# the word before it has a digit or ends with one of these.
_COUNT_WORD: Final = re.compile(
    r"(?:once|twice|thrice|times|one|two|three|four|five|six|seven|eight|nine|ten|per)\Z", re.I
)
_COUNT_WORD_MAX: Final = 6
_DIGIT: Final = re.compile(r"\d")
_COPULA: Final = re.compile(
    r"(?<=[\w)%])\s+(?:is|are)\s+"
    r"(?!(?:to|welcome|there|not|never|the|an?|our|your|their|its|this|that|one|part)\b)(?=[\w£$€¥₹\"\u201c(])"
)
_THERE_IS_NO: Final = re.compile(r"\b([Tt])here\s+(?:is|are)\s+(no|never)\b")
_PARTICIPLE: Final = (
    r"\w+ed|\w+en|made|sent|held|paid|kept|shown|told|run|set|put|left|lost|built|sold|done|seen|met|brought|"
    r"bought|taught|caught|sought|found|hit|cut|let|shut|split|spent|lent|dealt|meant|read|won"
)
_WILL_BE: Final = re.compile(rf"(?<=\w)\s+will\s+be\s+(?=(?:{_PARTICIPLE})\b)")
_PLEASE: Final = re.compile(
    r"(?<![\w-])(?:please\s+(?:note|be\s+aware|remember|bear\s+in\s+mind)\s+that\s+|"
    r"(?:note|remember)\s+that\s+(?=\S)|please,?\s+|kindly\s+)|,\s*please(?=[.!]?$)",
    re.I,
)
_SHORTER: Final = {
    "in order to": "to", "so as to": "to", "as well as": "and", "prior to": "before", "subsequent to": "after",
    "at the present time": "now", "so that you can": "to", "so that we can": "to", "are able to": "can",
    "is able to": "can", "will be able to": "can", "due to the fact that": "because", "for the purpose of": "for",
    "on a daily basis": "daily", "on a weekly basis": "weekly", "on a monthly basis": "monthly",
    "on an annual basis": "annually", "at all times": "always", "each and every": "every", "free of charge": "free",
    "a total of": "", "the majority of": "most", "in excess of": "over", "whether or not": "whether",
    "in accordance with": "under", "with regard to": "about", "with respect to": "about", "in relation to": "about",
    "in the amount of": "of", "a wide range of": "", "a wide variety of": "", "a range of": "", "a variety of": "",
    "a selection of": "",
}
# One pattern for all phrases, longest first; the match, folded, finds its replacement.
_PHRASES: Final = re.compile(
    r"(?<![\w-])(?:"
    + "|".join(long.replace(" ", r"\s+") for long in sorted(_SHORTER, key=len, reverse=True))
    + r")(?![\w-])",
    re.I,
)
_PRAISE: Final = (
    "amazing|awesome|beautiful|beautifully|brilliant|charming|delightful|excellent|exceptional|fantastic|"
    "gorgeous|incredible|incredibly|lovely|magnificent|outstanding|perfect|perfectly|remarkable|spectacular|"
    "splendid|stunning|superb|terrific|wonderful|wonderfully|world-class|award-winning|top-notch|unbeatable|"
    "airy|cosy|cozy|stress-free|hassle-free|seamless|seamlessly|effortless|effortlessly|truly|really|"
    "absolutely|sought-after|well-loved|much-loved"
)
_INTENSIFIER: Final = r"(?:(?:most|very|so|truly|really|extremely|incredibly)\s+)?"
# A run of praise before a word, not after "and"/"or"/"," (it would leave "bright and flat").
_PRAISE_CHAIN: Final = rf"{_INTENSIFIER}(?:{_PRAISE})(?:(?:,\s*|\s+and\s+|\s+){_INTENSIFIER}(?:{_PRAISE}))*"
# When a chain is not followed by a word it may go before, the second branch takes the
# chain whole (group "kept", put back as it was): an attempt from any later word of
# it would fail the same way, and trying each cost the chain's length squared.
_PRAISE_RUN: Final = re.compile(
    rf"(?<![\w'\u2019-])(?<!and )(?<!or )(?<!, )(?:{_PRAISE_CHAIN}(?:,\s*|\s+)"
    rf"(?!(?:and|or|but|so|with|for|to|in|on|at|as)\b)(?=[a-z0-9\"\u201c(])"
    rf"|{_PRAISE_CHAIN}+(?P<kept>))"
)
_ACRONYM: Final = re.compile(r"\b[A-Z][A-Z0-9&]*[A-Z0-9]\b")
_WORD: Final = re.compile(r"[^\W\d_][\w'\u2019&.-]*")
_SPACES: Final = re.compile(r"(?<=\S) {2,}")
_SPACE_BEFORE_MARK: Final = re.compile(r"(?<!\s)\s++([,.;:!])")  # from a run's start only: linear
MAX_ROUNDS: Final = 8


def telegraph(text: str) -> str:
    """Shorten the kept lines of ``text`` (see the module doc)."""
    lines = split_lines(text)
    others = [line.text for line in lines if not _is_caps_heading(line)]
    acronyms = {word for text in others for word in _ACRONYM.findall(text)}
    names = document_names("\n".join(others))
    foreign = not_english(lines)
    out = []
    for i, line in enumerate(lines):
        if i in foreign:
            out.append(line)
        elif _is_caps_heading(line):
            out.append(Line(_sentence_case(line.text, acronyms, names), Kind.HEADING, line.level))
        elif line.kind in (Kind.TEXT, Kind.ITEM):
            out.append(Line(shorten_line(line.text), line.kind, line.level))
        else:
            out.append(line)
    return join(out)


def shorten_line(text: str) -> str:
    """Shorten every sentence of one line, past its list marker or clause number."""
    mark = ITEM_MARK.match(text) or CLAUSE_LABEL.match(text)
    prefix, body = (mark.group(0), text[mark.end():]) if mark else ("", text)
    return prefix + " ".join(shorten(sentence) for sentence in sentences(body))


def shorten(sentence: str) -> str:
    """Apply the word rules to one sentence until none changes it; questions are left alone."""
    return sentence if is_question(sentence) else fixpoint(_round, sentence, MAX_ROUNDS)


def _round(sentence: str) -> str:
    capital = sentence[:1].isupper()
    text = _PLEASE.sub("", sentence)
    text = _PHRASES.sub(lambda m: _SHORTER[" ".join(m.group(0).lower().split())], text)
    text = _PRAISE_RUN.sub(lambda m: m.group(0) if m.group("kept") is not None else "", text)
    text = _THERE_IS_NO.sub(lambda m: m.group(2).capitalize() if m.group(1) == "T" else m.group(2), text)
    text = _WILL_BE.sub(lambda m: m.group(0) if _after_subject(text, m.start()) else " ", text)
    text = _COPULA.sub(lambda m: m.group(0) if _after_subject(text, m.start()) else " ", text)
    text = _ARTICLE.sub(lambda m: m.group(0) if _is_count(text, m) else "", text)
    text = _FIRST_ARTICLE.sub("", text)
    text = _SPACES.sub(" ", text).strip()
    if text != sentence:  # only where a word went: elsewhere the spacing is the author's
        text = _SPACE_BEFORE_MARK.sub(r"\1", text)
    if capital and text[:1].islower():
        text = text[0].upper() + text[1:]
    return text


def _after_subject(text: str, end: int) -> bool:
    word = last_token(text, end)
    return word is None or word.lower().strip("\"'\u201c\u2018(") in _SUBJECTS


def _is_count(text: str, match: re.Match[str]) -> bool:
    if match.group(0)[:1].lower() != "a":
        return False
    if _COUNT_NEXT.match(text, match.end()):
        return True
    start = match.start()
    if start == 0 or not text[start - 1].isspace():
        return False
    word = last_token(text, start)
    return word is not None and bool(_DIGIT.search(word) or _COUNT_WORD.search(word[-_COUNT_WORD_MAX:]))


def _is_caps_heading(line: Line) -> bool:
    return line.kind is Kind.HEADING and line.level == LEVEL_CAPS and not line.text.startswith("#")


def _sentence_case(text: str, acronyms: set[str], names: frozenset[str]) -> str:
    first = True

    def fold(match: re.Match[str]) -> str:
        nonlocal first
        word = match.group(0)
        name = first or word.capitalize() in names
        first = False
        if word in acronyms or len(word) == 1 or any(c.isdigit() for c in word):
            return word
        if name:
            return word.capitalize()
        return word.lower()

    return "# " + _WORD.sub(fold, text)
