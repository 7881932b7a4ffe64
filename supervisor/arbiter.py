"""`reame serve`: start every process and keep them running, as gunicorn's arbiter does.

The dispatcher starts first, then the cachekeeper (when the cache is enabled),
then the workers, then the gateway; they stop in the reverse order. Signal
handlers only record the signal and wake the main loop through a pipe; the
loop reaps children with ``waitpid(-1, WNOHANG)`` and restarts the dead ones
after an exponential backoff. The "serving" line is logged once the gateway
answers ``/ready``. A child that exits with ``EXIT_BOOT_FAILURE`` cannot
start at all (bad config, missing model, address in use): restarting it would
only loop, so reame stops and says which child. The cachekeeper is the exception:
the cache is optional (workers serve without it), so it is an *optional* child
whose boot failure is retried with the same backoff while everything else serves.

Under systemd (``Type=notify``) the supervisor sends ``READY=1`` once the gateway
answers ``/ready`` (a worker is attached: the service can answer a request), and
``STOPPING=1`` when it begins to stop (shared.sdnotify).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import fcntl
import http.client
import logging
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import Any, Final

from reame.shared import logs, sdnotify
from reame.shared.config import CONFIG_PATH_ENV, Config, ConfigError, load
from reame.shared.endpoints import EndpointError, link_keys
from reame.shared.lifecycle import EXIT_BOOT_FAILURE, die_with_parent
from reame.shared.model_file import ModelFileError, model_path
from reame.supervisor.backoff import Backoff

log = logging.getLogger("supervisor")

GRACE_S: Final = 15.0  # between SIGTERM and SIGKILL at shutdown
# The loop wakes on every signal; this only bounds how late a restart can be.
MAX_SLEEP_S: Final = 1.0
READY_POLL_S: Final = 0.1  # how often to ask the gateway's /ready before announcing it
READY_PROBE_S: Final = 2.0  # /ready asks the dispatcher, which answers within a second
EXIT_USAGE: Final = 2  # bad config or model: nothing was started
EXIT_CHILD_FAILED: Final = 1

_STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)

_Handler = Callable[[int, FrameType | None], Any] | int | None


@dataclasses.dataclass(frozen=True)
class ChildSpec:
    """One process to keep running: its role, its index among workers, its command line.

    reame serves without an ``optional`` child, so its failing to boot is retried, not fatal.
    """

    role: str
    index: int | None
    argv: tuple[str, ...]
    optional: bool = False

    @property
    def name(self) -> str:
        return self.role if self.index is None else f"{self.role} {self.index}"


def child_specs(config: Config, config_path: str | None, python: str = sys.executable) -> list[ChildSpec]:
    """Build the command lines of the dispatcher, the cachekeeper, the workers and the gateway, in start order."""
    common = ("--config", config_path) if config_path else ()
    cachekeeper = ChildSpec("cachekeeper", None, (python, "-P", "-m", "reame.cachekeeper", *common), optional=True)
    return [
        ChildSpec("dispatcher", None, (python, "-P", "-m", "reame.dispatcher", *common)),
        *([cachekeeper] if config.cache.enabled else []),
        *(
            ChildSpec("worker", i, (python, "-P", "-m", "reame.worker", *common, "--index", str(i)))
            for i in range(config.worker_count)
        ),
        ChildSpec("gateway", None, (python, "-P", "-m", "reame.gateway", *common)),
    ]


def describe_exit(code: int) -> str:
    """Say how a child ended, from a Popen-style return code (negative: killed by a signal)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code == EXIT_BOOT_FAILURE:
        return f"exit code {code} (could not start)"
    return f"exit code {code}"


def restart_delay(spec: ChildSpec, code: int, ran_for: float, backoff: Backoff) -> float | None:
    """Return how long to wait before restarting a child that exited; None: it cannot start, stop reame.

    A required child that failed to boot would only fail again; an optional one may
    come back (a disk remounted, space freed), and nothing waits for it meanwhile.
    """
    if code == EXIT_BOOT_FAILURE and not spec.optional:
        return None
    return backoff.next_delay(ran_for)


@dataclasses.dataclass
class _Child:
    spec: ChildSpec
    backoff: Backoff
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None


class Arbiter:
    """Start children, restart the ones that die, stop them all on SIGTERM/SIGINT.

    Call :meth:`run` from the main thread: it installs signal handlers.
    """

    def __init__(
        self,
        specs: Sequence[ChildSpec],
        *,
        env: Mapping[str, str] | None = None,
        grace: float = GRACE_S,
        backoff: Callable[[], Backoff] = Backoff,
        banner: str | None = None,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self._children = [_Child(spec, backoff()) for spec in specs]
        self._env = dict(os.environ if env is None else env)
        self._grace = grace
        self._banner = banner  # logged once ready() is true
        self._ready = ready
        self._signals: collections.deque[int] = collections.deque()
        self._stopping = False
        self._wake_r = self._wake_w = -1  # the self-pipe signals wake the loop through

    def run(self) -> int:
        """Supervise until told to stop; return the exit code for `reame serve`."""
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        previous = self._install_signals()
        try:
            return self._supervise()
        finally:
            # Whatever happened (even an exception here), leave no child behind.
            self._shutdown()
            signal.set_wakeup_fd(-1)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _supervise(self) -> int:
        for child in self._children:
            if not self._spawn(child):
                return EXIT_CHILD_FAILED
        while True:
            self._announce()
            timeout = self._time_to_next_restart()
            self._sleep(min(timeout, READY_POLL_S) if self._banner else timeout)
            if self._stop_requested():
                log.info("stopping")
                return 0
            failed = self._reap()
            if failed is not None:
                log.error(
                    "%s could not start (exit code %d, see its log above): not restarting it; stopping reame",
                    failed.spec.name, EXIT_BOOT_FAILURE,
                )
                return EXIT_CHILD_FAILED
            if not self._restart_due():
                return EXIT_CHILD_FAILED

    def _announce(self) -> None:
        if self._banner and self._ready():
            log.info("%s", self._banner)
            sdnotify.notify(f"READY=1\nSTATUS={self._banner}")
            self._banner = None

    # -- signals -----------------------------------------------------------------

    def _install_signals(self) -> dict[signal.Signals, _Handler]:
        previous: dict[signal.Signals, _Handler] = {}
        for sig in (*_STOP_SIGNALS, signal.SIGCHLD):
            previous[sig] = signal.getsignal(sig)
            signal.signal(sig, self._record_signal)
        # The C-level handler writes to the pipe, so select() in the loop wakes up.
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        return previous

    def _record_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)

    def _stop_requested(self) -> bool:
        stop = False
        while self._signals:
            stop = self._signals.popleft() in _STOP_SIGNALS or stop
        return stop

    def _sleep(self, timeout: float) -> None:
        select.select([self._wake_r], [], [], max(0.0, min(timeout, MAX_SLEEP_S)))
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass

    # -- children ----------------------------------------------------------------

    def _spawn(self, child: _Child) -> bool:
        try:
            child.process = subprocess.Popen(
                child.spec.argv, env=self._env, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent
            )
        except OSError as err:
            log.error("cannot start %s (%s): %s", child.spec.name, " ".join(child.spec.argv), err)
            return False
        child.started_at = time.monotonic()
        child.restart_at = None
        log.info("started %s (pid %d)", child.spec.name, child.process.pid)
        return True

    def _reap(self) -> _Child | None:
        """Collect every child that exited, schedule restarts; return one that could not boot."""
        failed = None
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            child = next((c for c in self._children if c.process and c.process.pid == pid), None)
            if child is not None and not self._exited(child, status):
                failed = failed or child
        return failed

    def _exited(self, child: _Child, status: int) -> bool:
        """Log the exit of a reaped child and schedule its restart; False if it could not boot."""
        assert child.process is not None
        pid, code = child.process.pid, os.waitstatus_to_exitcode(status)
        # Reaped by us: tell Popen, so that it never waits for this pid itself.
        child.process.returncode = code
        child.process = None
        ran_for = time.monotonic() - child.started_at
        what = f"{child.spec.name} (pid {pid}) exited: {describe_exit(code)} after {ran_for:.1f} s"
        if self._stopping:
            log.info("%s", what)
            return True
        delay = restart_delay(child.spec, code, ran_for, child.backoff)
        if delay is None:
            log.error("%s", what)
            return False
        child.restart_at = time.monotonic() + delay
        if code == EXIT_BOOT_FAILURE:
            log.warning("%s; serving without it, trying again in %.1f s", what, delay)
        else:
            log.warning("%s; restarting it in %.1f s", what, delay)
        return True

    def _time_to_next_restart(self) -> float:
        due = [c.restart_at for c in self._children if c.restart_at is not None]
        return min(due) - time.monotonic() if due else MAX_SLEEP_S

    def _restart_due(self) -> bool:
        now = time.monotonic()
        for child in self._children:
            if child.restart_at is not None and child.restart_at <= now and not self._spawn(child):
                return False
        return True

    def _alive(self) -> list[_Child]:
        return [c for c in self._children if c.process is not None]

    def _shutdown(self) -> None:
        """SIGTERM every child in reverse start order, SIGKILL what outlives the grace period."""
        self._stopping = True
        sdnotify.notify("STOPPING=1")
        for child in reversed(self._alive()):
            self._signal(child, signal.SIGTERM)
        deadline = time.monotonic() + self._grace
        while self._alive() and time.monotonic() < deadline:
            self._reap()
            if not self._alive():
                break
            self._sleep(deadline - time.monotonic())
            if self._stop_requested():
                log.warning("asked again: killing the children now")
                break
        for child in self._alive():
            log.warning("%s did not stop within %.0f s: killing it", child.spec.name, self._grace)
            self._signal(child, signal.SIGKILL)
        for child in self._alive():
            assert child.process is not None
            _, status = os.waitpid(child.process.pid, 0)  # SIGKILL cannot be ignored: this returns
            self._exited(child, status)

    def _signal(self, child: _Child, sig: int) -> None:
        # os.kill rather than Popen.send_signal: that one may reap the child
        # behind our back, and then its exit would never be logged.
        assert child.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.process.pid, sig)


def gateway_ready(host: str, port: int) -> Callable[[], bool]:
    """Return a check that the gateway on ``host:port`` answers ``GET /ready`` with 200."""
    target = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)

    def check() -> bool:
        connection = http.client.HTTPConnection(target, port, timeout=READY_PROBE_S)
        try:
            connection.request("GET", "/ready")
            return connection.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    return check


def serve(config_path: str | None) -> int:
    """Check the config and the model, then run every process until SIGTERM/SIGINT."""
    try:
        config = load(config_path)
        model_path(config)
        # Every child would refuse a plain link off this machine, or a missing key file: say it once, here.
        links = [config.frontend_address, config.backend_address]
        links += [config.cache_address] if config.cache.enabled else []
        link_keys(config.security, binds=links, connects=links)
    except (ConfigError, ModelFileError, EndpointError) as err:
        print(f"reame: {err}", file=sys.stderr)
        return EXIT_USAGE
    logs.setup("reame", config.logging.level, config.logging.format)
    env = dict(os.environ)
    if config_path:
        config_path = os.path.abspath(config_path)
        env[CONFIG_PATH_ENV] = config_path
    specs = child_specs(config, config_path)
    host = f"[{config.server.host}]" if ":" in config.server.host else config.server.host
    banner = f"reame serving http://{host}:{config.server.port} with {config.worker_count} workers"
    ready = gateway_ready(config.server.host, config.server.port)
    return Arbiter(specs, env=env, banner=banner, ready=ready).run()
