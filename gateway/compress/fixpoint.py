"""Apply a rewriting rule until it changes nothing: what makes every mode idempotent."""

from __future__ import annotations

from collections.abc import Callable


def fixpoint(rule: Callable[[str], str], text: str, limit: int) -> str:
    """Apply ``rule`` to ``text`` until the text stops changing, at most ``limit`` times.

    Every rule here only removes or shortens, so a few rounds reach a text no rule
    changes; ``limit`` bounds the work on text where that would take longer.
    """
    for _ in range(limit):
        again = rule(text)
        if again == text:
            break
        text = again
    return text
