"""The restart delay policy."""

from __future__ import annotations

import pytest

from reame.supervisor.backoff import INITIAL_DELAY_S, MAX_DELAY_S, RESET_AFTER_S, Backoff


def test_delay_doubles_from_half_a_second_up_to_thirty() -> None:
    backoff = Backoff()
    delays = [backoff.next_delay(ran_for=1.0) for _ in range(9)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert (INITIAL_DELAY_S, MAX_DELAY_S, RESET_AFTER_S) == (0.5, 30.0, 60.0)


def test_a_long_healthy_run_resets_the_delay() -> None:
    backoff = Backoff()
    for _ in range(4):
        backoff.next_delay(ran_for=1.0)
    assert backoff.next_delay(ran_for=59.9) == 8.0
    assert backoff.next_delay(ran_for=60.0) == 0.5
    assert backoff.next_delay(ran_for=0.1) == 1.0


def test_custom_bounds_and_bad_bounds() -> None:
    backoff = Backoff(initial=0.1, maximum=0.3, reset_after=5.0)
    assert [backoff.next_delay(0.0) for _ in range(4)] == [0.1, 0.2, 0.3, 0.3]
    with pytest.raises(ValueError, match="initial"):
        Backoff(initial=0.0)
    with pytest.raises(ValueError, match="maximum"):
        Backoff(initial=2.0, maximum=1.0)
