"""The repetition rules, one by one, and the line/sentence segmentation they rely on."""

from __future__ import annotations

import pytest

from reame.gateway.compress.dedupe import dedupe
from reame.gateway.compress.segment import LEVEL_CAPS, LEVEL_LABEL, LEVEL_TABLE, Kind, sentences, split_lines


def test_running_headers_with_page_numbers_go() -> None:
    text = "Terms - Page 1 of 3\nRule one.\n\nTerms - Page 2 of 3\nRule two.\n\nPage 3\nRule three."
    assert dedupe(text) == "Rule one.\n\nRule two.\n\nRule three."


def test_a_single_line_mentioning_a_page_is_content() -> None:
    assert dedupe("See page 4 of the manual for the 3 settings.") == "See page 4 of the manual for the 3 settings."


def test_a_sentence_repeated_at_once_is_said_once() -> None:
    assert dedupe("Happy cycling! Happy cycling! Happy cycling!") == "Happy cycling!"
    assert dedupe("Yes. No. Yes.") == "Yes. No. Yes."


def test_long_duplicate_lines_and_paragraphs_go() -> None:
    para = "Call us on 555 0101 any weekday between nine and five o'clock."
    assert dedupe(f"{para}\n\nOther.\n\n{para}") == f"{para}\n\nOther."
    block = "Our office is open daily.\nWe answer every single email within a day."
    assert dedupe(f"{block}\n\nMiddle.\n\n{block}") == f"{block}\n\nMiddle."


def test_short_fact_lines_under_other_headings_stay() -> None:
    text = "Tea\nPrice: £2\n\nCoffee\nPrice: £2"
    assert dedupe(text) == text


def test_a_line_right_after_its_twin_goes() -> None:
    assert dedupe("Save | Share | Report\nSave | Share | Report\nBody.") == "Save | Share | Report\nBody."


def test_fact_free_boilerplate_repeated_three_times_goes() -> None:
    text = "Book a tour\nA.\n\nBook a tour\nB.\n\nBook a tour\nC."
    assert dedupe(text) == "Book a tour\nA.\n\nB.\n\nC."
    twice = "Book a tour\nA.\n\nBook a tour\nB."
    assert dedupe(twice) == twice


def test_repeated_table_headers_stay() -> None:
    table = "Item | Size | Wholesale price | Unit\nLoaf | 800 g | £3 | each\n"
    text = "BREAD\n" + table + "\nCAKE\n" + table.replace("Loaf", "Tart") + "\nBUNS\n" + table.replace("Loaf", "Bun")
    assert dedupe(text).count("Item | Size | Wholesale price | Unit") == 3


def test_code_is_never_deduplicated() -> None:
    text = "```\nx = 1\nx = 1\n```"
    assert dedupe(text) == text


@pytest.mark.parametrize(
    ("line", "kind", "level"),
    [
        ("## Pricing", Kind.HEADING, 2),
        ("OPENING HOURS", Kind.HEADING, LEVEL_CAPS),
        ("1. INTRODUCTION", Kind.HEADING, LEVEL_CAPS),
        ("Lease terms", Kind.HEADING, 7),
        ("Our prices are:", Kind.HEADING, LEVEL_LABEL),
        ("- a list item", Kind.ITEM, 0),
        ("3) third", Kind.ITEM, 0),
        ("A sentence of prose.", Kind.TEXT, 0),
    ],
)
def test_lines_are_typed(line: str, kind: Kind, level: int) -> None:
    (typed,) = split_lines(line)
    assert (typed.kind, typed.level) == (kind, level)


def test_a_table_header_is_a_heading_over_its_rows() -> None:
    lines = split_lines("A | B\n1 | 2\n3 | 4")
    assert [(line.kind, line.level) for line in lines] == [
        (Kind.HEADING, LEVEL_TABLE), (Kind.TABLE, 0), (Kind.TABLE, 0)
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
        ("It costs £3.10 each. Ask Mr. Smith, e.g. by phone.",
         ["It costs £3.10 each.", "Ask Mr. Smith, e.g. by phone."]),
        ('He said "Go." Then left.', ['He said "Go."', "Then left."]),
        ("Company No. 0987 is ours. J. Smith signs.", ["Company No. 0987 is ours.", "J. Smith signs."]),
        ("lower. case stays", ["lower. case stays"]),
    ],
)
def test_sentences_split_at_real_boundaries(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected
    assert " ".join(sentences(text)) == text
