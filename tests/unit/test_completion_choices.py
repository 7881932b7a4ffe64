"""n and best_of on /v1/completions: picking the best, numbering choices, and the whole route with a fake."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from reame.gateway.api.completion_choices import Candidate, count_candidates, score, select, worker_logprobs
from reame.gateway.app import create_app
from reame.gateway.http.errors import APIError
from reame.gateway.upstream.client import Dispatcher
from reame.shared import protocol
from reame.shared.protocol import Delta, Done, FinishReason, TokenLogprob
from tests.unit.fakes import CONFIG, LIVENESS_S, FakeDispatcher

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx2")


def _candidate(text: str, *logprobs: float) -> Candidate:
    return Candidate(text, "stop", [TokenLogprob(b"t", lp) for lp in logprobs])


def test_best_of_defaults_to_n_and_must_cover_it() -> None:
    assert count_candidates({}, 3, False) == 3
    assert count_candidates({"best_of": 5}, 2, False) == 5
    assert count_candidates({"best_of": 2}, 2, True) == 2  # as many as n: streamable
    cases: list[tuple[dict[str, Any], int, bool]] = [
        ({"best_of": 1}, 2, False), ({"best_of": 0}, 1, False), ({"best_of": 9}, 1, False),
        ({"best_of": 2.5}, 1, False), ({"best_of": 3}, 1, True),
    ]
    for fields, n, stream in cases:
        with pytest.raises(APIError) as caught:
            count_candidates(fields, n, stream)
        assert caught.value.param == "best_of"


def test_ranking_needs_each_tokens_logprob() -> None:
    assert worker_logprobs(None, 2, 2) is None
    assert worker_logprobs(None, 1, 3) == 0
    assert worker_logprobs(4, 1, 3) == 4
    assert score(_candidate("a", -1.0, -3.0)) == -2.0
    assert score(_candidate("")) == -math.inf


def test_select_keeps_the_best_per_prompt_and_numbers_them_prompt_by_prompt() -> None:
    candidates = [_candidate("a", -2.0), _candidate("b", -0.5), _candidate("c", -0.5),
                  _candidate("d", -1.0), _candidate("e", -3.0), _candidate("f", -0.1)]
    choices = select(["P", "Q"], candidates, 2, echo=True, logprobs=False)
    assert [(c.index, c.text) for c in choices] == [(0, "Pb"), (1, "Pc"), (2, "Qf"), (3, "Qd")]
    assert all(c.logprobs is None for c in choices)
    every = select(["P", "Q"], candidates[:4], 2, echo=False, logprobs=True)
    assert [c.text for c in every] == ["a", "b", "c", "d"]  # best_of == n: generation order
    assert every[0].logprobs is not None and every[0].logprobs["token_logprobs"] == [-2.0]


class _SeededFake(FakeDispatcher):
    """Answers a prompt with its seed, the logprob of its one token peaking at seed 12."""

    @staticmethod
    def script(request: protocol.Generate) -> tuple[list[protocol.Message | bytes], bool]:
        rid, seed = request.request_id, request.sampling.seed or 0
        entries = [TokenLogprob(b"x", -abs(seed - 12) / 10)] if request.logprobs is not None else []
        return [Delta(rid, f"{request.prompt}:{seed}", 1, entries),
                Done(rid, FinishReason.STOP, prompt_tokens=5, completion_tokens=1, cached_tokens=4)], False


@pytest.fixture
def fake_client() -> Iterator[tuple[Any, _SeededFake]]:
    context: zmq.Context[Any] = zmq.Context()
    fake = _SeededFake(context)
    app = create_app(CONFIG, Dispatcher(fake.address, liveness_s=LIVENESS_S, context=context))
    http = httpx.Client(transport=httpx.WSGITransport(app=app))
    yield openai.OpenAI(base_url="http://gateway/v1", api_key="unused", http_client=http, max_retries=0), fake
    http.close()
    fake.stop()
    context.destroy(linger=0)


def test_n_choices_per_prompt_with_the_prompt_counted_once(fake_client: tuple[Any, _SeededFake]) -> None:
    client, fake = fake_client
    reply = client.completions.create(model="x", prompt=["A", "B"], n=2, seed=10)
    assert [(c.index, c.text) for c in reply.choices] == [(0, "A:10"), (1, "A:11"), (2, "B:10"), (3, "B:11")]
    assert reply.usage.prompt_tokens == 2 * 5 and reply.usage.completion_tokens == 4
    assert all(g.logprobs is None for g in fake.generates())
    stream = client.completions.create(model="x", prompt="A", n=3, seed=10, logprobs=0, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    texts = {c.choices[0].index: c.choices[0].text for c in chunks if c.choices and c.choices[0].text}
    assert texts == {0: "A:10", 1: "A:11", 2: "A:12"}
    assert chunks[-1].usage.prompt_tokens == 5 and chunks[-1].usage.completion_tokens == 3


def test_best_of_returns_the_n_most_likely(fake_client: tuple[Any, _SeededFake]) -> None:
    client, fake = fake_client
    reply = client.completions.create(model="x", prompt="A", n=2, best_of=5, seed=10)
    assert [(c.index, c.text) for c in reply.choices] == [(0, "A:12"), (1, "A:11")]  # 11 and 13 tie: earlier first
    assert all(c.logprobs is None for c in reply.choices)  # asked for ranking, not returned
    assert reply.usage.prompt_tokens == 5 and reply.usage.completion_tokens == 5  # every generation is billed
    assert [g.sampling.seed for g in fake.generates()] == [10, 11, 12, 13, 14]
    with_logprobs = client.completions.create(model="x", prompt="A", best_of=3, seed=10, logprobs=1)
    assert [c.text for c in with_logprobs.choices] == ["A:12"]
    assert with_logprobs.choices[0].logprobs.token_logprobs == [0.0]
