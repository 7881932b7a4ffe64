"""The official ``openai`` client parses what the gateway sends (over WSGI, no network)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from reame.gateway.app import create_app
from reame.gateway.upstream.client import Dispatcher
from tests.unit.fakes import CONFIG, LIVENESS_S, RETRY_AFTER, FakeDispatcher

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx2")


@pytest.fixture
def client() -> Iterator[Any]:
    context: zmq.Context[Any] = zmq.Context()
    fake = FakeDispatcher(context)
    app = create_app(CONFIG, Dispatcher(fake.address, liveness_s=LIVENESS_S, context=context))
    http = httpx.Client(transport=httpx.WSGITransport(app=app))
    yield openai.OpenAI(base_url="http://gateway/v1", api_key="unused", http_client=http, max_retries=0)
    http.close()
    fake.stop()
    context.destroy(linger=0)


def test_chat(client: Any) -> None:
    answer = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hello"}])
    assert answer.choices[0].message.content == "Hello"
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage.total_tokens == 7 and answer.usage.prompt_tokens_details.cached_tokens == 1
    assert answer.model == "test-model"


def test_chat_stream_with_usage(client: Any) -> None:
    stream = client.chat.completions.create(
        model="x", messages=[{"role": "user", "content": "hello"}], stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 2


def test_completions(client: Any) -> None:
    answer = client.completions.create(model="x", prompt=["p0", "p1"], echo=True)
    assert [c.text for c in answer.choices] == ["p0<p0>", "p1<p1>"]
    streamed = client.completions.create(model="x", prompt="p0", stream=True)
    assert "".join(c.choices[0].text for c in streamed) == "<p0>"


def test_models(client: Any) -> None:
    assert [m.id for m in client.models.list()] == ["test-model"]
    assert client.models.retrieve("test-model").owned_by == "reame"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("other")


def test_errors_become_the_clients_exceptions(client: Any) -> None:
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "overloaded"}])
    assert caught.value.response.headers["retry-after"] == RETRY_AFTER
    assert caught.value.code == "overloaded"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], n=9)
    assert bad.value.param == "n"


def test_error_in_a_stream_raises(client: Any) -> None:
    stream = client.chat.completions.create(
        model="x", messages=[{"role": "user", "content": "late error"}], stream=True
    )
    with pytest.raises(openai.APIError, match="worker died"):
        list(stream)
