"""The one log line per request (gunicorn's access log is off).

A :class:`RequestLog` rides on ``req.context.log`` while the request runs and
collects the response id, token counts and the time to the first token. The
middleware writes it once the response is complete; for a streamed response the
stream writes it when it ends, since Falcon is done long before the last chunk.
The same moment feeds the metrics (``on_end``), so the log and /metrics count the
same requests. The line's facts also travel as structured fields
(``shared.logs.FIELDS``): with ``logging.format = json`` each is a JSON field.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any, Final

import falcon

from reame.gateway.api.responses import Usage
from reame.gateway.http.errors import APIError
from reame.shared.logs import FIELDS
from reame.shared.protocol import Delta, Done

log = logging.getLogger("gateway.requests")

# Probes that an orchestrator polls every few seconds; logged at debug level only.
PROBE_PATHS: Final = frozenset({"/health", "/ready"})
# What must not reach a log line as it is: C0 and C1 controls, DEL, U+2028/U+2029, surrogates.
_UNSAFE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# Paths that a scraper or an orchestrator polls: logged at debug level only.
QUIET_PATHS: Final = PROBE_PATHS | {"/metrics"}


class RequestLog:
    """Facts about one request, written as a single line by :meth:`emit`."""

    def __init__(self, method: str, path: str, on_end: Callable[[RequestLog, int], None] | None = None) -> None:
        # The path is the client's, URL-decoded: %0A would start a forged line, %00 write a NUL.
        self.method = log_safe(method)
        self.path = log_safe(path)
        self.request_id = "-"
        self.client_request_id: str | None = None  # the client's X-Request-Id, when usable
        self.deferred = False  # a stream will emit the line when it ends
        self.usage = Usage()
        self.error: str | None = None
        self.key_id: str | None = None  # gateway.http.auth.key_id of the API key used, never the key
        self.compress_mode: str | None = None  # None: nothing was sent to the dispatcher
        self.saved_tokens = 0  # prompt tokens the compression saved
        # Summed over the request's Done messages (one per prompt):
        self.restored_tokens = 0  # cached tokens restored from the store, not held in memory
        self.queue_ms = 0.0
        self.generation_ms = 0.0
        self.status = 0
        self._on_end = on_end
        self._start = self._end = time.monotonic()
        self._first_token: float | None = None
        self._emitted = False

    def observe(self, message: Delta | Done) -> None:
        """Account for a message of the generation."""
        if isinstance(message, Delta):
            if self._first_token is None and (message.tokens or message.text):
                self._first_token = time.monotonic()
        else:
            self.usage += Usage.from_done(message)
            self.restored_tokens += min(message.restored_tokens, message.cached_tokens)
            self.queue_ms += message.queue_ms
            self.generation_ms += message.generation_ms

    def compressed(self, mode: str, saved_tokens: int) -> None:
        """Account for one prompt's compression."""
        self.compress_mode = mode
        self.saved_tokens += saved_tokens

    @property
    def ttft(self) -> float | None:
        """Seconds from arrival to the first token; None if no token came."""
        return None if self._first_token is None else self._first_token - self._start

    @property
    def total(self) -> float:
        """Seconds from arrival to now (to the end, once emitted)."""
        return (self._end if self._emitted else time.monotonic()) - self._start

    def fail(self, error: APIError) -> None:
        """Record the error a stream ended with (the status line already said 200)."""
        self.error = error.code or error.type

    def emit(self, status: int) -> None:
        """Write the line, once."""
        if self._emitted:
            return
        self._end = time.monotonic()
        self._emitted = True
        self.status = status
        ttft = "-" if self.ttft is None else f"{self.ttft:.3f}s"
        level = logging.DEBUG if self.path in QUIET_PATHS else logging.INFO
        log.log(
            level,
            "%s %s %s %d prompt_tokens=%d cached_tokens=%d completion_tokens=%d ttft=%s total=%.3fs%s%s%s%s",
            self.request_id, self.method, self.path, status,
            self.usage.prompt_tokens, self.usage.cached_tokens, self.usage.completion_tokens, ttft, self.total,
            f" compress={self.compress_mode} saved_tokens={self.saved_tokens}" if self.compress_mode else "",
            f" key={self.key_id}" if self.key_id else "",
            f" x_request_id={self.client_request_id}" if self.client_request_id else "",
            f" error={self.error}" if self.error else "",
            extra={FIELDS: self.fields()},
        )
        if self._on_end is not None:
            try:
                self._on_end(self, status)
            except Exception:  # the metrics must never fail a response
                log.exception("could not record the metrics of %s", self.request_id)

    def fields(self) -> dict[str, Any]:
        """The line's facts as JSON-ready fields (for ``logging.format = json``)."""
        u = self.usage
        return {
            "request_id": self.request_id, "x_request_id": self.client_request_id, "method": self.method,
            "path": self.path, "status": self.status, "key": self.key_id, "prompt_tokens": u.prompt_tokens,
            "cached_tokens": u.cached_tokens, "restored_tokens": self.restored_tokens,
            "completion_tokens": u.completion_tokens, "compress": self.compress_mode,
            "saved_tokens": self.saved_tokens, "ttft_s": None if self.ttft is None else round(self.ttft, 4),
            "total_s": round(self.total, 4), "queue_s": round(self.queue_ms / 1000, 4), "error": self.error,
        }


def log_safe(text: str) -> str:
    """Return ``text`` with control characters, line separators and lone surrogates escaped (``\\x0a``)."""
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def request_log(req: falcon.Request) -> RequestLog:
    """Return the request's log record (a detached one if the middleware did not run)."""
    record = req.context.get("log")
    if not isinstance(record, RequestLog):
        record = RequestLog(req.method, req.path)
        req.context.log = record
    return record


class LogMiddleware:
    """Start a RequestLog for every request and write it when the response is complete."""

    def __init__(self, on_end: Callable[[RequestLog, int], None] | None = None) -> None:
        self.on_end = on_end  # called with each record once it is written: the metrics

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.log = RequestLog(req.method, req.path, self.on_end)

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        record = request_log(req)
        if not record.deferred:
            record.emit(resp.status_code)
