"""Linear-time matchers for the markup rules of :mod:`normalize` that a regex cannot bound.

Each function here gives exactly what ``re.sub`` gives with the pattern in its
docstring, but never scans the same stretch of text again for every opening
delimiter before it. With the regex, a delimiter that never closes makes every
attempt run to the end of the paragraph or the text, so ``"**a " * k`` or
``"[a](x" * k`` took time quadratic in the length (``re`` holds the GIL meanwhile:
one such request froze a gateway process). Here every "where does it end" question
is answered by a search whose answer is cached and reused by the openings after it,
since those openings would ask the same question and get the same answer.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from typing import Final


class _NextMatch:
    """The first match of ``pattern`` at or after a position that only moves forward.

    A search that found its answer at ``found`` answers every later query from up to
    ``found`` too, so scanning for all the openings of a long text stays linear.
    """

    def __init__(self, text: str, pattern: re.Pattern[str]) -> None:
        self._text = text
        self._pattern = pattern
        self._start = -1  # the position searched from; the answer holds for [_start, _found]
        self._found = -1  # the start of the match found, or len(text) + 1 when there was none

    def at(self, pos: int) -> int:
        """Return the start of the first match at or after ``pos``, or -1."""
        if not self._start <= pos <= self._found:
            match = self._pattern.search(self._text, pos)
            self._start, self._found = pos, match.start() if match else len(self._text) + 1
        return self._found if self._found <= len(self._text) else -1


_BOLD_OPEN: Final = re.compile(r"(\*\*|__)(?=\S)")
_BOLD_CLOSE: Final = {"**": re.compile(r"(?<=\S)(?=\*\*)"), "__": re.compile(r"(?<=\S)(?=__)")}
_PARAGRAPH_BREAK: Final = re.compile(r"(?=\n[ \t]*+\n)")


def unbold(text: str) -> str:
    r"""``**bold**`` and ``__bold__`` within a paragraph become their text.

    The pattern: ``(\*\*|__)(?=\S)((?:(?!\n[ \t]*\n).)+?)(?<=\S)\1`` (``re.S``), replaced by
    group 2. An opening closes at the first same delimiter after at least one character
    that follows a non-space, unless a blank line comes first. The closings and the
    blank lines are listed once; each opening looks its closing up by bisection.
    """
    closes = {d: [m.start() for m in p.finditer(text)] for d, p in _BOLD_CLOSE.items()}
    breaks = [m.start() for m in _PARAGRAPH_BREAK.finditer(text)]
    out: list[str] = []
    last = pos = 0
    while match := _BOLD_OPEN.search(text, pos):
        start, ends = match.start(), closes[match.group(1)]
        k = bisect.bisect_left(ends, start + 3)  # at least one character inside
        b = bisect.bisect_left(breaks, start + 2)
        limit = breaks[b] if b < len(breaks) else len(text)
        if k < len(ends) and ends[k] <= limit:
            out += (text[last:start], text[start + 2 : ends[k]])
            last = pos = ends[k] + 2
        else:
            pos = start + 1
    out.append(text[last:])
    return "".join(out)


_CONTENT_END: Final = re.compile(r"[\]\n]")
_URL_END: Final = re.compile(r"[)\s]")
_SPACES: Final = re.compile(r"\s*+")  # matches everywhere


def links(text: str, *, image: bool, render: Callable[[str, str], str]) -> str:
    r"""Replace markdown images or links by ``render(label, url)``.

    Images: ``!\[([^\]\n]*)\]\(([^)\s]*)(?:\s+\"[^\"]*\")?\)``; links:
    ``\[([^\]\n]+)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)`` (label and URL not empty).
    Where the label, the URL and the title end only depends on where they start
    looking, so the answers are shared by all the openings that look from before them.
    """
    opener = "![" if image else "["
    label_end = _NextMatch(text, _CONTENT_END)
    url_end = _NextMatch(text, _URL_END)
    title_end = _NextMatch(text, re.compile('"'))
    out: list[str] = []
    last = pos = 0
    while (start := text.find(opener, pos)) != -1:
        end = -1
        label_from = start + len(opener)
        close = label_end.at(label_from)
        if close != -1 and text[close] == "]" and text.startswith("(", close + 1) and (image or close > label_from):
            url_from = close + 2
            stop = url_end.at(url_from)
            if stop != -1 and (image or stop > url_from):
                if text[stop] == ")":
                    end = stop + 1
                else:  # white space: a "title" may follow, then the ")"
                    spaces = _SPACES.match(text, stop)
                    quote = spaces.end() if spaces else stop
                    if text.startswith('"', quote):
                        title = title_end.at(quote + 1)
                        if title != -1 and text.startswith(")", title + 1):
                            end = title + 2
        if end == -1:
            pos = start + 1
            continue
        out += (text[last:start], render(text[label_from:close], text[close + 2 : stop]))
        last = pos = end
    out.append(text[last:])
    return "".join(out)


_SCRIPT_OPEN: Final = re.compile(r"<(script|style)\b", re.I)
_SCRIPT_CLOSE: Final = re.compile(r"</(script|style)\s*+>", re.I)
_SAME_NAME: Final = re.compile(r"(\w+) \1", re.I)  # the backreference's own idea of "the same, ignoring case"


def strip_scripts(text: str) -> str:
    r"""Remove ``<script>``/``<style>`` elements: ``<(script|style)\b[^>]*>.*?</\1\s*>`` (``re.S | re.I``).

    An opening ends at the first ``>`` after its name, and its element at the first
    closing tag of the same name after that; both answers are cached, one per name.
    """
    tag_end = _NextMatch(text, re.compile(">"))
    closing: dict[str, tuple[int, re.Match[str] | None]] = {}  # name -> (searched from, first closing)
    out: list[str] = []
    last = pos = 0
    while opening := _SCRIPT_OPEN.search(text, pos):
        start, name = opening.start(), opening.group(1)
        gt = tag_end.at(opening.end())
        if gt == -1:
            break  # no opening after this one ends either
        close = _closing(text, name, gt + 1, closing)
        if close is None:
            pos = start + 1
            continue
        out.append(text[last:start])
        last = pos = close.end()
    out.append(text[last:])
    return "".join(out)


def _closing(
    text: str, name: str, pos: int, cache: dict[str, tuple[int, re.Match[str] | None]]
) -> re.Match[str] | None:
    """Return the first closing tag named ``name`` at or after ``pos`` (``pos`` never decreases per name)."""
    key = name.lower()
    if key in cache:
        searched, found = cache[key]
        if searched <= pos and (found is None or found.start() >= pos):
            return found
    match = _SCRIPT_CLOSE.search(text, pos)
    while match and not _SAME_NAME.fullmatch(f"{name} {match.group(1)}"):
        match = _SCRIPT_CLOSE.search(text, match.start() + 1)
    cache[key] = (pos, match)
    return match


def strip_comments(text: str) -> str:
    """Remove HTML comments: ``<!--.*?-->`` (``re.S``); once one is unclosed, so are all after it."""
    out: list[str] = []
    last = 0
    while (start := text.find("<!--", last)) != -1:
        end = text.find("-->", start + 4)
        if end == -1:
            break
        out.append(text[last:start])
        last = end + 3
    out.append(text[last:])
    return "".join(out)


_MARKS: Final = "=~*#"


def undecorate(text: str) -> str:
    r"""Keep the title of decorated lines (``=== TITLE ===``).

    The pattern: ``^[ \t]*[=~*#]{3,}[ \t]*(.*?\S)[ \t]*[=~*#]{3,}[ \t]*$`` (``re.M``) → ``\1``.

    With the regex, a long run of marks inside a line was tried as the closing run at
    each of its characters. Here the closing run is found once, from the end of the line.
    """
    lines = text.split("\n")
    return "\n".join(_undecorate_line(line) for line in lines)


def _undecorate_line(line: str) -> str:
    lead = len(line) - len(line.lstrip(" \t"))
    opening = _run(line, lead)
    if opening < 3:
        return line
    end = len(line.rstrip(" \t"))
    close = end  # the closing run of marks is line[close:end]
    while close > 0 and line[close - 1] in _MARKS:
        close -= 1
    if end - close < 3:
        return line
    gap = len(line[:close].rstrip(" \t"))  # where the spaces before the closing run start
    # The title may end before those spaces (after a non-space), or inside the closing
    # run leaving three marks or more: the first such end after its first character.
    gap_ends = gap > 0 and not line[gap - 1].isspace()

    def title_end(title_start: int) -> int:
        if gap_ends and gap > title_start:
            return gap
        inside = max(close + 1, title_start + 1)
        return inside if inside <= end - 3 else -1

    # The opening run is greedy with its spaces, then gives back marks one by one.
    after = lead + opening
    first = after + len(line[after:]) - len(line[after:].lstrip(" \t"))
    for title_start in (first, *range(after - 1, lead + 2, -1)):
        stop = title_end(title_start)
        if stop != -1:
            return line[title_start:stop]
    return line


def _run(line: str, start: int) -> int:
    """Return the length of the run of marks at ``start``."""
    size = 0
    while start + size < len(line) and line[start + size] in _MARKS:
        size += 1
    return size
