"""Lookup drafting: the incremental n-gram index agrees with a plain scan of the text."""

from __future__ import annotations

import random

import pytest

from reame.worker.speculative.ngram import MAX_ALIGNMENT, NO_GUESS, LookupDrafter, NgramIndex


def scan_follower(tokens: list[int], order: int) -> int | None:
    """The reference: scan backwards for the latest earlier occurrence of the last ``order`` tokens."""
    end = len(tokens)
    if not 1 <= order <= end:
        return None
    tail = tokens[end - order :]
    for start in range(end - 1, order - 1, -1):
        if tokens[start - order : start] == tail:
            return start
    return None


@pytest.mark.parametrize("seed", range(5))
def test_index_matches_a_scan_as_tokens_arrive(seed: int) -> None:
    rng = random.Random(seed)
    index = NgramIndex()
    tokens: list[int] = []
    for _ in range(300):
        token = rng.randrange(6)
        index.add(token)
        tokens.append(token)
        for order in (1, 2, 3):
            assert index.follower(order) == scan_follower(tokens, order)


def test_the_current_tail_never_matches_itself() -> None:
    index = NgramIndex()
    index.extend([5, 6, 7])
    assert index.follower(3) is None
    assert index.follower(1) is None
    index.add(5)
    assert index.follower(1) == 1  # 5 occurred at 0, followed by position 1


def test_latest_occurrence_wins() -> None:
    index = NgramIndex()
    index.extend([1, 2, 3, 1, 2, 4, 1, 2])
    assert index.follower(2) == 5  # "1 2" was last followed by 4
    assert index.copy_from(5, 3) == (4, 1, 2)


def test_a_copy_past_the_end_repeats_itself() -> None:
    index = NgramIndex()
    index.extend([7, 1, 2, 1, 2])
    start = index.follower(2)
    assert start == 3
    assert index.copy_from(start, 5) == (1, 2, 1, 2, 1)


def test_agreement_counts_matching_tokens_backwards() -> None:
    index = NgramIndex()
    index.extend([9, 1, 2, 3, 4, 8, 0, 2, 3, 4])
    start = index.follower(3)
    assert start == 5
    assert index.agreement(start, 10) == 3  # "2 3 4", not "1 2 3 4" against "0 2 3 4"
    assert index.agreement(start, 2) == 2


def test_drafter_prefers_the_longest_match() -> None:
    drafter = LookupDrafter()
    drafter.begin([1, 2, 3, 9, 2, 3, 8, 3, 7], lambda: None)
    assert drafter.peek() == (0, NO_GUESS)  # 7 never occurred before
    assert drafter.draft(4) == ()
    drafter.push(3)  # "7 3": no; "3": last followed by 7
    assert drafter.peek() == (1, 7)
    drafter = LookupDrafter()
    drafter.begin([1, 2, 3, 9, 2, 3, 8, 1, 2], lambda: None)
    drafter.push(3)  # "1 2 3" occurred at the start, followed by 9; "2 3" last by 8
    assert drafter.peek() == (3, 9)
    assert drafter.draft(3) == (9, 2, 3)


def test_alignment_grows_while_the_text_copies() -> None:
    source = list(range(40))
    drafter = LookupDrafter()
    drafter.begin([*source, 99], lambda: None)
    for token in source[:MAX_ALIGNMENT + 5]:
        drafter.push(token)
    level, guess = drafter.peek()
    assert level == MAX_ALIGNMENT
    assert guess == MAX_ALIGNMENT + 5
    assert drafter.draft(3) == (MAX_ALIGNMENT + 5, MAX_ALIGNMENT + 6, MAX_ALIGNMENT + 7)


def test_begin_forgets_the_previous_request() -> None:
    drafter = LookupDrafter()
    drafter.begin([4, 5, 4], lambda: None)
    assert drafter.peek() == (1, 5)
    drafter.begin([6], lambda: None)
    assert drafter.peek() == (0, NO_GUESS)
