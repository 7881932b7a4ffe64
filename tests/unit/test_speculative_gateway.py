"""The per-request switch ``"reame": {"speculative": MODE}``: validated, then sent to the worker."""

from __future__ import annotations

from typing import Any

import falcon.testing
import pytest

from reame.gateway.api.validation import parse_chat, parse_completion
from reame.gateway.http.errors import APIError
from reame.shared.config import load
from tests.unit.fakes import FakeDispatcher, chat_body

SAMPLING = load(None, environ={}).sampling


@pytest.mark.parametrize("mode", ["off", "lookup", "model"])
def test_each_mode_is_accepted(mode: str) -> None:
    assert parse_chat(chat_body(reame={"speculative": mode}), SAMPLING).options.speculative == mode
    body = {"prompt": "x", "reame": {"speculative": mode}}
    assert parse_completion(body, SAMPLING).options.speculative == mode


def test_absent_means_the_workers_default() -> None:
    assert parse_chat(chat_body(), SAMPLING).options.speculative is None
    assert parse_chat(chat_body(reame={"speculative": None}), SAMPLING).options.speculative is None


@pytest.mark.parametrize("value", ["fast", "", "LOOKUP", True, 1, ["lookup"]])
def test_a_bad_mode_is_a_400_naming_the_switch(value: Any) -> None:
    with pytest.raises(APIError) as caught:
        parse_chat(chat_body(reame={"speculative": value}), SAMPLING)
    assert caught.value.status == 400
    assert caught.value.param == "reame.speculative"
    assert "off, lookup, model" in caught.value.message


def test_the_mode_reaches_the_worker(
    client: falcon.testing.TestClient, fake: FakeDispatcher
) -> None:
    result = client.simulate_post("/v1/chat/completions", json=chat_body(reame={"speculative": "lookup"}))
    assert result.status_code == 200
    result = client.simulate_post("/v1/completions", json={"prompt": "hello", "max_tokens": 2})
    assert result.status_code == 200
    assert [sent.speculative for sent in fake.generates()] == ["lookup", None]
