"""Normalise a document without losing a word of its content: the first stage of every mode.

Rules, in order (each is one function below, tested on its own):

- line endings: CRLF, CR and the Unicode line/paragraph separators become ``\\n``;
- Unicode: NFC (canonical composition never changes meaning), then only the *safe*
  compatibility mappings: exotic spaces become a space, full-width ASCII becomes ASCII,
  Latin ligatures are split; zero-width characters, soft hyphens and control characters
  go. Superscripts, fractions and symbols (``m²``, ``½``, ``™``) are left alone, since
  NFKC would turn ``m²`` into ``m2``;
- HTML: comments and ``<script>``/``<style>`` blocks go; tags of known HTML elements are
  removed (block elements separate paragraphs, ``<br>`` and rows end a line, list
  items become ``- `` lines, table cells are split by ``|``), so ``a < b`` or
  ``<5 minutes`` in plain text is kept; entities with a closing ``;`` are decoded;
- markdown noise: ``**bold**``/``__bold__``/``*em*`` markers, link syntax (the URL is
  kept), image syntax (the alt text is kept), blockquote markers, horizontal rules,
  table separator rows and decorative ``=== TITLE ===`` runs. Headings, list markers,
  table rows and ``~~struck~~`` text (a withdrawn price is not the current one) stay;
- dot leaders (``Item ........ £5``) become ``Item: £5``;
- whitespace: runs of spaces and tabs become one space, lines are trimmed, and at most
  one blank line separates paragraphs.

Fenced code blocks (```` ``` ````) are copied verbatim; the caller leaves text that looks
like code or data alone altogether (:func:`looks_like_code`).
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from typing import Final

from reame.gateway.compress.markup import links, strip_comments, strip_scripts, unbold, undecorate

# Elements whose tags separate paragraphs, and those that end a line (a row, a break).
_BLOCK_TAGS: Final = (
    "address|article|aside|blockquote|body|div|dl|figure|footer|form|h[1-6]|head|header|hr|html|main|nav|ol|p|"
    "pre|section|table|tbody|tfoot|thead|title|ul"
)
_LINE_TAGS: Final = "caption|dd|dt|figcaption|tr"
_INLINE_TAGS: Final = (
    "a|abbr|b|big|cite|code|del|em|font|i|img|ins|kbd|label|mark|q|s|small|span|strike|strong|sub|sup|"
    "time|u|var|wbr|center|li"
)
_ATTRS: Final = r"""(?:\s+[^<>"'=\s]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^<>"'\s]+))?)*\s*/?"""
_CELL_END: Final = re.compile(rf"</t[dh]\s*+>[ \t]*+(?=<t[dh]{_ATTRS}>)", re.I)
_LIST_ITEM: Final = re.compile(rf"<li{_ATTRS}>", re.I)
# A break or a row's end already followed by a newline in the source is one line end, not two.
_LINE_END: Final = re.compile(rf"(?:<br{_ATTRS}>|</(?:{_LINE_TAGS})\s*>)[ \t]*\n?", re.I)
_LINE_START: Final = re.compile(rf"<(?:{_LINE_TAGS}){_ATTRS}>", re.I)
_BLOCK: Final = re.compile(rf"</?(?:{_BLOCK_TAGS}){_ATTRS}>[ \t]*\n?", re.I)
_INLINE: Final = re.compile(rf"</?(?:{_INLINE_TAGS}|t[dh]){_ATTRS}>", re.I)
_ENTITY: Final = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")

_SPACES: Final = re.compile("[\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000\t\f\v]")
_INVISIBLE: Final = re.compile("[\u00ad\u180e\u200b\u2060\ufeff]")
_CONTROL: Final = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_COMPAT: Final = re.compile("[\uff01-\uff5e\ufb00-\ufb06]")

_FENCE: Final = re.compile(r"^(```|~~~).*?(?:^\1[ \t]*$|\Z)", re.S | re.M)
_EMPHASIS: Final = re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=[^\s*])\*(?![\w*])")
_QUOTE_MARK: Final = re.compile(r"^(?:>[ \t]?)+", re.M)
_RULE: Final = re.compile(r"^[ \t]*(?:[-=_*~#·•][ \t]*){3,}$", re.M)
# The whole line goes, so the header stays next to its rows.
# Possessive: no run of spaces or dashes can be split another way (each is followed by
# something it cannot hold), so a line that is no separator fails in linear time.
_TABLE_SEPARATOR: Final = re.compile(
    r"^[ \t]*+\|?+(?:[ \t]*+:?+-{2,}+:?+[ \t]*+\|)++(?:[ \t]*+:?+-{2,}+:?+[ \t]*+)?+(?:\n|$)", re.M
)
_LEADER: Final = re.compile(r"(?<=\S)[ \t]*(?:\.[ \t]?){4,}[ \t]*(?=\S)|(?<=\S)[ \t]*_{4,}[ \t]*(?=\S)")

_RUNS: Final = re.compile(r" {2,}")
_MAX_ENTITY_PASSES: Final = 4


def normalize(text: str) -> str:
    """Apply every lossless rule; fenced code blocks are kept verbatim."""
    text = newlines(text)
    parts: list[str] = []
    last = 0
    for fence in _FENCE.finditer(text):
        parts.append(_prose(text[last:fence.start()]))
        parts.append(fence.group(0))
        last = fence.end()
    parts.append(_prose(text[last:]))
    return whitespace("".join(parts))


def _prose(text: str) -> str:
    return leaders(markdown(strip_html(unicode(text))))


def newlines(text: str) -> str:
    """Turn every line ending into ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\u2028", "\n").replace("\u2029", "\n\n")


def unicode(text: str) -> str:
    """Compose (NFC) and apply only the compatibility mappings that cannot change a fact."""
    text = unicodedata.normalize("NFC", text)
    text = _SPACES.sub(" ", text)
    text = _INVISIBLE.sub("", text)
    text = _CONTROL.sub("", text)
    return _COMPAT.sub(lambda m: unicodedata.normalize("NFKC", m.group(0)), text)


def strip_html(text: str) -> str:
    """Remove HTML markup of known elements and decode entities (until none is left)."""
    for _ in range(_MAX_ENTITY_PASSES):
        before = text
        text = strip_comments(text)
        text = strip_scripts(text)
        text = _CELL_END.sub(" | ", text)
        text = _LIST_ITEM.sub("\n- ", text)
        text = _LINE_END.sub("\n", text)
        text = _LINE_START.sub("", text)
        text = _BLOCK.sub("\n\n", text)
        text = _INLINE.sub("", text)
        # A decoded entity may be a space or a tag: normalise what it produced too.
        text = unicode(_ENTITY.sub(lambda m: html.unescape(m.group(0)), text))
        if text == before:
            break
    return text


def markdown(text: str) -> str:
    """Remove markdown syntax that carries no content."""
    text = _TABLE_SEPARATOR.sub("", text)
    text = _RULE.sub("", text)
    text = undecorate(text)
    text = _QUOTE_MARK.sub("", text)
    text = links(text, image=True, render=lambda alt, _url: alt)
    text = links(text, image=False, render=_link)
    text = unbold(text)  # within a paragraph
    return _EMPHASIS.sub(r"\1", text)


def _link(label: str, url: str) -> str:
    if label == url or url.startswith("#"):  # an in-page anchor says nothing to a reader
        return label
    return f"{label} ({url})"


def leaders(text: str) -> str:
    """Render ``Label ....... value`` as ``Label: value``."""
    return _LEADER.sub(": ", text)


def whitespace(text: str) -> str:
    """Collapse spaces, trim lines, keep at most one blank line; code fences keep their lines."""
    out: list[str] = []
    in_fence: str | None = None
    for line in text.split("\n"):
        stripped = line.strip()
        if in_fence is not None:
            out.append(line.rstrip())
            if stripped.startswith(in_fence):
                in_fence = None
            continue
        if stripped.startswith(("```", "~~~")):
            in_fence = stripped[:3]
        if stripped or (out and out[-1]):
            out.append(_RUNS.sub(" ", stripped))
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


_CODE_LINE: Final = re.compile(
    r"^(?:[ \t]{2,}\S|\t)|[{};]\s*$|^\s*(?:def|class|import|from|return|#include|function|var|let|const)\b"
)
_CODE_SHARE: Final = 0.3
_CODE_MIN_LINES: Final = 5


def looks_like_code(text: str) -> bool:
    """Tell whether ``text`` is code or structured data, which no rule here may touch.

    JSON and XML documents, and texts where at least 30 % of the lines are indented or end
    like statements (``{``, ``}``, ``;``) or start with a keyword, are code: collapsing
    their whitespace could change their meaning.
    """
    start = text.lstrip()
    if start.startswith("<?xml"):
        return True
    if start[:1] in ("{", "["):
        try:
            json.loads(text)
        except (ValueError, RecursionError):  # "[" * 10_000 nests deeper than the decoder goes
            pass
        else:
            return True
    lines = [line for line in text.split("\n") if line.strip() and not line.strip().startswith(("- ", "* ", "|"))]
    if len(lines) < _CODE_MIN_LINES:
        return False
    code = sum(1 for line in lines if _CODE_LINE.search(_ENTITY.sub("", line)))  # "&nbsp;" is not a statement
    return code >= _CODE_SHARE * len(lines)
