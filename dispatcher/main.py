"""Start the dispatcher: ``python -m dispatcher [--config FILE]``."""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Sequence

from dispatcher.broker import BindError, Broker
from dispatcher.scheduler import Scheduler
from shared import logs
from shared.config import CONFIG_PATH_ENV, ConfigError, load
from shared.lifecycle import EXIT_BOOT_FAILURE, StopFlag

log = logging.getLogger("dispatcher")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Read the command line."""
    parser = argparse.ArgumentParser(
        prog="python -m dispatcher",
        description="Route requests from gateways to idle workers (a ZeroMQ load-balancing broker).",
    )
    parser.add_argument(
        "--config", metavar="FILE",
        help=f"configuration file (default: ${CONFIG_PATH_ENV}, else built-in defaults)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the dispatcher until SIGTERM/SIGINT; return the process exit code."""
    args = parse_args(argv)
    try:
        config = load(args.config or os.environ.get(CONFIG_PATH_ENV) or None)
    except ConfigError as err:
        logs.setup("dispatcher", "info")
        log.error("cannot start: %s", err)
        return EXIT_BOOT_FAILURE
    logs.setup("dispatcher", config.logging.level)
    stop = StopFlag()
    stop.install()
    scheduler = Scheduler(config.server.queue_size, time.time())
    broker = Broker(config.frontend_address, config.backend_address, scheduler)
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
