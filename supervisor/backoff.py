"""How long to wait before restarting a child that died: a pure policy, no processes."""

from __future__ import annotations

from typing import Final

INITIAL_DELAY_S: Final = 0.5
MAX_DELAY_S: Final = 30.0
# A child that ran this long was healthy: its next crash starts the backoff over.
RESET_AFTER_S: Final = 60.0


class Backoff:
    """Exponential restart delay: 0.5 s, doubling to 30 s, reset after a long healthy run."""

    def __init__(
        self,
        initial: float = INITIAL_DELAY_S,
        maximum: float = MAX_DELAY_S,
        reset_after: float = RESET_AFTER_S,
    ) -> None:
        if not 0 < initial <= maximum:
            raise ValueError(f"need 0 < initial ({initial}) <= maximum ({maximum})")
        self._initial = initial
        self._maximum = maximum
        self._reset_after = reset_after
        self._next = initial

    def next_delay(self, ran_for: float) -> float:
        """Return the delay before restarting a child that ran for ``ran_for`` seconds."""
        if ran_for >= self._reset_after:
            self._next = self._initial
        delay = self._next
        self._next = min(self._next * 2, self._maximum)
        return delay
