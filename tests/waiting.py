"""The one way tests wait: poll a condition until it holds or a generous timeout passes.

Timeouts here are upper bounds for a slow or busy machine, never expectations: a test
that waits must pass whether the condition holds after a millisecond or after most of
the timeout, and no test asserts how long anything took.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from reame.benchmarks import server

T = TypeVar("T")

# Long enough for a loaded 2-core machine running three test suites; only failures wait it out.
PATIENCE_S = 60.0


def wait_for(
    predicate: Callable[[], T | None], timeout: float = PATIENCE_S, interval: float = 0.02, what: str = "a condition"
) -> T:
    """Return ``predicate()``'s first truthy value; fail the test if none comes within ``timeout``."""
    return server.wait_for(predicate, timeout, interval, what)
