"""Process lifecycle helpers shared by every child of `reame serve`."""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Final

from reame.shared import logs
from reame.shared.config import CONFIG_PATH_ENV, Config, ConfigError, load

# A child that cannot boot (bad config, missing model) exits with this code, so the
# supervisor stops respawning it instead of looping, as gunicorn's arbiter does.
EXIT_BOOT_FAILURE: Final = 3

_PR_SET_PDEATHSIG: Final = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no orphans after kill -9).

    Called in the child between fork and exec (``preexec_fn``), or after a fork; a no-op elsewhere.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class StopFlag:
    """Set by SIGTERM/SIGINT; loops poll it. Handlers only set the flag."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._parent = os.getppid()

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self._event.set()

    def set(self) -> None:
        self._event.set()

    @property
    def is_set(self) -> bool:
        """True once a stop was asked for, or the parent that started us is gone."""
        if not self._event.is_set() and os.getppid() != self._parent:
            self._event.set()
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout) or self.is_set


def boot(
    process: str,
    description: str,
    argv: Sequence[str] | None,
    more_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> tuple[argparse.Namespace, Config] | None:
    """Do what every process does first: read ``--config FILE``, load it, set up logging.

    Returns None after logging why the configuration cannot be used; the caller then
    exits with EXIT_BOOT_FAILURE.
    """
    parser = argparse.ArgumentParser(prog=f"python -m reame.{process}", description=description)
    parser.add_argument(
        "--config", metavar="FILE",
        help=f"configuration file (default: ${CONFIG_PATH_ENV}, else built-in defaults)",
    )
    if more_arguments is not None:
        more_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config = load(args.config or os.environ.get(CONFIG_PATH_ENV) or None)
    except ConfigError as err:
        logs.setup(process, "info")
        logging.getLogger(process).error("cannot start: %s", err)
        return None
    logs.setup(process, config.logging.level, config.logging.format)
    return args, config
