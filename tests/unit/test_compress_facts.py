"""The facts rules one by one, and the property that no number, negation or condition is lost."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reame.gateway.compress import compress
from reame.gateway.compress.facts import Verdict, facts, is_hard, is_navigation, trim, verdict
from reame.gateway.compress.segment import sentences


@pytest.mark.parametrize(
    "sentence",
    [
        "The fee is £45.",
        "Open 9:00–17:30.",  # noqa: RUF001
        "A 5-year warranty.",
        "Write to help@example.com.",
        "See www.example.org for details.",
        "We have four rooms.",
        "It takes a dozen coats.",
        "The clinic runs on Tuesdays.",
        "Deliveries stop in August.",
        "We do not deliver there.",
        "Pets aren't allowed.",
        "Refunds are never given.",
        "It is non-refundable.",
        "No smoking anywhere.",
        "Cover is void if the bike was left unlocked.",
        "Free unless you cancel late.",
        "Everything except the frame.",
        "Open only to members.",
        "Keys stay with us until you pay.",
    ],
)
def test_sentences_with_numbers_dates_contacts_negations_or_conditions_are_hard(sentence: str) -> None:
    assert verdict(sentence) is Verdict.HARD


@pytest.mark.parametrize(
    "sentence",
    [
        "We love our customers!",
        "Thank you for choosing us.",
        "Our friendly team is simply the best.",
        "It is a truly wonderful place.",
        "We look forward to seeing you.",
        "Welcome to the family.",
        "Happy cycling!",
    ],
)
def test_praise_pleasantries_and_exclamations_are_filler(sentence: str) -> None:
    assert verdict(sentence) is Verdict.FILLER


def test_terms_vocabulary_is_soft_even_beside_praise() -> None:
    assert verdict("Keys are handed over at the Leasing Office.") is Verdict.SOFT
    assert verdict("Helmets are included with every rental.") is Verdict.SOFT
    assert verdict("Helmets are included free with a map of our favourite routes.") is Verdict.SOFT


def test_plain_prose_is_kept_since_it_may_state_a_fact_in_words_no_list_knows() -> None:
    sentence = "Downgrades take effect at the start of your next billing period."
    assert verdict(sentence) is Verdict.PLAIN
    assert facts(sentence) == sentence
    assert facts("Our team is here to help you.") == ""


def test_questions_and_instructions_to_the_model_are_kept() -> None:
    assert verdict("Is my data secure?") is Verdict.QUESTION
    assert verdict("You are a helpful assistant.") is Verdict.QUESTION
    assert verdict("Answer briefly, in a few words.") is Verdict.QUESTION


def test_as_if_is_a_comparison_not_a_condition() -> None:
    assert not is_hard("We treat your home as if it were ours.")


@pytest.mark.parametrize(
    ("line", "navigation"),
    [
        ("Home > Services > Resin Flooring", True),
        ("[Start your free trial] [Book a demo]", True),
        ("Get a quote · Book a survey · See our gallery", True),
        ("Fully insured · Member of the Federation of Resin Flooring Installers", False),
        ("Prices are per item.", False),
    ],
)
def test_navigation_lines_are_recognised(line: str, navigation: bool) -> None:
    assert is_navigation(line) is navigation


def test_filler_clauses_go_but_fact_clauses_stay() -> None:
    assert trim("We would love to hear from you, and there is never any pressure.") == "There is never any pressure."
    assert trim("The fee is £5, which is lovely.") == "The fee is £5."
    # A kept dependent clause keeps the clause it hangs on.
    assert trim("We greatly enjoy it, which is why it costs £5.") == "We greatly enjoy it, which is why it costs £5."


def test_a_sentence_with_a_condition_is_kept_whole() -> None:
    sentence = "Cancel at least 2 hours before, or the time is lost; we love punctuality if you please."
    assert trim(sentence) == sentence


def test_headings_stay_when_their_section_keeps_a_fact() -> None:
    text = "## Prices\nA loaf is £3.\n\n## About us\nWe are wonderful!\n\n## Hours\n### Weekdays\nOpen 9:00 to 17:00."
    assert facts(text) == "## Prices\nA loaf is £3.\n\n## Hours\n### Weekdays\nOpen 9:00 to 17:00."


def test_labels_and_table_headers_keep_their_context() -> None:
    text = "Our prices:\n- Loaf: £3\n\nItem | Weight | Price\nLoaf | 800 g | £3\nBun | 80 g | £1"
    assert facts(text) == text


def test_short_list_items_are_facts_by_their_form() -> None:
    assert facts("Home highlights\n- Private balcony\n- Secure bike storage\n- Absolutely amazing views") == (
        "Home highlights\n- Private balcony\n- Secure bike storage"
    )


def test_numbered_clause_labels_are_not_facts_in_a_numbered_document() -> None:
    text = "1.1 We are passionate about service.\n1.2 Rent is due on the 1st.\n1.3 We adore our clients."
    assert facts(text) == "1.2 Rent is due on the 1st."
    assert facts("1.1 We are passionate about service.") == "1.1 We are passionate about service."


# ---- properties --------------------------------------------------------------------

ITEMS = st.sampled_from(["loaf", "helmet", "desk", "locker", "parking space", "guest pass", "e-bike"])
NAMES = st.sampled_from(["Maple Court", "Harbour Street", "Dog Friday", "Team plan", "Wood Quay"])
PRICES = st.builds(
    lambda cur, whole, cents: f"{cur}{whole:,}" + (f".{cents:02d}" if cents is not None else ""),
    st.sampled_from(["£", "$", "€"]), st.integers(0, 99_999), st.one_of(st.none(), st.integers(0, 99)),
)
NUMBERS = st.one_of(
    st.integers(0, 10_000).map(str),
    st.builds(lambda a, b: f"{a}.{b}", st.integers(0, 99), st.integers(0, 99)),
    st.integers(1, 99).map(lambda n: f"{n}%"),
    st.builds(lambda h, m: f"{h}:{m:02d}", st.integers(0, 23), st.integers(0, 59)),
    st.builds(lambda a, b, c: f"0{a} {b} {c}", st.integers(100, 999), st.integers(100, 999), st.integers(1000, 9999)),
)


@st.composite
def fact(draw: st.DrawFn) -> tuple[str, list[str]]:
    """One fact sentence and the fragments that must survive (numbers, negations, conditions + clause)."""
    item, name, price, number = draw(ITEMS), draw(NAMES), draw(PRICES), draw(NUMBERS)
    templates = [
        (f"A {item} costs {price} per day.", [price]),
        (f"Orders placed after {number} are sent the next day.", [number]),
        (f"We do not rent a {item} to anyone under {number}.", ["not", number]),
        (f"The {item} is free unless you return it after {number}.", [f"unless you return it after {number}"]),
        (f"If you cancel late, we charge {price}.", ["If you cancel late", price]),
        (f"{name} never opens before {number}.", ["never", number]),
        (f"A {item} can't be booked at {name}.", ["can't"]),
        (f"Refunds are given only if the {item} is unused.", [f"only if the {item} is unused"]),
        (f"Guests may stay, except on {name} days.", [f"except on {name} days"]),
        (f"There is no fee for a {item}, provided that you book {number} days ahead.",
         ["no fee", f"provided that you book {number} days ahead"]),
    ]
    sentence, keep = draw(st.sampled_from(templates))
    return sentence, keep


FILLER = st.sampled_from([
    "We love our customers!",
    "Thank you for choosing us.",
    "Our friendly team is simply the best in town.",
    "It is a truly wonderful place to work.",
    "We look forward to seeing you soon.",
    "Enjoy your visit and have fun!",
    "Our passionate experts are always happy to help.",
    "Everyone says we are amazing.",
])
MARKUP = st.sampled_from(["{}", "- {}", "**{}**", "{}<br>", "<p>{}</p>", "{}&nbsp;"])


@st.composite
def document(draw: st.DrawFn) -> tuple[str, list[str], list[str]]:
    """A document of paragraphs mixing facts and filler; what must survive; what must go."""
    keep: list[str] = []
    filler: list[str] = []
    paragraphs = []
    for _ in range(draw(st.integers(1, 6))):
        sentences = []
        for _ in range(draw(st.integers(1, 5))):
            if draw(st.booleans()):
                sentence, fragments = draw(fact())
                keep += fragments
            else:
                sentence = draw(FILLER)
                filler.append(sentence)
            sentences.append(sentence)
        joiner = draw(st.sampled_from([" ", "\n"]))
        paragraphs.append(draw(MARKUP).format(joiner.join(sentences)))
    if draw(st.booleans()):
        paragraphs.insert(0, "## " + draw(NAMES))
    return "\n\n".join(paragraphs), keep, filler


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


# The words telegraph may drop around a fact (see gateway.compress.telegraph).
_DROPPABLE = re.compile(r"\b(?:the|an?|is|are)\b ?", re.I)


def _telegraphic(text: str) -> str:
    """``text`` without the words telegraph may drop, lower-cased: what a kept fact still reads as."""
    return _DROPPABLE.sub("", _flat(text)).lower()


@settings(max_examples=300, deadline=None)
@given(document())
def test_facts_keeps_every_number_negation_and_condition_and_drops_the_filler(
    case: tuple[str, list[str], list[str]],
) -> None:
    text, keep, filler = case
    out = _flat(compress(text, "facts"))
    for fragment in keep:
        assert _telegraphic(fragment) in _telegraphic(out), (fragment, text, out)
    for sentence in filler:
        assert sentence not in out, (sentence, out)


WORDS = st.sampled_from([
    "the", "fee", "is", "not", "no", "never", "if", "unless", "only", "except", "until", "we", "love", "you",
    "great", "Maple", "Court", "price", "per", "day", "Monday", "can't", "open", "and", "so", "which", "a",
])
TOKEN = st.one_of(WORDS, WORDS, WORDS, NUMBERS, PRICES)
LINE = st.builds(
    lambda first, rest, ends: " ".join([first, *(w + e for w, e in zip(rest, ends, strict=False))]),
    WORDS, st.lists(TOKEN, max_size=14), st.lists(st.sampled_from(["", "", "", ".", ",", "!", "?", ";", ":"]),
                                                   min_size=14, max_size=14),
)
TEXT = st.lists(st.one_of(LINE, st.just("")), min_size=1, max_size=12).map("\n".join)
NEGATION = re.compile(r"\b(?:not|no|never|can't)\b", re.I)
CONDITION = re.compile(r"\b(?:if|unless|only|except|until)\b", re.I)


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_no_number_negation_or_condition_word_of_any_text_is_lost(text: str) -> None:
    out = compress(text, "facts")
    for number in set(re.findall(r"\d+", text)):
        assert number in out, (number, text, out)
    for pattern in (NEGATION, CONDITION):
        assert {w.lower() for w in pattern.findall(text)} <= {w.lower() for w in pattern.findall(out)}


def test_asides_without_a_fact_go() -> None:
    assert facts("The coffee is free (although it is really good).") == "The coffee is free."
    assert facts("The coffee is free (see Rent & Fees).") == "The coffee is free (see Rent & Fees)."
    assert facts("Open daily (except Sundays).") == "Open daily (except Sundays)."
    assert facts("It adds single sign-on (SSO) for all.") == "It adds single sign-on (SSO) for all."


def test_idioms_with_one_are_not_counts() -> None:
    assert not is_hard("It is one of the nicest rooms around.")
    assert is_hard("It takes one day.")


def test_a_sentence_may_start_with_a_name_the_document_uses_elsewhere() -> None:
    text = "### Team\nTeam adds approval workflows. If you have a growing team, Team is the plan for you."
    assert "Team adds approval workflows." in facts(text)
    assert "Quality adds value." not in facts("Quality adds value. It is what we do.")


def test_a_list_of_things_is_kept() -> None:
    sentence = "All products are made in a bakery that handles wheat, gluten, nuts, sesame and soya."
    assert facts(sentence) == sentence


def test_legal_condition_phrases_are_conditions() -> None:
    sentence = "Prices exclude VAT, which is added at checkout where applicable."
    assert trim(sentence) == sentence


def test_a_plain_clause_in_a_sentence_of_facts_stays_and_only_filler_clauses_go() -> None:
    sentence = "Treatment is free for children under 18, and for patients receiving certain benefits."
    assert trim(sentence) == sentence
    assert trim("Parking costs £5, and we absolutely love our guests.") == "Parking costs £5."


def test_no_full_stop_ends_a_sentence_unless_a_number_follows() -> None:
    assert sentences("No. There is no fee. See No. 5 here.") == ["No.", "There is no fee.", "See No. 5 here."]
