"""Run a real `reame serve` in a subprocess: used by the integration tests and the benchmarks."""

from __future__ import annotations

from typing import Any

# The harness lives in the package, so that an installed `reame bench` has it; tests import it from here.
from reame.benchmarks.server import (
    EXIT_TIMEOUT_S,
    READY_TIMEOUT_S,
    Server,
    alive,
    cmdline,
    descendants,
    free_port,
    start_server,
)
from tests.waiting import PATIENCE_S, wait_for

__all__ = [
    "EXIT_TIMEOUT_S", "READY_TIMEOUT_S", "Server", "alive", "busy_workers", "cache_stats", "cmdline", "descendants",
    "free_port", "start_server", "wait_for_entries",
]


def cache_stats(server: Server) -> dict[str, Any]:
    """`reame cache stats --json` against the server's cache directory."""
    return server.cache_stats()


def busy_workers(server: Server) -> set[int] | None:
    """Return the pids of the workers the dispatcher has given a request; None if it does not answer."""
    from reame.gateway.upstream.client import Dispatcher
    from reame.shared.config import load

    env = {"REAME_SERVER_PORT": str(server.port), "REAME_SERVER_RUN_DIR": str(server.run_dir)}
    dispatcher = Dispatcher(load(None, environ=env).frontend_address)
    try:
        status = dispatcher.status(5.0)
    finally:
        dispatcher.close()
    if status is None:
        return None
    # A worker is named "worker_id (pid N)".
    return {int(state.name.rsplit("pid ", 1)[1].rstrip(")")) for state in status.worker_states if state.busy}


def wait_for_entries(server: Server, count: int, timeout: float = PATIENCE_S) -> dict[str, Any]:
    """Wait until the server's cache holds ``count`` entries (they are stored after the reply)."""
    last: dict[str, Any] = {}

    def stored() -> dict[str, Any] | None:
        last.update(cache_stats(server))
        return last if last["entries"] >= count else None

    return wait_for(stored, timeout, interval=0.2, what=f"{count} cache entries (last seen: {last})")
