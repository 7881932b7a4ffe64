"""Every mode is deterministic and idempotent, on any text; query ranks under its budget."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reame.gateway.compress import approximate_tokens, compress
from reame.gateway.compress.query import fold, rank, terms
from reame.shared.modes import CompressMode

PIECES = st.sampled_from([
    "Price: £3.10", "We love you!", "Open 9:00–17:00.", "We do not deliver on Sundays.", "<br>", "&nbsp;",  # noqa: RUF001
    "&amp;", "**", "- ", "## ", "| ", "---", "\n", "\n\n", " ", "Happy days! ", "Page 2 of 3", "1.2 ", "If so, ",
    "Thank you. ", "Call 0117 496 0291.", "```", "> ", "[Book now]", "(see above)", "…", "ﬁ", "\u00a0",
])
TEXT = st.one_of(
    st.lists(PIECES, max_size=40).map("".join),
    st.text(max_size=300),
)


@settings(max_examples=400, deadline=None)
@given(TEXT, st.sampled_from(list(CompressMode)))
def test_compressing_twice_changes_nothing_more(text: str, mode: str) -> None:
    once = compress(text, mode, question="When do you open?", budget=40)
    assert compress(once, mode, question="When do you open?", budget=40) == once


@settings(max_examples=200, deadline=None)
@given(TEXT, st.sampled_from(list(CompressMode)))
def test_compression_is_deterministic(text: str, mode: str) -> None:
    assert compress(text, mode, question="q", budget=40) == compress(str(text), mode, question="q", budget=40)


def test_off_is_the_identity_and_unknown_modes_are_refused() -> None:
    assert compress("  <b>x</b>  ", "off") == "  <b>x</b>  "
    with pytest.raises(ValueError, match="unknown compression mode 'zip'"):
        compress("x", "zip")


def test_code_is_left_alone_in_every_mode() -> None:
    code = "def f(x):\n    if x:\n        return 1\n    return 2\n\n\nclass A:\n    pass\n"
    for mode in CompressMode:
        assert compress(code, mode) == code


DOC = """## Prices
A loaf costs £3.10.
A cake costs £24.

## Delivery
We deliver Monday to Saturday between 5:30 and 9:00.
We do not deliver on Sundays.

## Contact
Call 0117 496 0291."""


def test_query_keeps_the_relevant_lines_with_their_headings_under_the_budget() -> None:
    out = rank(DOC, "Do you deliver on Sundays?", 20, approximate_tokens)
    assert "We do not deliver on Sundays." in out and "## Delivery" in out
    assert "£3.10" not in out
    assert approximate_tokens(out) <= 20 + 5  # line breaks are counted as one token each


def test_query_fills_the_budget_in_document_order_when_nothing_matches() -> None:
    out = rank(DOC, "Hello?", 12, approximate_tokens)
    assert out.startswith("## Prices\nA loaf costs £3.10.")


def test_query_returns_everything_when_it_fits() -> None:
    assert rank(DOC, "anything", 10_000, approximate_tokens) == DOC


def test_query_folds_inflections_and_ignores_stopwords() -> None:
    assert fold("days") == "day" and fold("delivered") == "deliver" and fold("booking") == "book"
    assert terms("What is the price of the cakes?") == {"price", "cak"}


def test_text_that_is_not_english_gets_lossless_at_most() -> None:
    french = (
        "Le vélo coûte 15 € par jour. Nous sommes une équipe formidable et nous adorons nos clients. "
        "La caution est de 50 €. Le magasin a ouvert en 2009 et il a beaucoup de vélos. "
        "Les animaux ne sont pas admis. Notre équipe vous accueille avec plaisir dans notre magnifique boutique."
    )
    assert compress(french + "<br>", "facts") == compress(french, "lossless") == french
    english = "Our wonderful team loves you! " * 10 + "The fee is £5."
    assert compress(english, "facts") == "Fee £5."


def test_query_reads_a_table_row_with_its_header_and_tel_as_phone() -> None:
    doc = (
        "| Plan | Price | Included storage |\n| Starter | £5 | 5 GB |\n| Team | £9 | 50 GB |\n\n"
        + "\n\n".join(f"The Team plan has feature number {i}." for i in range(12))
        + "\n\nTel: 0117 496 0291"
    )
    out = rank(doc, "How much storage is included in the Team plan?", 30, approximate_tokens)
    assert "| Team | £9 | 50 GB |" in out and "| Plan | Price | Included storage |" in out
    assert "0117 496 0291" in rank(doc, "What is the telephone number?", 12, approximate_tokens)


def test_a_paragraph_that_is_not_english_is_left_as_it_is_inside_an_english_document() -> None:
    french = (
        "Les animaux ne sont pas admis dans les chambres, sauf les chiens guides. Nous sommes une équipe "
        "formidable et nous adorons nos clients. La caution est de 50 € et elle est rendue au départ si la "
        "chambre est en bon état. Le petit déjeuner est servi de 7 h à 10 h."
    )
    english = "The deposit is £50. Our wonderful team loves you! " * 8
    out = compress(english + "\n\n" + french, "facts")
    assert out.endswith("\n\n" + french)
    assert "wonderful" not in out


FILLER = [f"Item {i} of the catalogue ships from the northern warehouse within two working days." for i in range(70)]
CODE_WORD = "The secret code word is PELICAN-77."


@pytest.mark.parametrize("mode", ["query", "auto"])
def test_a_document_in_one_long_paragraph_keeps_its_matching_sentence(mode: str) -> None:
    paragraph = " ".join([*FILLER[:35], CODE_WORD, *FILLER[35:]])  # one line, ~1,400 tokens
    question = "What is the secret code word?"
    if mode == "query":
        out = compress(paragraph, CompressMode.QUERY, question=question, budget=96)
    else:
        from reame.gateway.compress import excerpts

        out = excerpts(paragraph, question, 96)
    assert "PELICAN-77" in out
    assert 0 < approximate_tokens(out) <= 96


def test_a_long_paragraph_without_a_question_still_keeps_its_first_sentences() -> None:
    paragraph = " ".join(FILLER)
    out = compress(paragraph, CompressMode.QUERY, question="", budget=64)
    assert out and approximate_tokens(out) <= 64
    assert out.split("\n")[0].startswith("Item 0")


def test_text_without_punctuation_is_ranked_in_runs_of_words() -> None:
    words = " ".join(f"token{i}" for i in range(600)) + " the vault code is heron " + " ".join(
        f"word{i}" for i in range(600)
    )
    out = rank(words, "vault code", 64, approximate_tokens)
    assert "vault code" in out
    assert approximate_tokens(out) <= 64
