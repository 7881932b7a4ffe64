"""Apply a rewriting rule until it changes nothing: what makes every mode idempotent."""

from __future__ import annotations

import time
from collections.abc import Callable


class Overtime(Exception):
    """The time budget ran out between two passes; ``text`` is what the passes done gave."""

    def __init__(self, text: str) -> None:
        super().__init__("compression time budget exceeded")
        self.text = text


def fixpoint(rule: Callable[[str], str], text: str, limit: int, deadline: float | None = None) -> str:
    """Apply ``rule`` to ``text`` until the text stops changing, at most ``limit`` times.

    Every rule here only removes or shortens, so a few rounds reach a text no rule
    changes; ``limit`` bounds the work on text where that would take longer. Past
    ``deadline`` (a ``time.monotonic()`` value) no further pass starts: :class:`Overtime`
    is raised with the text of the passes done (the first pass always runs).
    """
    for done in range(limit):
        if done and deadline is not None and time.monotonic() > deadline:
            raise Overtime(text)
        again = rule(text)
        if again == text:
            break
        text = again
    return text
