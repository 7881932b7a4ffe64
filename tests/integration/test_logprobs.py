"""Chat logprobs through the whole stack, with the official openai client."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.harness import Server

pytestmark = pytest.mark.integration

CHAT: Any = [{"role": "user", "content": "Name three colours of the rainbow."}]


@pytest.mark.parametrize("speculative", ["off", "lookup"])
def test_each_token_has_its_logprob_and_the_top_ones(server: Server, speculative: str) -> None:
    reply = server.client().chat.completions.create(
        model="any", messages=CHAT, max_tokens=20, temperature=0, logprobs=True, top_logprobs=3,
        extra_body={"reame": {"speculative": speculative}},
    )
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    content = choice.logprobs.content
    assert reply.usage is not None and len(content) == reply.usage.completion_tokens
    text = b"".join(bytes(entry.bytes or []) for entry in content).decode("utf-8")
    assert text == choice.message.content
    for entry in content:
        assert entry.logprob <= 0.0 and math.isfinite(entry.logprob)
        tops = entry.top_logprobs
        assert len(tops) == 3
        assert [t.logprob for t in tops] == sorted((t.logprob for t in tops), reverse=True)
        # Greedy: the chosen token is the most likely one (up to ties).
        assert entry.logprob == pytest.approx(tops[0].logprob, abs=1e-6)


def test_without_logprobs_there_are_none(server: Server) -> None:
    reply = server.client().chat.completions.create(model="any", messages=CHAT, max_tokens=5)
    assert reply.choices[0].logprobs is None


def test_streamed_chunks_carry_their_tokens_logprobs(server: Server) -> None:
    stream = server.client().chat.completions.create(
        model="any", messages=CHAT, max_tokens=20, temperature=0.8, seed=3, logprobs=True,
        stream=True, stream_options={"include_usage": True},
    )
    text = []
    entries = []
    usage = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                text.append(choice.delta.content)
                assert choice.logprobs is not None and choice.logprobs.content
                entries += choice.logprobs.content
    assert usage is not None and len(entries) == usage.completion_tokens
    assert b"".join(bytes(e.bytes or []) for e in entries).decode("utf-8") == "".join(text)
    assert all(e.top_logprobs == [] for e in entries)


def test_logprobs_under_a_grammar_are_the_models(server: Server) -> None:
    reply = server.client().chat.completions.create(
        model="any", messages=CHAT, max_tokens=30, temperature=0, logprobs=True,
        response_format={"type": "json_object"},
    )
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None
    content = logprobs.content
    assert content and all(e.logprob <= 0.0 for e in content)


@pytest.mark.parametrize("stream", [False, True])
def test_completion_logprobs_in_the_legacy_shape(server: Server, stream: bool) -> None:
    client = server.client()
    if stream:
        chunks = list(client.completions.create(
            model="any", prompt="The capital of France is", max_tokens=8, temperature=0, logprobs=2, stream=True,
        ))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        parts = [c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].logprobs is not None]
        tokens = [t for p in parts for t in p.tokens or []]
        offsets = [o for p in parts for o in p.text_offset or []]
        tops = [t for p in parts for t in p.top_logprobs or []]
    else:
        reply = client.completions.create(
            model="any", prompt="The capital of France is", max_tokens=8, temperature=0, logprobs=2,
        )
        text = reply.choices[0].text
        logprobs = reply.choices[0].logprobs
        assert logprobs is not None
        tokens, offsets, tops = logprobs.tokens or [], logprobs.text_offset or [], logprobs.top_logprobs or []
        assert all(lp is not None and lp <= 0.0 for lp in logprobs.token_logprobs or [])
    assert "".join(tokens) == text
    assert offsets == [len("".join(tokens[:i])) for i in range(len(tokens))]
    assert all(1 <= len(top) <= 2 for top in tops)
