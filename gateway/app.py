"""Build the gateway's Falcon app: routes, the request log and the error rendering.

Every error, Falcon's own included (unknown path, wrong method, bad header),
leaves as OpenAI's ``{"error": {...}}`` JSON. Anything else raised is a bug: it is
logged with its traceback and answered with a 500 that no client input can reach.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final

import falcon

from reame.gateway.api.resources import (
    CacheWarm,
    ChatCompletions,
    Completions,
    Health,
    Models,
    Ready,
    Settings,
    send_json,
)
from reame.gateway.api.streams import CLIENT_GONE_STATUS
from reame.gateway.http import errors
from reame.gateway.http.auth import Keys, load_keys
from reame.gateway.http.errors import APIError
from reame.gateway.http.guard import KeyMiddleware
from reame.gateway.http.headers import CORSMiddleware, RequestIdMiddleware, parse_origins
from reame.gateway.http.metrics import Metrics
from reame.gateway.http.openapi import OpenAPIDocument
from reame.gateway.http.requestlog import LogMiddleware, request_log
from reame.gateway.http.webpage import STATIC_PREFIX, WebPage
from reame.gateway.upstream.client import ClientGone, Dispatcher
from reame.shared.config import Config
from reame.shared.model_file import model_alias

log = logging.getLogger(__name__)

# Falcon errors a client can cause, by status: the OpenAI-style code to report.
_HTTP_CODES: Final = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


def create_app(
    config: Config, dispatcher: Dispatcher | None = None, keys: Keys | None = None
) -> falcon.App[falcon.Request, falcon.Response]:
    """Return the WSGI app; ``dispatcher`` defaults to one for ``config.frontend_address``.

    ``keys`` defaults to the configured API keys (ConfigError if the key file is unusable).
    """
    dispatcher = dispatcher or Dispatcher(config.frontend_address)
    keys = load_keys(config.server) if keys is None else keys
    settings = Settings(config, model_alias(config))
    metrics = Metrics(settings.model, dispatcher)
    retry_after = str(config.server.retry_after)

    def render_api_error(req: falcon.Request, resp: falcon.Response, ex: APIError, params: Any) -> None:
        send_json(resp, {"error": ex.to_dict()}, ex.status)
        if ex.retry:
            resp.set_header("Retry-After", retry_after)

    def render_http_error(
        req: falcon.Request, resp: falcon.Response, ex: falcon.HTTPError, params: Any
    ) -> None:
        if ex.status_code == 404:
            message = f"no such endpoint: {req.method} {req.path}"
        elif ex.status_code == 405:
            message = f"method {req.method} is not allowed on {req.path}"
        else:
            message = ". ".join(part for part in (ex.title, ex.description) if part)
        code = _HTTP_CODES.get(ex.status_code) or _snake(ex.title or "error")
        kind = errors.INVALID_REQUEST if ex.status_code < 500 else errors.SERVER_ERROR
        render_api_error(req, resp, APIError(ex.status_code, message, type=kind, code=code), params)
        resp.set_headers(ex.headers or {})  # e.g. Allow on a 405

    def render_bug(req: falcon.Request, resp: falcon.Response, ex: Exception, params: Any) -> None:
        log.error("bug while serving %s %s", req.method, req.path, exc_info=ex)
        render_api_error(req, resp, errors.internal(), params)

    def client_gone(req: falcon.Request, resp: falcon.Response, ex: ClientGone, params: Any) -> None:
        request_log(req).error = "client_gone"
        resp.status = CLIENT_GONE_STATUS  # for the log line; the socket is already closed

    # The log middleware first: a refused request still gets its log line (and is
    # counted), its x-request-id and its CORS headers; a preflight stops before the key check.
    app = falcon.App(middleware=(
        LogMiddleware(metrics.observe), RequestIdMiddleware(),
        CORSMiddleware(parse_origins(config.server.cors_origins)), KeyMiddleware(keys),
    ))
    app.req_options.strip_url_path_trailing_slash = True
    app.add_error_handler(Exception, render_bug)
    app.add_error_handler(falcon.HTTPError, render_http_error)
    app.add_error_handler(APIError, render_api_error)
    app.add_error_handler(ClientGone, client_gone)

    app.add_route("/v1/chat/completions", ChatCompletions(settings, dispatcher))
    app.add_route("/v1/completions", Completions(settings, dispatcher))
    app.add_route("/v1/cache/warm", CacheWarm(settings, dispatcher))
    models = Models(settings)
    app.add_route("/v1/models", models)
    app.add_route("/v1/models/{model_id:path}", models, suffix="one")
    app.add_route("/health", Health())
    app.add_route("/ready", Ready(dispatcher))
    page = WebPage()
    app.add_route("/", page)
    app.add_route(STATIC_PREFIX + "{name}", page, suffix="asset")
    app.add_route("/metrics", metrics)
    app.add_route("/openapi.json", OpenAPIDocument())
    return app


def _snake(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")
