"""The Falcon middleware that lets a request through only with a configured API key.

With no key configured it lets everything through. Otherwise every path but the
probes and the web page with its assets (:data:`OPEN_PATHS`) needs a key
(gateway.http.auth): no key is OpenAI's 401 with ``"code": null``, a wrong one its 401
with ``"code": "invalid_api_key"``. Unknown paths are refused the same way, so an
unauthenticated client learns nothing about the routes. The matched key's
:class:`~reame.gateway.http.auth.Tenant` rides on ``req.context.tenant`` (the cache
scope is derived from it) and names the key in the request's log line.
"""

from __future__ import annotations

from typing import Final

import falcon

from reame.gateway.http.auth import Keys, Tenant, presented_key
from reame.gateway.http.errors import APIError
from reame.gateway.http.requestlog import PROBE_PATHS, request_log
from reame.gateway.http.webpage import PAGE_PATHS

# An orchestrator's probes carry no key; they say nothing a client could use. Nor does
# the web page: it is the same for everyone, and its API calls carry the key.
OPEN_PATHS: Final = PROBE_PATHS | PAGE_PATHS
NO_KEY: Final = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header "
    "using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or in an X-Api-Key header."
)
WRONG_KEY: Final = "Incorrect API key provided. Ask the operator of this server for a valid key."
CHALLENGE: Final = "Bearer"  # the WWW-Authenticate value every 401 carries (RFC 9110)


class KeyMiddleware:
    """Refuse requests without a configured key; run it after the log middleware."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.tenant = None
        if not self.keys or req.path in OPEN_PATHS:
            return
        presented = presented_key(req.get_header("Authorization"), req.get_header("X-Api-Key"))
        tenant = self.keys.match(presented) if presented is not None else None
        if tenant is None:
            resp.set_header("WWW-Authenticate", CHALLENGE)
            if presented is None:
                raise APIError(401, NO_KEY)
            raise APIError(401, WRONG_KEY, code="invalid_api_key")
        req.context.tenant = tenant
        request_log(req).key_id = tenant.key_id


def tenant_of(req: falcon.Request) -> Tenant | None:
    """Return the tenant the middleware found for ``req`` (None: no keys configured)."""
    tenant = req.context.get("tenant")
    return tenant if isinstance(tenant, Tenant) else None
