"""The one log line per request (gunicorn's access log is off).

A :class:`RequestLog` rides on ``req.context.log`` while the request runs and
collects the response id, token counts and the time to the first token. The
middleware writes it once the response is complete; for a streamed response the
stream writes it when it ends, since Falcon is done long before the last chunk.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Final

import falcon

from reame.gateway.errors import APIError
from reame.gateway.responses import Usage
from reame.shared.protocol import Delta, Done

log = logging.getLogger("gateway.requests")

# Probes that an orchestrator polls every few seconds; logged at debug level only.
PROBE_PATHS: Final = frozenset({"/health", "/ready"})
# What must not reach a log line as it is: C0 and C1 controls, DEL, U+2028/U+2029, surrogates.
_UNSAFE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


class RequestLog:
    """Facts about one request, written as a single line by :meth:`emit`."""

    def __init__(self, method: str, path: str) -> None:
        # The path is the client's, URL-decoded: %0A would start a forged line, %00 write a NUL.
        self.method = log_safe(method)
        self.path = log_safe(path)
        self.request_id = "-"
        self.deferred = False  # a stream will emit the line when it ends
        self.usage = Usage()
        self.error: str | None = None
        self.key_id: str | None = None  # gateway.auth.key_id of the API key used, never the key
        self._start = time.monotonic()
        self._first_token: float | None = None
        self._emitted = False

    def observe(self, message: Delta | Done) -> None:
        """Account for a message of the generation."""
        if isinstance(message, Delta):
            if self._first_token is None and (message.tokens or message.text):
                self._first_token = time.monotonic()
        else:
            self.usage += Usage.from_done(message)

    def fail(self, error: APIError) -> None:
        """Record the error a stream ended with (the status line already said 200)."""
        self.error = error.code or error.type

    def emit(self, status: int) -> None:
        """Write the line, once."""
        if self._emitted:
            return
        self._emitted = True
        now = time.monotonic()
        ttft = "-" if self._first_token is None else f"{self._first_token - self._start:.3f}s"
        level = logging.DEBUG if self.path in PROBE_PATHS else logging.INFO
        log.log(
            level,
            "%s %s %s %d prompt_tokens=%d cached_tokens=%d completion_tokens=%d ttft=%s total=%.3fs%s%s",
            self.request_id, self.method, self.path, status,
            self.usage.prompt_tokens, self.usage.cached_tokens, self.usage.completion_tokens, ttft, now - self._start,
            f" key={self.key_id}" if self.key_id else "",
            f" error={self.error}" if self.error else "",
        )


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

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.log = RequestLog(req.method, req.path)

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        record = request_log(req)
        if not record.deferred:
            record.emit(resp.status_code)
