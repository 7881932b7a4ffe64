"""The word lists behind the facts rules: what marks a fact, what marks filler.

Every list is general English usage for business documents (prices, terms, policies,
listings, agreements), not the wording of any particular document. Matching is
case-insensitive on whole words; phrases match with any run of spaces.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final


def words(*items: str) -> re.Pattern[str]:
    r"""Compile whole-word alternatives; ``*`` at the end of an item allows any ending.

    Every item starts with a letter, so ``(?=\w)`` changes no match; it stops the
    attempt at once where no word starts: a run of punctuation tried all the
    alternatives at each of its characters (40 times slower than prose).
    """
    parts = []
    for item in sorted(items, key=len, reverse=True):
        if not item[:1].isalpha():
            raise ValueError(f"a word list item must start with a letter: {item!r}")
        stem = re.escape(item.rstrip("*")).replace(r"\ ", r"\s+")
        parts.append(stem + (r"\w*" if item.endswith("*") else ""))
    return re.compile(r"(?<![\w'\u2019-])(?=\w)(?:" + "|".join(parts) + r")(?![\w-])", re.I)


def _all(groups: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(item for group in groups for item in group)


# Numbers written as words, and ordinals: a number is a fact however it is written.
NUMBER_WORDS: Final = words(
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "thirty",
    "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred*", "thousand*", "million*", "billion*",
    "dozen*", "half", "halves", "quarter", "twice", "thrice", "once",
    "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
    "eleventh", "twelfth", "percent", "per cent",
)

# Calendar words: days, months, and how often something happens.
DATE_WORDS: Final = words(
    "monday*", "tuesday*", "wednesday*", "thursday*", "friday*", "saturday*", "sunday*",
    "january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
    "november", "december", "noon", "midday", "midnight", "daily", "weekly", "fortnightly", "monthly",
    "quarterly", "annually", "yearly", "hourly", "weekday*", "weekend*", "overnight", "bank holiday*",
    "public holiday*",
)
# "may" the verb is not a month; it still marks a permission, which is a rule anyway.

NEGATIONS: Final = words(
    "not", "no", "never", "none", "nothing", "nobody", "nowhere", "neither", "nor", "cannot", "without",
    "unable", "non", "nil", "neither", "prohibit*", "forbid*", "ban", "banned", "void", "refuse*", "decline*",
    "exclud*",
)
# Contractions: don't, isn't, won't, can't (any apostrophe). Searched for only, so tried
# from the start of a word only: from inside it, "\w+" reaches the same "n't" (linear).
NEGATED_CONTRACTION: Final = re.compile(r"(?<!\w)\w+n['\u2019]t\b|\bcan['\u2019]t\b|\bwon['\u2019]t\b", re.I)
# Hyphenated prefixes: non-refundable, no-show, non-smoking.
NEGATED_PREFIX: Final = re.compile(r"(?<![\w-])(?:non|no|un)-\w", re.I)

CONDITIONS: Final = words(
    "if", "unless", "except*", "only", "provided", "providing", "subject to", "as long as", "so long as",
    "otherwise", "until", "till", "whenever", "in case", "in the event", "on condition", "conditional*", "depend*",
    # "where"/"when"/"as" phrases of legal drafting: "VAT is added where applicable".
    "where applicable", "if applicable", "when applicable", "as applicable", "where possible", "wherever possible",
    "where necessary", "when necessary", "where required", "when required", "where appropriate", "as appropriate",
)

# Obligations, permissions and limits: the grammar of rules.
RULES: Final = words(
    "must", "shall", "can", "able to", "required", "require", "requires", "mandatory", "compulsory", "obliged",
    "may only",
    "allowed", "permitted", "entitled", "at least", "at most", "up to", "no more than", "no later than",
    "no earlier than", "more than", "less than", "fewer than", "minimum", "maximum", "limit*", "capped",
    "deadline", "expire*", "valid", "void", "is welcome", "are welcome", "very welcome",
)

# What a term sheet, price list or listing is made of; a sentence with one of these
# and no filler is kept even without a number.
POLICY: Final = words(*_all((
    ("accept*", "allow*", "apply", "applies", "available", "availability", "charge*", "cost*", "covers",
     "covered", "deliver*", "deposit*", "discount*", "due", "fee", "fees", "fine", "free", "guarantee*",
     "include*", "including", "invoice*", "liab*", "means", "paid", "pay", "payable", "payment*",
     "penalt*", "permit*", "price*", "pricing", "rate", "rates", "refund*", "rent", "reserved", "responsib*",
     "return*", "warrant*"),
    ("address", "call", "contact", "email", "e-mail", "phone", "telephone", "tel", "fax", "online", "website",
     "portal", "office", "located", "opens", "closed", "closes"),
    ("refers to", "defined as", "stands for"),
)))

# Praise, pleasantries and sales talk. One of these in a sentence without a hard fact
# makes it filler.
FILLER: Final = words(*_all((
    ("amazing", "awesome", "beautiful*", "best", "brilliant", "charm*", "delight*", "excellent", "exceptional",
     "fantastic", "favourite*", "favorite*", "finest", "gorgeous", "great", "incredibl*", "lovely", "love",
     "loved", "loves", "magnificent", "outstanding", "perfect*", "remarkable", "spectacular", "splendid",
     "stunning", "superb", "terrific", "wonderful*", "world-class", "award-winning", "top-notch", "unbeatable",
     "unrivalled", "unrivaled", "passionate*", "proud*", "pride", "adore*", "enjoy*", "glad", "pleased",
     "thrilled", "excited", "exciting", "dream*", "special", "cosy", "cozy", "bright", "airy", "stress-free",
     "hassle-free", "effortless*", "seamless*", "friendly", "trusted", "reliable", "dedicated", "genuine*",
     "honest*", "happy", "happier", "fun", "delicious", "fresh", "ideal", "easy", "easier", "simple", "simply",
     "sought-after", "truly", "really", "absolutely", "incredible", "quality", "experience", "experienced",
     "expert*", "professional*", "family-run", "locally", "independent", "caring", "curious", "helpful",
     "deserve*", "believe*", "promise", "heart", "smile*", "hesitate", "fussy", "cheers", "regards",
     "wishes", "hello", "hi", "hey", "thank*", "congratulations", "recommending", "highly"),
    ("welcome to", "welcome home", "welcome back", "look forward", "looking forward", "feel free",
     "get in touch", "why choose", "we care", "you'll love", "you will love", "in the heart of",
     "at the heart of", "word of mouth", "here to help", "happy to help", "like to think", "fits your needs",
     "suits your needs", "meets your needs", "whatever your needs", "look no further", "you'll notice",
     "you will notice", "make it your own", "feel at home", "home from home", "go the extra mile",
     "second to none", "keep coming back", "cut corners", "stand out", "stands out"),
)))


# The commonest English function words: at least one word in five of English prose
# (measured 17-31 % on business documents, compressed or not) and none of French,
# German, Spanish, Italian, Portuguese or Dutch.
_ENGLISH: Final = frozenset({
    "the", "and", "of", "to", "is", "are", "you", "your", "we", "our", "for", "with", "that", "this", "will",
    "be", "it", "not", "by", "from", "at", "or", "can", "if", "have", "has",
})
# Their counterparts in those languages, none of them an English word: enough of them
# tell a paragraph in another language from a price list, which has neither.
_OTHER: Final = frozenset({
    "le", "la", "les", "des", "du", "est", "et", "une", "un", "pour", "avec", "dans", "sur", "pas", "nous",
    "vous", "qui", "que", "der", "das", "und", "ist", "nicht", "mit", "für", "ein", "eine", "den", "dem",
    "zu", "auf", "wir", "sie", "el", "los", "las", "del", "y", "es", "una", "con", "para", "por", "se", "il",
    "di", "che", "della", "non", "sono", "da", "em", "os", "uma", "não", "het", "een", "van", "niet",
    "zijn", "wij", "voor", "op",
})
LANGUAGE_MIN_SHARE: Final = 0.08
# Fewer words than this say too little about their language; they are taken as English.
LANGUAGE_MIN_WORDS: Final = 40
_LETTERS: Final = re.compile(r"[^\W\d_]+")


def is_english(text: str) -> bool:
    """Tell whether a whole document reads as English: enough English function words.

    A document of another language, or of no prose at all, fails: the facts rules know
    English words only, so it keeps every word.
    """
    found = _LETTERS.findall(text.lower())
    return len(found) < LANGUAGE_MIN_WORDS or _share(found, _ENGLISH) >= LANGUAGE_MIN_SHARE


def is_other_language(text: str) -> bool:
    """Tell whether a paragraph of an English document is in another language it names by its function words.

    Stricter than ``not is_english``: a price list or an address block inside an
    English document has function words of no language, and is read with the rest.
    """
    found = _LETTERS.findall(text.lower())
    return (
        len(found) >= LANGUAGE_MIN_WORDS
        and _share(found, _ENGLISH) < LANGUAGE_MIN_SHARE
        and _share(found, _OTHER) >= LANGUAGE_MIN_SHARE
    )


def _share(words: list[str], among: frozenset[str]) -> float:
    return sum(word in among for word in words) / len(words)
