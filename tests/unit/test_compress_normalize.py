"""The lossless normalisation rules, one by one."""

from __future__ import annotations

import pytest

from reame.gateway.compress.normalize import (
    leaders,
    looks_like_code,
    markdown,
    newlines,
    normalize,
    strip_html,
    unicode,
    whitespace,
)


def test_line_endings_become_newlines() -> None:
    assert newlines("a\r\nb\rc\u2028d\u2029e") == "a\nb\nc\nd\n\ne"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cafe\u0301", "café"),  # NFC composes
        ("a\u00a0b\u2009c\u3000d", "a b c d"),  # exotic spaces
        ("zero\u200bwidth\ufeff soft\u00adhyphen", "zerowidth softhyphen"),
        ("\uff21\uff11\uff05", "A1%"),  # full-width ASCII
        ("\ufb01le", "file"),  # ligature
        ("bell\x07", "bell"),
    ],
)
def test_unicode_applies_safe_mappings(text: str, expected: str) -> None:
    assert unicode(text) == expected


@pytest.mark.parametrize("kept", ["£38 per m²", "½ price", "Brand™", "€35", "09:00–13:00", "don’t"])  # noqa: RUF001
def test_unicode_keeps_symbols_that_nfkc_would_change(kept: str) -> None:
    assert unicode(kept) == kept


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Terms &amp; Conditions&nbsp;– Page<br>", "Terms & Conditions – Page\n"),  # noqa: RUF001
        ("<p>One</p><p>Two</p>", "\n\nOne\n\n\n\nTwo\n\n"),
        ("a<br>\nb<br/>c<br>\n<br>\nd", "a\nb\nc\n\nd"),  # a break before a newline is one line end
        ("<b>bold</b> and <span class=\"x\">span</span>", "bold and span"),
        ("<ul><li>a</li><li>b</li></ul>", "\n\n- a\n- b\n\n"),
        ("<tr><td>Tea</td><td>£2</td></tr>\n<tr><td>Bun</td><td>£1</td></tr>", "Tea | £2\nBun | £1\n"),
        ("x<!-- hidden -->y<script>evil()</script>z", "xyz"),
        ("&copy; 2025 &#8364;5 &#x41;", "© 2025 €5 A"),
        ("&amp;lt;b&amp;gt;", ""),  # decoded to a tag, which is then removed: a fixpoint
    ],
)
def test_html_markup_goes_and_entities_are_decoded(text: str, expected: str) -> None:
    assert strip_html(text) == expected


@pytest.mark.parametrize("kept", ["a < b and c > d", "<5 minutes", "x<y", "<unknown>tag", "AT&T", "a &b; c"])
def test_html_stripping_leaves_text_that_is_not_markup(kept: str) -> None:
    assert strip_html(kept) == kept


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("**Get a quote** now", "Get a quote now"),
        ("__bold__ and *em*", "bold and em"),
        ("see [our site](https://x.io/a) or [docs](#top)", "see our site (https://x.io/a) or docs"),
        ("![a logo](logo.png)", "a logo"),
        ("> quoted\n>> twice", "quoted\ntwice"),
        ("a\n---\nb\n=====\nc", "a\n\nb\n\nc"),
        ("| A | B |\n|---|:--:|\n| 1 | 2 |", "| A | B |\n| 1 | 2 |"),
        ("=== PRICE LIST 2025 ===", "PRICE LIST 2025"),
    ],
)
def test_markdown_noise_goes(text: str, expected: str) -> None:
    assert markdown(text) == expected


@pytest.mark.parametrize(
    "kept", ["## Heading", "- item", "1. step", "5 * 3 * 2 = 30", "~~£50~~ £40", "snake_case_name"]
)
def test_markdown_keeps_structure_and_meaningful_marks(kept: str) -> None:
    assert markdown(kept) == kept


def test_dot_leaders_become_label_value() -> None:
    assert leaders("Check-up ........ £42.00") == "Check-up: £42.00"
    assert leaders("Name ________ Date") == "Name: Date"
    assert leaders("Wait... what?") == "Wait... what?"


def test_whitespace_collapses_but_code_fences_keep_their_lines() -> None:
    text = "  a   b  \n\n\n\nc\t\n```\n  def f():\n\n\n      return 1\n```\n\n"
    assert whitespace(text) == "a b\n\nc\n```\n  def f():\n\n\n      return 1\n```"


def test_normalize_leaves_fenced_code_verbatim() -> None:
    code = "```python\nx = '&amp;  <b>'\n```"
    assert normalize("Intro &amp; more\n" + code) == "Intro & more\n" + code


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('{"a": 1, "b": [1, 2]}', True),
        ("[Start your free trial] [Book a demo]", False),
        ("def f(x):\n    return x\n\nclass A:\n    pass\n    y = 1\n", True),
        ("int main() {\n  int x = 1;\n  return x;\n}\n\nvoid g();\n", True),
        ("Plain prose.\nMore prose.\n- a list\n- more\nThe end.\nReally.", False),
    ],
)
def test_code_and_data_are_recognised(text: str, code: bool) -> None:
    assert looks_like_code(text) is code
