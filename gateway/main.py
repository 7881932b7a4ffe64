"""Run the gateway: gunicorn in-process (gthread workers) serving :func:`gateway.app.create_app`.

The gunicorn master binds ``server.host:server.port`` and forks
``server.gateway_processes`` workers of ``server.gateway_threads`` threads each.
Each worker builds its own app (and so its own ZeroMQ context) after the fork.
SIGTERM/SIGINT are gunicorn's: stop accepting, finish the requests in flight
(at most ``GRACEFUL_TIMEOUT_S``), exit 0.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections.abc import Sequence
from typing import Any, Final

import falcon
from gunicorn import glogging
from gunicorn.app.base import BaseApplication

from reame.gateway.app import create_app
from reame.gateway.http.auth import SHORT_KEY, Keys, load_keys
from reame.gateway.http.metrics import use_multiprocess
from reame.gateway.upstream.client import Dispatcher
from reame.shared.config import CONFIG_PATH_ENV, Config, ConfigError
from reame.shared.endpoints import EndpointError, LinkKeys, link_keys
from reame.shared.lifecycle import EXIT_BOOT_FAILURE, boot, die_with_parent

log = logging.getLogger("gateway")

GRACEFUL_TIMEOUT_S: Final = 10
# gunicorn's own exit codes that mean "could not start": 1 when it cannot bind or its
# configuration is refused, 3 when a worker fails to boot, 4 when the app fails to load.
_GUNICORN_BOOT_FAILURES: Final = frozenset({1, 3, 4})


class _Logger(glogging.Logger):  # type: ignore[misc]
    """Send gunicorn's messages through the root logger, so they share reame's format."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in list(self.error_log.handlers):
            self.error_log.removeHandler(handler)
        self.error_log.propagate = True


class GatewayApplication(BaseApplication):  # type: ignore[misc]
    """gunicorn configured from reame's Config rather than from its own command line."""

    def __init__(self, config: Config, keys: Keys) -> None:
        self.config = config
        self.keys = keys  # read once, before the fork: every gunicorn worker checks the same keys
        self.dispatcher: Dispatcher | None = None
        super().__init__()

    def load_config(self) -> None:
        server = self.config.server
        host = f"[{server.host}]" if ":" in server.host else server.host
        settings: dict[str, Any] = {
            "bind": [f"{host}:{server.port}"],
            "workers": server.gateway_processes,
            "threads": server.gateway_threads,
            # gthread with read timeouts, a per-client share of threads and JSON errors before the app.
            "worker_class": "reame.gateway.http.http_worker.ReameThreadWorker",
            "accesslog": None,  # the app writes one line per request itself
            "errorlog": "-",
            "loglevel": self.config.logging.level,
            "logger_class": _Logger,
            "graceful_timeout": GRACEFUL_TIMEOUT_S,
            "proc_name": "reame-gateway",
            "control_socket_disable": True,  # one shared default path; two gateways would clash
            "worker_exit": self._worker_exit,
            "post_fork": self._post_fork,
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> falcon.App[falcon.Request, falcon.Response]:
        # Runs in each worker after the fork: a ZeroMQ context must not cross a fork.
        config = self.config
        self.dispatcher = Dispatcher(
            config.frontend_address, keys=gateway_link_keys(config),
            cache_address=config.cache_address if config.cache.enabled else None,
        )
        return create_app(self.config, self.dispatcher, self.keys)

    @staticmethod
    def _post_fork(server: Any, worker: Any) -> None:
        # A worker must not outlive a master killed with SIGKILL: it would keep the listening
        # socket while it finishes its requests, and the master the supervisor starts again
        # would find the port in use and stop reame (found by tests/integration/test_fault_processes.py).
        die_with_parent(signal.SIGKILL)

    def _worker_exit(self, server: Any, worker: Any) -> None:
        if self.dispatcher is not None:
            self.dispatcher.close()


def gateway_link_keys(config: Config) -> LinkKeys:
    """Read the CURVE keys for the dispatcher and the cachekeeper (asked by /ready); EndpointError if unusable."""
    peers = (config.frontend_address, *([config.cache_address] if config.cache.enabled else []))
    return link_keys(config.security, connects=peers)


def check_bind(host: str, port: int) -> None:
    """Raise OSError if ``host:port`` cannot be listened on (gunicorn would retry for 5 s)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
        probe.bind(address)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the gateway until SIGTERM/SIGINT; return the exit status."""
    booted = boot("gateway", "Run reame's OpenAI-compatible HTTP gateway.", argv)
    if booted is None:
        return EXIT_BOOT_FAILURE
    args, config = booted
    if args.config is not None:
        os.environ[CONFIG_PATH_ENV] = os.path.abspath(args.config)  # for anything the workers start
    try:
        keys = load_keys(config.server)
    except ConfigError as err:
        log.error("cannot start: %s", err)
        return EXIT_BOOT_FAILURE
    if keys.short:
        log.warning("%d API key(s) are shorter than %d characters: use long random keys", keys.short, SHORT_KEY)
    try:
        gateway_link_keys(config)  # read again by each gunicorn worker: checked here, before forking
    except EndpointError as err:
        log.error("cannot start: %s", err)
        return EXIT_BOOT_FAILURE
    try:
        check_bind(config.server.host, config.server.port)
    except OSError as err:
        log.error("cannot listen on %s:%d: %s", config.server.host, config.server.port, err.strerror or err)
        return EXIT_BOOT_FAILURE
    try:
        # Before the fork: every gunicorn process's metrics go to files one scrape reads.
        # One directory per port: two gateways sharing a run_dir must not empty each other's.
        use_multiprocess(config.run_dir / f"gateway-metrics-{config.server.port}")
    except OSError as err:
        log.error("cannot create the metrics directory in %s: %s", config.run_dir, err.strerror or err)
        return EXIT_BOOT_FAILURE
    try:
        GatewayApplication(config, keys).run()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        return EXIT_BOOT_FAILURE if code in _GUNICORN_BOOT_FAILURES else code
    return 0
