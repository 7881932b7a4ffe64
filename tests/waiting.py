"""The one way tests wait: poll a condition until it holds or a generous timeout passes.

Timeouts here are upper bounds for a slow or busy machine, never expectations: a test
that waits must pass whether the condition holds after a millisecond or after most of
the timeout, and no test asserts how long anything took.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# Long enough for a loaded 2-core machine running three test suites; only failures wait it out.
PATIENCE_S = 60.0


def wait_for(
    predicate: Callable[[], T | None], timeout: float = PATIENCE_S, interval: float = 0.02, what: str = "a condition"
) -> T:
    """Return ``predicate()``'s first truthy value; fail the test if none comes within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
