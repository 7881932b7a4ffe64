"""Fold a word to the form ``query`` compares: a crude stem, then a small synonym table.

A question rarely uses the document's own words ("the last day of the season" asks
about "Open daily 1 April - 31 October"), so :func:`fold` maps each word to a stem
("prices", "priced", "price" -> "pric") and the stems of common business words to one
name per group ("fee", "cost", "charge" -> "price"). The table is small and general on
purpose: it says what any business document means by these words, not what one exam
asks. Pure and deterministic.
"""

from __future__ import annotations

from typing import Final

# Longest first: one suffix is taken off, and only when three letters or more remain.
_SUFFIXES: Final = (
    "ations", "ation", "ments", "ment", "ings", "ing", "ers", "ies", "ied", "ly", "er", "ed", "es", "s", "e", "y",
)
_VOWELS: Final = frozenset("aeiou")

# One group per line: its name, then the words that mean the same in a business text.
_GROUPS: Final = """
price: price cost fee charge rate tariff fare pricing expensive cheap
pay: pay payment paid invoice bill billing payable
refund: refund reimburse reimbursement repay repayment
cancel: cancel cancellation terminate termination
open: open opening season seasonal operate
end: last end ending until close closing closed final expire expiry finish
start: first start begin beginning commence earliest
day: day daily date
week: week weekly fortnight
month: month monthly
year: year annual annually yearly
phone: phone tel telephone mobile call ring
email: email e-mail mail
website: website web site www online url
address: address addr located location
deliver: deliver delivery ship shipping dispatch courier
minimum: minimum min least lowest
maximum: maximum max most limit cap highest ceiling
discount: discount reduction concession cheaper saving
late: late overdue delay delayed
deposit: deposit bond security
customer: customer client guest member tenant patient user hirer renter
staff: staff employee team personnel
allow: allow allowed permit permitted
forbid: forbid forbidden prohibit prohibited ban banned
duration: duration long length period
size: size area square big large
damage: damage damaged broken break repair faulty defect
insurance: insurance insure insured cover coverage
pet: pet dog cat animal
parking: parking park car vehicle
buy: buy purchase order
support: support help helpdesk assistance
reply: reply respond response acknowledge
lose: lose lost stolen theft missing
child: child children kid kids minor junior
require: require required requirement need needed must mandatory necessary obligatory
book: book booking reserve reservation appointment
"""


def stem(word: str) -> str:
    """Take one English suffix off a lower-case word: "deliveries", "delivered", "delivery" -> "deliver"."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    # "cancelled" and "cancel", "stopped" and "stop": a doubled final consonant is one.
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in _VOWELS and word[-1].isalpha():
        word = word[:-1]
    return word


def _table() -> dict[str, str]:
    table: dict[str, str] = {}
    for row in _GROUPS.strip().splitlines():
        name, words = row.split(":")
        for word in words.split():
            table.setdefault(stem(word), name)
    return table


_TABLE: Final = _table()


def fold(word: str) -> str:
    """Return the name ``query`` compares ``word`` by: its group's, else its stem."""
    stemmed = stem(word)
    return _TABLE.get(stemmed, stemmed)
