"""/metrics, x-request-id, HEAD and CORS in the Falcon app, against the fake dispatcher."""

from __future__ import annotations

import json
import logging

import falcon.testing
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reame.gateway.app import create_app
from reame.gateway.http.headers import MAX_REQUEST_ID, client_request_id
from reame.gateway.http.metrics import endpoint
from reame.gateway.upstream.client import Dispatcher
from reame.shared import config
from reame.shared.logs import JSONFormatter
from tests.unit.fakes import LIVENESS_S, FakeDispatcher, chat_body

KEY = "sk-test-metrics-0123456789abcdef"
ORIGIN = "https://app.example.com"


def samples(client: falcon.testing.TestClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Scrape /metrics and parse it with prometheus-client's own parser."""
    result = client.simulate_get("/metrics")
    assert result.status_code == 200 and result.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(result.text)
        for s in family.samples
    }


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return found.get((name, frozenset({"model": "test-model", **labels}.items())), 0.0)


def configured_client(fake: FakeDispatcher, **environ: str) -> falcon.testing.TestClient:
    settings = {"REAME_MODEL_ALIAS": "test-model", **environ}
    dispatcher = Dispatcher(fake.address, liveness_s=LIVENESS_S, context=fake.context)
    return falcon.testing.TestClient(create_app(config.load(environ=settings), dispatcher))


def test_metric_families_move_as_requests_are_served(client: falcon.testing.TestClient) -> None:
    before = samples(client)
    assert value(before, "reame_dispatcher_up") == 1.0 and value(before, "reame_workers") == 1.0
    ok = {"endpoint": "/v1/chat/completions", "status": "200"}
    assert value(before, "reame_requests_total", **ok) == 0.0
    client.simulate_post("/v1/chat/completions", json=chat_body())
    client.simulate_post("/v1/chat/completions", json=chat_body(stream=True))
    client.simulate_post("/v1/chat/completions", json=chat_body("overloaded"))
    after = samples(client)
    assert value(after, "reame_requests_total", **ok) == 2.0
    assert value(after, "reame_requests_total", endpoint="/v1/chat/completions", status="429") == 1.0
    assert value(after, "reame_prompt_tokens_total") == 10.0  # the fake's Done: 5 prompt tokens
    assert value(after, "reame_completion_tokens_total") == 4.0
    assert value(after, "reame_cached_prompt_tokens_total", source="memory") == 2.0
    assert value(after, "reame_compression_saved_tokens_total", mode="lossless") == 0.0
    assert value(after, "reame_time_to_first_token_seconds_count") == 2.0
    assert value(after, "reame_queue_wait_seconds_count") == 2.0
    assert value(after, "reame_request_seconds_count", endpoint="/v1/chat/completions") == 3.0
    assert value(after, "reame_time_per_output_token_seconds_count") == 0.0  # the fake reports no generation time


def test_endpoint_labels_cannot_be_grown_by_made_up_paths() -> None:
    assert endpoint("/v1/chat/completions") == "/v1/chat/completions"
    assert endpoint("/v1/models/anything") == "/v1/models/{id}"
    assert endpoint("/etc/passwd") == endpoint("/x" * 100) == "other"


def test_a_silent_dispatcher_is_reported_down_and_the_scrape_still_answers(fake: FakeDispatcher) -> None:
    fake.stop()
    found = samples(falcon.testing.TestClient(create_app(
        config.load(environ={"REAME_MODEL_ALIAS": "test-model"}),
        Dispatcher(fake.address, liveness_s=LIVENESS_S, context=fake.context),
    )))
    assert value(found, "reame_dispatcher_up") == 0.0
    assert ("reame_workers", frozenset({"model": "test-model"}.items())) not in found


@pytest.mark.parametrize("path", ["/health", "/ready", "/v1/models", "/v1/models/test-model", "/metrics"])
def test_head_works_where_get_does(client: falcon.testing.TestClient, path: str) -> None:
    result = client.simulate_head(path)
    assert result.status_code == 200 and result.content == b""
    assert result.headers["x-request-id"]


def test_x_request_id_echoes_the_clients_else_the_completion_id(client: falcon.testing.TestClient) -> None:
    mine = client.simulate_post("/v1/chat/completions", json=chat_body(), headers={"X-Request-Id": "trace-42"})
    assert mine.headers["x-request-id"] == "trace-42"
    theirs = client.simulate_post("/v1/chat/completions", json=chat_body())
    assert theirs.headers["x-request-id"] == theirs.json["id"]
    streamed = client.simulate_post("/v1/chat/completions", json=chat_body(stream=True))
    first = json.loads(streamed.text.split("\n\n")[0][6:])
    assert streamed.headers["x-request-id"] == first["id"]
    error = client.simulate_post("/v1/chat/completions", body=b"{")
    assert error.status_code == 400 and error.headers["x-request-id"].startswith("req-")


@pytest.mark.parametrize("sent", ["a b", "x" * (MAX_REQUEST_ID + 1), "evil\u2028line", "<script>", ""])
def test_an_unsafe_request_id_is_not_echoed(sent: str) -> None:
    assert client_request_id(sent) is None


def test_cors_preflight_is_answered_without_a_key_and_api_answers_carry_the_origin(fake: FakeDispatcher) -> None:
    client = configured_client(fake, REAME_SERVER_API_KEYS=KEY, REAME_SERVER_CORS_ORIGINS=f"{ORIGIN}, https://b.example")
    preflight = client.simulate_options("/v1/chat/completions", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
    })
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    allowed = {h.strip().lower() for h in preflight.headers["access-control-allow-headers"].split(",")}
    assert {"authorization", "x-api-key", "content-type", "x-stainless-os"} <= allowed
    assert "POST" in preflight.headers["access-control-allow-methods"]
    answer = client.simulate_post("/v1/chat/completions", json=chat_body(),
                                  headers={"Origin": ORIGIN, "Authorization": f"Bearer {KEY}"})
    assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == ORIGIN
    assert "X-Request-Id" in answer.headers["access-control-expose-headers"]
    refused = client.simulate_post("/v1/chat/completions", json=chat_body(), headers={"Origin": ORIGIN})
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == ORIGIN
    stranger = client.simulate_options("/v1/chat/completions", headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in stranger.headers and stranger.status_code != 204


def test_without_cors_origins_no_cors_header_is_sent(client: falcon.testing.TestClient) -> None:
    answer = client.simulate_post("/v1/chat/completions", json=chat_body(), headers={"Origin": ORIGIN})
    assert "access-control-allow-origin" not in answer.headers


def test_the_request_log_line_parses_as_json(
    client: falcon.testing.TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="gateway.requests"):
        plain = client.simulate_post("/v1/chat/completions", json=chat_body(), headers={"X-Request-Id": "t-1"}).json
    records = [r for r in caplog.records if r.name == "gateway.requests"]
    line = json.loads(JSONFormatter("gateway").format(records[0]))
    assert line["request_id"] == plain["id"] and line["x_request_id"] == "t-1"
    assert (line["status"], line["prompt_tokens"], line["cached_tokens"], line["completion_tokens"]) == (200, 5, 1, 2)
    # No document in the request: the configured mode sends it as it is.
    assert line["compress"] == config.load(environ={}).compress.mode and line["saved_tokens"] == 0
    assert line["ttft_s"] >= 0 and line["total_s"] >= line["ttft_s"]
    assert line["process"] == "gateway" and line["level"] == "info" and line["message"].startswith(plain["id"])


def test_a_json_line_is_one_line_whatever_the_message() -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "bad %s", ("a\nb\u2028c",), None)
    text = JSONFormatter("reame").format(record)
    assert "\n" not in text and "\u2028" not in text
    assert json.loads(text)["message"] == "bad a\nb\u2028c"
