"""Hostile input: every compression rule runs in linear time on text built to make it backtrack.

Each case feeds one rule (the function that applies a pattern, as the compressor
calls it) text made of what that pattern looks for: long runs of its delimiter,
openings that never close, nested markup, a line without a break. The rules of
``lossless`` get 1 MB; those of ``facts`` and ``query`` get FACTS_MAX_CHARS, the most
the compressor gives them. The budget is a ratio against compressing 1 MB of
ordinary text in ``lossless`` mode on the same machine in the same run (per
character), so it holds on a slow or busy machine; a rule that went quadratic again
would take minutes, not a fraction of a second.
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Callable

import pytest

from reame.gateway.compress import FACTS_MAX_CHARS, MAX_CHARS, compress, markup
from reame.gateway.compress.dedupe import dedupe
from reame.gateway.compress.facts import facts, is_filler, is_hard, is_navigation, trim, verdict
from reame.gateway.compress.lexicon import is_english
from reame.gateway.compress.messages import Policy, split_question
from reame.gateway.compress.normalize import leaders, looks_like_code, strip_html, whitespace
from reame.gateway.compress.query import rank
from reame.gateway.compress.segment import sentences, split_lines
from reame.gateway.compress.telegraph import shorten, shorten_line, telegraph

SIZE = 1_000_000
SMALL = FACTS_MAX_CHARS  # the longest text the facts and query rules are given
RATIO = 5  # an adversarial character may cost this many times an ordinary one
SLACK_S = 0.5  # timer noise and a busy machine on a fast baseline

_ORDINARY_LINES = (
    "## Opening hours",
    "The shop is open Monday to Friday from 9:00 to 17:30, and on Saturday mornings.",
    "- Rental of a city bike costs £12 a day, with a £50 refundable deposit.",
    "Late returns are charged at £5 per hour unless agreed in advance.",
    "We do not accept cheques. Please note that the deposit is refunded within 5 working days.",
    "| Plan | Price | Users |",
    "| Team | $49 | 10 |",
    "Our friendly team will be happy to help you find the perfect bike for your trip!",
    "**Insurance** is included; see the [terms](https://example.com/terms) for details.",
)


def ordinary(size: int) -> str:
    """Business-document text of ``size`` characters, no paragraph repeated (nothing for dedupe to drop)."""
    out: list[str] = []
    total = n = 0
    while total < size:
        n += 1
        paragraph = "\n".join(f"{line} Ref {n}." for line in _ORDINARY_LINES)
        out.append(paragraph)
        total += len(paragraph) + 2
    return "\n\n".join(out)[:size]


def fill(unit: str, size: int = SIZE, before: str = "", after: str = "") -> str:
    """``unit`` repeated to about ``size`` characters, between ``before`` and ``after``."""
    return before + unit * (size // len(unit)) + after


def seconds(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


@pytest.fixture(scope="module")
def per_char_s() -> float:
    """The time compressing ordinary text takes, per character (measured on 1 MB)."""
    text = ordinary(SIZE)
    return seconds(lambda: compress(text, "lossless")) / len(text)


def budget(text: str, per_char_s: float) -> float:
    """The time a case may take on ``text``."""
    return RATIO * per_char_s * len(text) + SLACK_S


def _sentences(text: str) -> object:
    return len(sentences(text))


def _sub(pattern: re.Pattern[str]) -> Callable[[str], object]:
    return lambda text: pattern.sub("", text)


def _search(pattern: re.Pattern[str]) -> Callable[[str], object]:
    return lambda text: pattern.search(text)


def _rank(question: str) -> Callable[[str], object]:
    return lambda text: rank(text, question, 50, len)


def _question(text: str) -> object:
    return split_question(text, Policy("lossless", 5, 0, len, 0))


_LINES_UNDER = fill("a day 1\n", SMALL // 2)
_norm = importlib.import_module("reame.gateway.compress.normalize")
_segment = importlib.import_module("reame.gateway.compress.segment")

# (pattern, the function applying it, input): what makes each pattern backtrack.
CASES: list[tuple[str, Callable[[str], object], str]] = [
    # segment
    ("sentence boundary: a run of !", _sentences, fill("!", before="a", after=" b")),
    ("sentence boundary: runs of ?!. and brackets", _sentences, fill("?!.", before="a", after=")x")),
    ("sentence boundary: stops and spaces", _sentences, fill(". ", after="b")),
    ("sentence boundary: abbreviations", _sentences, fill("No. e.g. J. ")),
    ("numbered caps: spaces then a letter", _segment._NUMBERED_CAPS.match, fill(" ", before="1", after="a")),
    ("line kinds: a line without a break", split_lines, fill("word ")),
    ("line kinds: headings of every kind", split_lines, fill("# a\nB\nc:\n| x | y |\n")),
    # normalize: HTML
    ("comments never closed", markup.strip_comments, fill("<!--")),
    ("scripts never closed", markup.strip_scripts, fill("<script ")),
    ("scripts without an end tag", markup.strip_scripts, fill("<style>a")),
    ("cell ends before spaces", _sub(_norm._CELL_END), fill("</td> \t ")),
    ("list items with attributes", _sub(_norm._LIST_ITEM), fill('<li a="1" b=2 c ')),
    ("line ends with unclosed quotes", _sub(_norm._LINE_END), fill('<br a="')),
    ("line starts", _sub(_norm._LINE_START), fill("<tr a=b=c")),
    ("block tags", _sub(_norm._BLOCK), fill("<div ")),
    ("inline tags, < without >", _sub(_norm._INLINE), fill("<")),
    ("entities", _sub(_norm._ENTITY), fill("&#")),
    ("nested markup", strip_html, fill("<div><ul><li><b>", SIZE // 2) + fill("</b></li></ul></div>", SIZE // 2)),
    # normalize: markdown
    ("bold: **a repeated", markup.unbold, fill("**a ")),
    ("bold: __a repeated", markup.unbold, fill("__a ")),
    ("emphasis: a run of *", _sub(_norm._EMPHASIS), fill("*")),
    ("emphasis: *a repeated", _sub(_norm._EMPHASIS), fill("*a ")),
    ("images: openings", lambda t: markup.links(t, image=True, render=max), fill("![")),
    ("links: openings", lambda t: markup.links(t, image=False, render=max), fill("[")),
    ("links: no closing bracket", lambda t: markup.links(t, image=False, render=max), fill("[a](x")),
    ("links: titles never closed", lambda t: markup.links(t, image=False, render=max), fill('[a](x "')),
    ("table separator: spaces", _sub(_norm._TABLE_SEPARATOR), fill(" \t", after="x")),
    ("table separator: cells", _sub(_norm._TABLE_SEPARATOR), fill("| -- ", after="x")),
    ("decoration: a long rule inside", markup.undecorate, fill("=", before="=== a ", after=" b")),
    ("decoration: marks", markup.undecorate, fill("=#", after="x")),
    ("quote marks", _sub(_norm._QUOTE_MARK), fill("> ")),
    ("rules", _sub(_norm._RULE), fill("- ", after="x")),
    ("fences never closed", _sub(_norm._FENCE), fill("```\n")),
    ("leaders: dots", leaders, fill(". ", before="a", after="\n")),
    ("leaders: underscores", leaders, fill("_", before="a", after=" ")),
    ("white space", whitespace, fill(" \n")),
    ("code: brackets", looks_like_code, fill("[")),
    ("code: statements", looks_like_code, fill("{ ;\n")),
    # dedupe
    ("page markers", dedupe, fill("page ", after="1")),
    ("repeated sentences", dedupe, fill("Happy cycling! ")),
    # facts and lexicon, on one long sentence
    ("address: dashes", is_hard, fill("-A", SMALL)),
    ("address: dots", is_hard, fill("a.", SMALL)),
    ("address: e-mail without a domain", is_hard, fill("a@", SMALL)),
    ("contraction without an apostrophe", is_hard, fill("don", SMALL)),
    ("word lists: punctuation", is_hard, fill("(", SMALL)),
    ("exclamation: a run of !", is_filler, fill("!", SMALL, after="x")),
    ("navigation: spaces", is_navigation, fill(" \t", SMALL, after="x")),
    ("navigation: bars", is_navigation, fill(" | a", SMALL)),
    ("clauses", trim, fill("lovely, which is great; ", SMALL)),
    ("verdict: filler words", verdict, fill("lovely amazing ", SMALL)),
    ("language", is_english, fill("the le ")),
    # telegraph, on one long sentence
    ("praise that never ends", shorten, fill("lovely so ", SMALL, after="lovely.")),
    ("praise and intensifiers", shorten, fill("really truly lovely, ", SMALL, after=".")),
    ("article after a long number", shorten, fill("1", SMALL, after="(a day")),
    ("articles", shorten, fill("a ", SMALL)),
    ("copulas", shorten, fill("x is ", SMALL)),
    ("future passives", shorten, fill("it will be paid ", SMALL)),
    ("spaces before marks", shorten, fill(" ", SMALL, before="the a", after="x")),
    ("list item", shorten_line, fill("a the ", SMALL, before="- ")),
    # query
    ("a long heading above many lines", _rank("price day"), fill("price ", SMALL // 2, "# ", "\n") + _LINES_UNDER),
    ("an unclosed code block", _rank("code"), fill("code\n", SMALL, before="```\n")),
    ("many short lines", _rank("a"), fill("a 1\n", SMALL)),
    ("headings of every kind", _rank("a b"), fill("# a\n## b\nTitle\nlabel:\n| a | b |\n| 1 | 2 |\nx 1\n", SMALL)),
    # messages
    ("question after blank lines", _question, fill("\n \n", after="q")),
    ("question on one long last line", _question, fill("q ", before="a\n")),
]
# Whole stages, at the size the compressor gives them at most.
STAGES: list[tuple[str, Callable[[str], object], str]] = [
    ("facts stage: a line without a break", facts, fill("it is lovely ", SMALL)),
    ("telegraph stage: headings in capitals", telegraph, fill("PRICES AND FEES\nThe fee is £5.\n", SMALL)),
]


@pytest.mark.parametrize(("name", "rule", "text"), CASES + STAGES, ids=[c[0] for c in CASES + STAGES])
def test_rule_is_linear_on_hostile_input(
    name: str, rule: Callable[[str], object], text: str, per_char_s: float
) -> None:
    elapsed, allowed = seconds(lambda: rule(text)), budget(text, per_char_s)
    assert elapsed <= allowed, f"{name}: {elapsed:.2f} s for {len(text)} characters (budget {allowed:.2f} s)"


@pytest.mark.parametrize(
    "text",
    [fill("!", before="a", after=" b"), fill("**a ")],
    ids=["a run of !", "**a repeated"],
)
def test_compress_lossless_is_linear_on_hostile_input(text: str, per_char_s: float) -> None:
    elapsed, allowed = seconds(lambda: compress(text, "lossless")), budget(text, per_char_s)
    assert elapsed <= allowed, f"{elapsed:.2f} s (budget {allowed:.2f} s)"


def test_long_texts_get_lossless_at_most_and_huge_ones_are_sent_as_they_are() -> None:
    long = ordinary(FACTS_MAX_CHARS + 1)
    assert compress(long, "facts") == compress(long, "lossless")
    assert compress(long, "query", question="price", budget=10) == compress(long, "lossless")
    huge = "  <b>x</b>  \n" * (MAX_CHARS // 13 + 1)
    assert compress(huge, "lossless") == huge


def test_past_the_time_budget_the_text_is_sent_lossless(monkeypatch: pytest.MonkeyPatch) -> None:
    import reame.gateway.compress as package

    text = ordinary(20_000)
    monkeypatch.setattr(package, "TIME_BUDGET_S", -1.0)  # every deadline has passed
    assert compress(text, "facts") == package._lossless(text)
    assert compress(text, "query", question="price", budget=10) == package._lossless(text)
    # Lossless keeps what its first pass did.
    assert compress(text, "lossless") == package._lossless(text)


def test_markup_matchers_agree_with_their_patterns_on_ordinary_markup() -> None:
    text = "a **b** c __d__ ![e](f) [g](h \"t\") <script>x</script><!-- y -->\n=== T ===\n"
    assert markup.unbold(text).startswith("a b c d")
    assert markup.links(text, image=True, render=lambda alt, _url: alt).count("e") == 1
    assert markup.strip_scripts(text).count("script") == 0
    assert "<!--" not in markup.strip_comments(text)
    assert markup.undecorate(text).endswith("\nT\n")
