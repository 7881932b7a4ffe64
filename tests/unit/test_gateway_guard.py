"""The API key middleware in the Falcon app, against the fake dispatcher."""

from __future__ import annotations

import logging
from typing import Any

import falcon
import falcon.testing
import pytest

from reame.gateway.app import create_app
from reame.gateway.http.auth import key_id
from reame.gateway.http.guard import NO_KEY, WRONG_KEY
from reame.gateway.upstream.client import Dispatcher
from reame.shared import config
from tests.unit.fakes import LIVENESS_S, FakeDispatcher, chat_body

KEY_A = "sk-test-a-0123456789abcdef"
KEY_B = "sk-test-b-0123456789abcdef"


def keyed_client(fake: FakeDispatcher, **environ: str) -> falcon.testing.TestClient:
    settings = {"REAME_SERVER_API_KEYS": f"{KEY_A},{KEY_B}", "REAME_MODEL_ALIAS": "test-model", **environ}
    dispatcher = Dispatcher(fake.address, liveness_s=LIVENESS_S, context=fake.context)
    app = create_app(config.load(environ=settings), dispatcher)
    return falcon.testing.TestClient(app)


@pytest.fixture
def keyed(fake: FakeDispatcher) -> falcon.testing.TestClient:
    return keyed_client(fake)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def error_of(result: falcon.testing.Result) -> dict[str, Any]:
    assert set(result.json) == {"error"}
    error: dict[str, Any] = result.json["error"]
    return error


def test_no_key_is_openai_401_with_a_null_code(keyed: falcon.testing.TestClient, fake: FakeDispatcher) -> None:
    result = keyed.simulate_post("/v1/chat/completions", json=chat_body())
    assert result.status_code == 401 and result.headers["www-authenticate"] == "Bearer"
    assert error_of(result) == {"message": NO_KEY, "type": "invalid_request_error", "param": None, "code": None}
    assert fake.generates() == []


@pytest.mark.parametrize("headers", [bearer("sk-wrong"), {"X-Api-Key": "sk-wrong"}, bearer(KEY_A + "x")])
def test_a_wrong_key_is_openai_401_invalid_api_key(keyed: falcon.testing.TestClient, headers: dict[str, str]) -> None:
    result = keyed.simulate_post("/v1/chat/completions", json=chat_body(), headers=headers)
    assert result.status_code == 401
    assert error_of(result) == {
        "message": WRONG_KEY, "type": "invalid_request_error", "param": None, "code": "invalid_api_key"
    }
    assert "sk-wrong" not in result.text


@pytest.mark.parametrize("key", [KEY_A, KEY_B])
@pytest.mark.parametrize("form", ["bearer", "x-api-key"])
def test_each_key_passes_in_both_header_forms(keyed: falcon.testing.TestClient, key: str, form: str) -> None:
    headers = bearer(key) if form == "bearer" else {"X-Api-Key": key}
    assert keyed.simulate_post("/v1/chat/completions", json=chat_body(), headers=headers).status_code == 200
    assert keyed.simulate_get("/v1/models", headers=headers).status_code == 200


def test_probes_stay_open_and_unknown_paths_are_closed(keyed: falcon.testing.TestClient) -> None:
    assert keyed.simulate_get("/health").status_code == 200
    assert keyed.simulate_get("/ready").status_code == 200
    assert keyed.simulate_get("/ready/").status_code == 200
    assert keyed.simulate_get("/v1/models").status_code == 401
    assert keyed.simulate_get("/no/such/path").status_code == 401
    assert keyed.simulate_get("/no/such/path", headers=bearer(KEY_A)).status_code == 404


def test_without_keys_everything_is_open(client: falcon.testing.TestClient) -> None:
    assert client.simulate_post("/v1/chat/completions", json=chat_body()).status_code == 200


def test_the_log_line_names_the_key_by_its_hash_only(
    keyed: falcon.testing.TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        keyed.simulate_post("/v1/chat/completions", json=chat_body(), headers=bearer(KEY_A))
        keyed.simulate_post("/v1/chat/completions", json=chat_body(), headers=bearer(KEY_B + "x"))
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.requests"]
    assert len(lines) == 2
    assert " 200 " in lines[0] and f" key={key_id(KEY_A)}" in lines[0]
    assert " 401 " in lines[1] and "key=" not in lines[1]
    assert KEY_A not in caplog.text and KEY_B not in caplog.text


def test_each_key_gets_its_own_cache_scope(keyed: falcon.testing.TestClient, fake: FakeDispatcher) -> None:
    for headers in (bearer(KEY_A), {"X-Api-Key": KEY_A}, bearer(KEY_B)):
        keyed.simulate_post("/v1/chat/completions", json=chat_body(), headers=headers)
    keyed.simulate_post("/v1/cache/warm", json={"prompt": "doc"}, headers=bearer(KEY_A))
    salted = chat_body(reame={"cache_salt": "user-1"})
    keyed.simulate_post("/v1/chat/completions", json=salted, headers=bearer(KEY_A))
    a, a_again, b, warm_a, a_salted = (g.cache_scope for g in fake.generates())
    assert a and a == a_again == warm_a and len({a, b, a_salted}) == 3
    assert all(KEY_A not in g.cache_scope and KEY_B not in g.cache_scope for g in fake.generates())


def test_shared_scope_ignores_the_key_but_not_the_salt(fake: FakeDispatcher) -> None:
    shared = keyed_client(fake, REAME_CACHE_SCOPE="shared")
    shared.simulate_post("/v1/chat/completions", json=chat_body(), headers=bearer(KEY_A))
    shared.simulate_post("/v1/chat/completions", json=chat_body(), headers=bearer(KEY_B))
    shared.simulate_post("/v1/chat/completions", json=chat_body(reame={"cache_salt": "s"}), headers=bearer(KEY_B))
    assert [bool(g.cache_scope) for g in fake.generates()] == [False, False, True]


@pytest.mark.parametrize("salt", ["", 7, "x" * 257, ["s"]])
def test_a_bad_cache_salt_is_a_400(client: falcon.testing.TestClient, salt: object) -> None:
    result = client.simulate_post("/v1/chat/completions", json=chat_body(reame={"cache_salt": salt}))
    assert result.status_code == 400 and error_of(result)["param"] == "reame.cache_salt"
