"""The telegraph rules one by one: fewer words, the same facts."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reame.gateway.compress import lexicon
from reame.gateway.compress.telegraph import shorten, shorten_line, telegraph


@pytest.mark.parametrize(
    ("sentence", "short"),
    [
        ("The deposit is refundable.", "Deposit refundable."),
        ("Rent is due on the 1st of the month.", "Rent due on 1st of month."),
        ("Late returns will be charged at €10.", "Late returns charged at €10."),
        ("There is no fee for a cancellation.", "No fee for cancellation."),
        ("Please note that the office closes at 17:00.", "Office closes at 17:00."),
        ("Please bring your ID.", "Bring your ID."),
        ("You need ID in order to collect the bike.", "You need ID to collect bike."),
        ("Helmets are included free of charge.", "Helmets included free."),
        ("This stunning, bright and airy flat has 2 rooms.", "This bright and airy flat has 2 rooms."),
        ("A truly stunning flat with 2 rooms.", "Flat with 2 rooms."),
    ],
)
def test_closed_class_words_go(sentence: str, short: str) -> None:
    assert shorten(sentence) == short


@pytest.mark.parametrize(
    "sentence",
    [
        "It costs €4 an hour.",  # "an" after a price is "per"
        "We visit twice a year.",
        "Allow a few minutes.",
        "It lasts a day.",
        "Ask the Client first.",  # an article before a capital belongs to a name
        "Report it to An Garda Síochána.",
        "If you are late, you will be asked to pay.",  # "you are", "you will be": the verb stays
        "What is included?",  # questions are left alone
        "Cats are welcome.",  # "are welcome" is the rule itself
        "Whitening will not change the colour.",
        "Our Great Room has 9 seats.",  # a capitalised word is a name, not praise
    ],
)
def test_words_that_carry_a_count_a_name_or_the_verb_stay(sentence: str) -> None:
    out = shorten(sentence)
    for kept in re.findall(r"\ban?\b(?= (?:hour|year|few|day))|\bA[nN]?\b|\bthe Client\b|you are|will be|will not"
                           r"|are welcome|Great|What is", sentence):
        assert kept in out, (kept, out)


def test_list_markers_and_clause_numbers_stay_in_front() -> None:
    assert shorten_line("- The deposit is £50.") == "- Deposit £50."
    assert shorten_line("4.2 The fee is payable in advance.") == "4.2 Fee payable in advance."


def test_caps_headings_become_markdown_headings_in_sentence_case_keeping_acronyms_and_names() -> None:
    text = "NHS TREATMENT AT HARBOURSIDE\nThe NHS is free at Harbourside for 2 groups.\n\nOPENING HOURS\nOpen 9:00."
    assert telegraph(text) == (
        "# NHS treatment at Harbourside\nThe NHS free at Harbourside for 2 groups.\n\n# Opening hours\nOpen 9:00."
    )


def test_tables_and_other_headings_are_left_alone() -> None:
    text = "## The prices\nItem | The price\nThe loaf | £3"
    assert telegraph(text) == text


NEGATION_OR_CONDITION = re.compile(
    "|".join(p.pattern for p in (lexicon.NEGATIONS, lexicon.CONDITIONS)), re.I
)
WORDS = st.sampled_from([
    "the", "a", "an", "is", "are", "will", "be", "charged", "please", "note", "that", "there", "no", "not",
    "if", "unless", "only", "fee", "day", "hour", "€4", "12", "twice", "stunning", "Client", "you", "free",
    "of", "charge", "in", "order", "to", "welcome", ",", "and",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS, min_size=1, max_size=16).map(" ".join))
def test_numbers_negations_and_conditions_survive_in_order_and_twice_changes_nothing(sentence: str) -> None:
    out = shorten(sentence)
    assert re.findall(r"\d+", out) == re.findall(r"\d+", sentence)
    assert [w.lower() for w in NEGATION_OR_CONDITION.findall(out)] == [
        w.lower() for w in NEGATION_OR_CONDITION.findall(sentence)
    ]
    assert shorten(out) == out


def test_a_copula_before_an_article_stays_with_it() -> None:
    assert shorten("Team is the plan for you.") == "Team is the plan for you."
    assert shorten("Starter is a plan for one.") == "Starter is a plan for one."


def test_there_is_no_keeps_the_capital_it_had() -> None:
    assert shorten("There is no fee.") == "No fee."
    assert shorten("Sadly there are never refunds.") == "Sadly never refunds."
