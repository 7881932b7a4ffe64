"""What the worker's two cache threads share: whether the cachekeeper answers.

The engine thread (worker.cache_client) and the uploader thread (worker.cache_uploader)
both report to one :class:`Health`; it locks, so either thread may call it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

# Long enough for a restarted cachekeeper to come back, short enough that the cache
# is not missed for long once it does.
RETRY_AFTER_S: Final = 5.0


class Health:
    """Whether the cachekeeper is worth asking; both threads report to it."""

    def __init__(self, address: str, retry_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._address = address
        self._retry_after = retry_after
        self._clock = clock
        self._lock = threading.Lock()
        self._skip_until = 0.0
        self._down = False  # warned about, not heard from since

    def usable(self) -> bool:
        with self._lock:
            return self._clock() >= self._skip_until

    def failed(self, what: str) -> None:
        """Skip the cachekeeper for a while; warn once per outage."""
        with self._lock:
            self._skip_until = self._clock() + self._retry_after
            first = not self._down
            self._down = True
        if first:
            log.warning(
                "the cachekeeper at %s did not answer a %s in time; serving without the cache, "
                "trying again every %.0f s", self._address, what, self._retry_after,
            )
        else:
            log.debug("the cachekeeper still does not answer (%s)", what)

    def answered(self) -> None:
        with self._lock:
            was_down, self._down = self._down, False
        if was_down:
            log.info("the cachekeeper at %s answers again", self._address)
