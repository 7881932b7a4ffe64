"""Headers every answer carries: ``x-request-id``, and CORS for the configured origins.

The request id is the client's ``X-Request-Id`` echoed when it is a plain token
(at most :data:`MAX_REQUEST_ID` visible characters from a safe set; anything else
could forge log lines or split headers, so it is ignored), else the response's own
id (``chatcmpl-...``), else a fresh one: the openai client reads it as
``response._request_id``, and the request log line names both.

CORS (``server.cors_origins``): a browser app on an allowed origin gets its
preflight answered here, before the API key check (browsers never send credentials
in a preflight), and every answer to it, errors included, carries
``Access-Control-Allow-Origin`` so the app can read them.
"""

from __future__ import annotations

import re
import secrets
from typing import Final

import falcon

from reame.gateway.http.requestlog import request_log

REQUEST_ID_HEADER: Final = "X-Request-Id"
MAX_REQUEST_ID: Final = 128
_REQUEST_ID: Final = re.compile(rf"[A-Za-z0-9._:/+=@-]{{1,{MAX_REQUEST_ID}}}")
GENERATED_PREFIX: Final = "req-"

# What a browser app may send: the key headers, JSON, its own request id. The
# openai JS client adds its x-stainless-* headers: any header a preflight asks for
# is allowed, since the origin itself was allowed by the operator.
ALLOWED_HEADERS: Final = ("Authorization", "X-Api-Key", "Content-Type", REQUEST_ID_HEADER)
ALLOWED_METHODS: Final = "GET, HEAD, POST, OPTIONS"
EXPOSED_HEADERS: Final = f"{REQUEST_ID_HEADER}, Retry-After"
PREFLIGHT_MAX_AGE_S: Final = 600
_HEADER_NAME: Final = re.compile(r"[A-Za-z0-9-]{1,64}")


def client_request_id(value: str | None) -> str | None:
    """Return the client's request id if it is safe to echo and log, else None."""
    if value is None:
        return None
    value = value.strip()
    return value if _REQUEST_ID.fullmatch(value) else None


class RequestIdMiddleware:
    """Put ``x-request-id`` on every response; run it after the log middleware."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        request_log(req).client_request_id = client_request_id(req.get_header(REQUEST_ID_HEADER))

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        record = request_log(req)
        if record.client_request_id is not None:
            value = record.client_request_id
        elif record.request_id != "-":
            value = record.request_id
        else:
            value = record.request_id = GENERATED_PREFIX + secrets.token_hex(12)
        resp.set_header(REQUEST_ID_HEADER, value)


def parse_origins(text: str) -> frozenset[str]:
    """Split ``server.cors_origins`` (comma list; ``*`` is any origin)."""
    return frozenset(origin.strip().rstrip("/") for origin in text.split(",") if origin.strip())


class CORSMiddleware:
    """Answer preflights from allowed origins and mark API answers readable by them."""

    def __init__(self, origins: frozenset[str]) -> None:
        self.origins = origins

    def _allowed(self, req: falcon.Request) -> str | None:
        origin = req.get_header("Origin")
        if not origin or not self.origins:
            return None
        return origin if "*" in self.origins or origin in self.origins else None

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.method != "OPTIONS" or not req.get_header("Access-Control-Request-Method"):
            return
        origin = self._allowed(req)
        if origin is None:
            return  # not ours to allow: routing answers (405, or 401 without a key)
        asked = req.get_header("Access-Control-Request-Headers") or ""
        names = [n.strip() for n in asked.split(",") if _HEADER_NAME.fullmatch(n.strip())]
        allowed = dict.fromkeys([*ALLOWED_HEADERS, *names])
        resp.set_header("Access-Control-Allow-Methods", ALLOWED_METHODS)
        resp.set_header("Access-Control-Allow-Headers", ", ".join(allowed))
        resp.set_header("Access-Control-Max-Age", str(PREFLIGHT_MAX_AGE_S))
        resp.status = falcon.HTTP_204
        resp.complete = True  # no key check, no responder: a preflight carries no credentials

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: object, req_succeeded: bool
    ) -> None:
        if not self.origins:
            return
        resp.append_header("Vary", "Origin")  # caches must not serve one origin's answer to another
        origin = self._allowed(req)
        if origin is None:
            return
        resp.set_header("Access-Control-Allow-Origin", origin)
        resp.set_header("Access-Control-Expose-Headers", EXPOSED_HEADERS)
