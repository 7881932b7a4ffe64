"""The web page at ``/``: a static page, served from the package, for asking about a document.

The page (``static/``: HTML, CSS and a vanilla JS module, no build step) talks to the
same OpenAI API as any client, from the browser, and keeps its conversations there;
the server stores nothing for it. Its files are read once, when the app is built,
and each answer carries a strong ``ETag`` (a hash of the bytes): browsers revalidate
every time (``Cache-Control: no-cache``) and get a 304 with no body while the file
is unchanged. A strict Content-Security-Policy allows only the page's own files: no
inline script or style, no other origin, no plugins, no framing; the script never
inserts model text as HTML, so this is the second line of defence.

The page and its assets need no API key (:data:`PAGE_PATHS` are open in
``gateway.http.guard``); the API calls the page makes do.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from typing import Final, Literal

import falcon

# name -> content type; the only files served (no directory listing, no path walking).
ASSETS: Final = {
    "index.html": "text/html; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "markdown.js": "text/javascript; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
PAGE: Final = "index.html"
STATIC_PREFIX: Final = "/static/"
# The paths the page is served on; the key middleware lets them through.
PAGE_PATHS: Final = frozenset({"/", *(STATIC_PREFIX + name for name in ASSETS if name != PAGE)})

CONTENT_SECURITY_POLICY: Final = "; ".join((
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
))
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
CACHE_CONTROL: Final = "no-cache"  # the names carry no version: always revalidate (a 304 is cheap)


@dataclass(frozen=True)
class Asset:
    """One static file, read into memory."""

    data: bytes
    content_type: str
    etag: str  # without the quotes

    @classmethod
    def load(cls, name: str) -> Asset:
        data = (resources.files("reame.gateway.http") / "static" / name).read_bytes()
        return cls(data, ASSETS[name], hashlib.sha256(data).hexdigest()[:32])


class WebPage:
    """GET / (the page) and GET /static/{name} (its assets)."""

    def __init__(self) -> None:
        self.assets = {name: Asset.load(name) for name in ASSETS}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        self._send(req, resp, self.assets[PAGE])

    def on_get_asset(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        asset = self.assets.get(name) if name != PAGE else None
        if asset is None:
            raise falcon.HTTPNotFound()
        self._send(req, resp, asset)

    on_head = on_get
    on_head_asset = on_get_asset

    @staticmethod
    def _send(req: falcon.Request, resp: falcon.Response, asset: Asset) -> None:
        resp.set_headers(SECURITY_HEADERS)
        resp.set_header("Cache-Control", CACHE_CONTROL)
        resp.etag = asset.etag
        if _matches(req.if_none_match, asset.etag):
            resp.status = falcon.HTTP_304  # no body, so no Content-Type either
            return
        resp.content_type = asset.content_type
        resp.data = asset.data


def _matches(if_none_match: list[falcon.ETag | Literal["*"]] | None, etag: str) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (weak comparison, as RFC 9110 asks for GET)."""
    if not if_none_match:
        return False
    return any(tag == "*" or str(tag) == etag for tag in if_none_match)
