"""The web page at / and its assets, through the Falcon app (the fake dispatcher is never asked)."""

from __future__ import annotations

import re

import falcon.testing
import pytest

from reame.gateway.app import create_app
from reame.gateway.http.webpage import ASSETS, CONTENT_SECURITY_POLICY, PAGE, PAGE_PATHS, STATIC_PREFIX
from reame.gateway.upstream.client import Dispatcher
from reame.shared import config
from tests.unit.fakes import LIVENESS_S, FakeDispatcher

# path -> media type
PATHS = {"/": "text/html"} | {STATIC_PREFIX + name: kind.split(";")[0] for name, kind in ASSETS.items() if name != PAGE}


@pytest.mark.parametrize(("path", "content_type"), sorted(PATHS.items()))
def test_each_file_has_its_type_an_etag_and_the_security_headers(
    client: falcon.testing.TestClient, path: str, content_type: str
) -> None:
    result = client.simulate_get(path)
    assert result.status_code == 200 and result.content
    assert result.headers["content-type"].split(";")[0] == content_type
    assert re.fullmatch(r'"[0-9a-f]{32}"', result.headers["etag"])
    assert result.headers["cache-control"] == "no-cache"
    assert result.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert result.headers["x-content-type-options"] == "nosniff"
    head = client.simulate_head(path)
    assert head.status_code == 200 and head.headers["etag"] == result.headers["etag"] and not head.content


def test_the_policy_allows_only_the_page_s_own_files() -> None:
    directives = dict(d.split(" ", 1) for d in CONTENT_SECURITY_POLICY.split("; "))
    assert directives["default-src"] == "'self'"
    for name in ("script-src", "style-src", "connect-src", "img-src"):
        assert directives[name] == "'self'"  # no 'unsafe-inline', no other origin
    assert directives["object-src"] == directives["base-uri"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_matching_if_none_match_is_304_without_a_body(client: falcon.testing.TestClient, path: str) -> None:
    etag = client.simulate_get(path).headers["etag"]
    for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = client.simulate_get(path, headers={"If-None-Match": header})
        assert again.status_code == 304 and not again.content, header
        assert again.headers["etag"] == etag
    changed = client.simulate_get(path, headers={"If-None-Match": '"0123"'})
    assert changed.status_code == 200 and changed.content


def test_the_page_has_no_inline_script_or_style(client: falcon.testing.TestClient) -> None:
    html = client.simulate_get("/").text
    assert re.findall(r"<script\b[^>]*>", html) == ['<script type="module" src="/static/app.js">']
    assert "<style" not in html and not re.search(r"<[^>]*\sstyle\s*=", html)
    assert not re.search(r"<[^>]*\son[a-z]+\s*=", html, re.IGNORECASE)  # no inline event handlers
    for path in re.findall(r'(?:src|href)="(/[^"]*)"', html):
        assert path in PAGE_PATHS, path  # every asset the page names is served and open


def test_unknown_assets_are_404_and_the_page_is_not_served_twice(client: falcon.testing.TestClient) -> None:
    for path in (STATIC_PREFIX + "nope.js", STATIC_PREFIX + "index.html", STATIC_PREFIX + "..%2Fapp.py"):
        result = client.simulate_get(path)
        assert result.status_code == 404 and result.json["error"]["code"] == "not_found"
    assert client.simulate_post("/").status_code == 405


def test_with_keys_the_page_is_open_and_the_api_is_not(fake: FakeDispatcher) -> None:
    environ = {"REAME_SERVER_API_KEYS": "sk-test-0123456789abcdef"}
    dispatcher = Dispatcher(fake.address, liveness_s=LIVENESS_S, context=fake.context)
    keyed = falcon.testing.TestClient(create_app(config.load(environ=environ), dispatcher))
    for path in PATHS:
        assert keyed.simulate_get(path).status_code == 200, path
    assert keyed.simulate_get("/v1/models").status_code == 401
    # Any other path under /static/ needs the key, as unknown paths do: nothing is learnt without one.
    assert keyed.simulate_get(STATIC_PREFIX + "nope.js").status_code == 401
