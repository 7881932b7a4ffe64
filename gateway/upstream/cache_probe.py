"""Whether the cachekeeper answers, for /ready: the cache is optional, so the server serves either way.

The gateway asks the cachekeeper itself, with one CacheAdmin STATS and a short
timeout, as a round trip of its Upstream (a socket of its own per question). It
reports what is true now: "on" (the cachekeeper answered), "off" (it is enabled but
does not answer: the workers serve without it and `reame serve` keeps restarting it)
or "disabled" (cache.enabled = false).
"""

from __future__ import annotations

import secrets
from typing import Final

from reame.shared import protocol
from reame.shared.upstream import Upstream, reply

ON: Final = "on"
OFF: Final = "off"
DISABLED: Final = "disabled"


class CacheProbe:
    """Ask the cachekeeper at ``address`` (None: the cache is disabled) whether it answers."""

    def __init__(self, address: str | None, upstream: Upstream) -> None:
        self.address = address
        self._upstream = upstream

    def state(self, timeout_s: float) -> str:
        """Return ON, OFF or DISABLED, waiting at most ``timeout_s`` for an answer."""
        if self.address is None:
            return DISABLED
        return OFF if self.report(timeout_s) is None else ON

    def report(self, timeout_s: float) -> protocol.CacheReport | None:
        """Return the cachekeeper's counters (for /metrics), None if it does not answer within ``timeout_s``."""
        if self.address is None:
            return None
        request_id = f"ready-{secrets.token_hex(4)}"
        stats = protocol.CacheAdmin(request_id, protocol.CacheCommand.STATS)
        # skip_absent: nothing listens at an ipc:// address without its socket file, no need to wait
        return self._upstream.ask(
            self.address, stats, reply(protocol.CacheReport, request_id), timeout_s, skip_absent=True
        )
