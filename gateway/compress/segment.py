"""Split normalised text into typed lines and lines into sentences, and put them back together.

Pure and reversible for what it keeps: a line's sentences joined with one space give
the line back (normalised text has single spaces), so dropping a sentence never
touches its neighbours.

Line kinds:

- ``BLANK``: a paragraph break;
- ``CODE``: inside a fenced code block, never changed;
- ``HEADING``: a markdown heading, an ALL-CAPS line, a numbered ALL-CAPS title, a short
  line without final punctuation (a title such as "Lease terms"), a label ending in
  ``:``, or the first row of a table; ``level`` orders them (1 is the highest);
- ``TABLE``: a row of a table: one of consecutive lines split by ``|``, or a lone line
  with two or more ``|``;
- ``ITEM``: a list item (``-``, ``*``, ``+``, ``•``, ``1.``, ``1)``, ``(a)``);
- ``TEXT``: prose.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Final


class Kind(enum.Enum):
    BLANK = "blank"
    CODE = "code"
    HEADING = "heading"
    TABLE = "table"
    ITEM = "item"
    TEXT = "text"


# Heading levels: smaller is higher; a heading's section runs to the next heading at
# its level or above.
LEVEL_CAPS: Final = 1
LEVEL_TITLE: Final = 7
LEVEL_LABEL: Final = 8
LEVEL_TABLE: Final = 9
TITLE_MAX_WORDS: Final = 8
ABBREVIATION_WINDOW: Final = 32  # longer than any abbreviation
CAPS_MAX_WORDS: Final = 12

_MD_HEADING: Final = re.compile(r"^(#{1,6})\s+\S")
# A list item's marker ("- ", "3. ", "(b) ") and a contract's clause number ("4.2 "), with the space after.
ITEM_MARK: Final = re.compile(r"^(?:[-*+•]|\d{1,3}[.)]|\(\d{1,3}\)|\(?[a-zA-Z]\))\s+(?=\S)")
CLAUSE_LABEL: Final = re.compile(r"^\d{1,2}(?:\.\d{1,2}){1,3}\.?\s+(?=[A-Z\"“(])")
_FINAL_PUNCTUATION: Final = re.compile(r"[.!?,;\"'\u201d\u2019)]$")
# One space then the rest: "\s+[^a-z]+" split every run of spaces both ways before failing.
_NUMBERED_CAPS: Final = re.compile(r"^\d{1,3}(?:\.\d{1,3})*\.?\s[^a-z]++$")

# A sentence ends at . ! or ? (with closing quotes or brackets) before a space and a
# capital, a digit or an opening quote, unless the word before the stop is an
# abbreviation or a single initial. A run of stops is taken whole, from its first
# character only: tried from each of its characters, "!" * n cost n^2 (an attempt
# inside a run ends where the one from its start did, so it can only fail too).
_BOUNDARY: Final = re.compile(
    r"(?<![.!?])[.!?]++[\"'\u201d\u2019)\]]*+(?=\s++[\"'\u201c\u2018(\[]?+[A-Z0-9£$€¥₹])"
)
_ABBREVIATIONS: Final = frozenset({
    "a.k.a", "a.m", "approx", "apt", "ave", "ca", "cf", "co", "corp", "dept", "dr", "e.g", "est", "etc",
    "excl", "i.e", "inc", "incl", "jr", "ltd", "max", "min", "mr", "mrs", "ms", "mt",
    "p.m", "ph.d", "prof", "rev", "sr", "st", "tel", "u.k", "u.s", "vs",
    "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
})
# Abbreviations that stand before a number: "No." ends a sentence unless a digit follows.
_BEFORE_NUMBERS: Final = frozenset({"no", "nos", "vol", "fig", "op", "ref", "pp"})
_NEXT_DIGIT: Final = re.compile(r"\s*+\d")


@dataclasses.dataclass(frozen=True)
class Line:
    text: str
    kind: Kind
    level: int = 0  # headings only


def split_lines(text: str) -> list[Line]:
    """Type every line of normalised ``text``."""
    raw = text.split("\n")
    lines: list[Line] = []
    in_fence: str | None = None
    for i, line in enumerate(raw):
        stripped = line.strip()
        if in_fence is not None or stripped.startswith(("```", "~~~")):
            if in_fence is None:
                in_fence = stripped[:3]
            elif stripped.startswith(in_fence):
                in_fence = None
            lines.append(Line(line, Kind.CODE))
            continue
        if not stripped:
            lines.append(Line(line, Kind.BLANK))
            continue
        if is_table_row(stripped):
            before = i > 0 and is_table_row(raw[i - 1].strip())
            after = i + 1 < len(raw) and is_table_row(raw[i + 1].strip())
            if after and not before:
                lines.append(Line(line, Kind.HEADING, LEVEL_TABLE))
                continue
            if before or stripped.count("|") >= 2:
                lines.append(Line(line, Kind.TABLE))
                continue
        lines.append(_classify(line))
    return lines


def is_table_row(line: str) -> bool:
    """Tell whether a line may be a row of a (markdown or plain) table: it has cells split by ``|``."""
    return line.count("|") >= 2 or " | " in line


def _classify(line: str) -> Line:
    heading = _MD_HEADING.match(line)
    if heading:
        return Line(line, Kind.HEADING, len(heading.group(1)))
    words = line.split()
    letters = [c for c in line if c.isalpha()]
    if (
        len(letters) >= 3
        and not any(c.islower() for c in letters)
        and len(words) <= CAPS_MAX_WORDS
        and not _FINAL_PUNCTUATION.search(line)
    ) or (_NUMBERED_CAPS.match(line) and len(letters) >= 3):
        return Line(line, Kind.HEADING, LEVEL_CAPS)
    if ITEM_MARK.match(line):
        return Line(line, Kind.ITEM)
    if line.endswith(":"):
        return Line(line, Kind.HEADING, LEVEL_LABEL)
    if len(words) <= TITLE_MAX_WORDS and not _FINAL_PUNCTUATION.search(line) and line[:1].isupper():
        return Line(line, Kind.HEADING, LEVEL_TITLE)
    return Line(line, Kind.TEXT)


def sentences(text: str) -> list[str]:
    """Split one line into sentences; joining them with a space gives the line back."""
    out: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.end()
        if match.group(0).startswith(".") and _abbreviation_before(text, match.start(), match.end()):
            continue
        out.append(text[start:end].strip())
        start = end
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def is_question(sentence: str) -> bool:
    """Tell whether a sentence ends with a question mark (before closing quotes or brackets)."""
    return sentence.rstrip("\"'\u201d\u2019)]* ").endswith("?")


def last_token(text: str, end: int) -> str | None:
    """Return the last word of ``text[:end]`` split at white space (``None`` if it has none).

    The same as ``text[:end].rsplit(None, 1)[-1]``, but reading back only as far as the
    word starts: called once per match on a long line, copying the line before each
    match made that line's cost quadratic.
    """
    size = 64
    while True:
        start = max(0, end - size)
        parts = text[start:end].rsplit(None, 1)
        if start == 0:
            return parts[-1] if parts else None
        if len(parts) == 2 or (parts and text[start].isspace()):
            return parts[-1]
        size *= 2


def _abbreviation_before(text: str, stop: int, after: int) -> bool:
    # Only the word before the stop matters; a bounded window keeps a long line linear.
    word = re.split(r"[\s(\[\"'\u201c\u2018]", text[max(0, stop - ABBREVIATION_WINDOW):stop])[-1].lower()
    if word in _BEFORE_NUMBERS:
        return bool(_NEXT_DIGIT.match(text, after))  # "No. 5" but "No. There is no fee."
    if len(word) == 1 and word.isalpha():
        return True  # an initial: "J. Smith"
    return word in _ABBREVIATIONS


def section_ends(lines: list[Line]) -> list[int]:
    """For each heading, the index where its section ends (exclusive); -1 for other lines.

    A label (``...:``) owns the lines up to the next blank line; a table header owns its
    rows; every other heading owns the lines up to the next heading at its level or above.
    """
    ends = [-1] * len(lines)
    for i, line in enumerate(lines):
        if line.kind is not Kind.HEADING:
            continue
        j = i + 1
        while j < len(lines):
            other = lines[j]
            if line.level == LEVEL_TABLE and other.kind is not Kind.TABLE:
                break
            if line.level == LEVEL_LABEL and other.kind is Kind.BLANK:
                break
            if other.kind is Kind.HEADING and other.level <= line.level and other.level != LEVEL_TABLE:
                break
            j += 1
        ends[i] = j
    return ends


def join(lines: list[Line]) -> str:
    """Put lines back together, with at most one blank line between paragraphs (code as it was)."""
    out: list[str] = []
    previous_blank = True  # no blank line at the start
    for line in lines:
        blank = line.kind is Kind.BLANK
        if blank and previous_blank:
            continue
        out.append(line.text)
        previous_blank = blank
    while out and previous_blank and out[-1] == "":
        out.pop()
        previous_blank = bool(out) and out[-1] == ""
    return "\n".join(out)
