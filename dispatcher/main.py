"""Start the dispatcher: ``python -m reame.dispatcher [--config FILE]``."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from reame.dispatcher.broker import Broker, frontend_limit
from reame.dispatcher.scheduler import Scheduler
from reame.shared.endpoints import BindError, EndpointError, link_keys
from reame.shared.lifecycle import EXIT_BOOT_FAILURE, StopFlag, boot

log = logging.getLogger("dispatcher")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the dispatcher until SIGTERM/SIGINT; return the process exit code."""
    booted = boot(
        "dispatcher", "Route requests from gateways to idle workers (a ZeroMQ load-balancing broker).", argv
    )
    if booted is None:
        return EXIT_BOOT_FAILURE
    _, config = booted
    stop = StopFlag()
    stop.install()
    try:
        keys = link_keys(config.security, binds=(config.frontend_address, config.backend_address))
    except EndpointError as err:
        log.error("cannot start: %s", err)
        return EXIT_BOOT_FAILURE
    scheduler = Scheduler(
        config.server.queue_size, time.time(), lend_threads=config.workers.lend_threads,
        affinity_slack=config.dispatcher.affinity_slack,
    )
    broker = Broker(
        config.frontend_address, config.backend_address, scheduler, keys=keys,
        max_request_bytes=frontend_limit(config.server.max_body_bytes),
    )
    try:
        broker.bind()
    except BindError as err:
        log.error("cannot start: %s", err)
        broker.close()
        return EXIT_BOOT_FAILURE
    log.info(
        "listening for gateways on %s and workers on %s (queue of %d)",
        config.frontend_address, config.backend_address, config.server.queue_size,
    )
    try:
        broker.run(stop)
    finally:
        broker.close()
    log.info("stopped")
    return 0
