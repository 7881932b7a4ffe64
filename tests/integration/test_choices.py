"""n > 1 on chat completions through the whole stack, with the official openai client."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.harness import Server

pytestmark = pytest.mark.integration

CHAT: Any = [{"role": "user", "content": "Write one sentence about the sea."}]


def test_n_3_gives_three_choices_and_counts_the_prompt_once(server: Server) -> None:
    client = server.client()
    single = client.chat.completions.create(model="any", messages=CHAT, max_tokens=12, temperature=0.9, seed=7)
    reply = client.chat.completions.create(model="any", messages=CHAT, max_tokens=12, temperature=0.9, seed=7, n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert all(c.message.content for c in reply.choices)
    # Choice 0 uses the seed itself, so it is the single reply; the others use seed + 1, seed + 2.
    assert reply.choices[0].message.content == single.choices[0].message.content
    assert len({c.message.content for c in reply.choices}) > 1
    assert reply.usage is not None and single.usage is not None
    assert reply.usage.prompt_tokens == single.usage.prompt_tokens
    assert single.usage.completion_tokens < reply.usage.completion_tokens
    assert reply.usage.completion_tokens <= 3 * 12


def test_n_with_a_schema_gives_valid_json_in_every_choice(server: Server) -> None:
    schema: Any = {"type": "object", "properties": {"mood": {"enum": ["calm", "rough"]}}, "required": ["mood"]}
    reply = server.client().chat.completions.create(
        model="any", messages=CHAT, max_tokens=20, temperature=1.0, seed=1, n=3,
        response_format={"type": "json_schema", "json_schema": {"name": "m", "schema": schema}},
    )
    assert len(reply.choices) == 3
    for choice in reply.choices:
        assert json.loads(choice.message.content or "")["mood"] in ("calm", "rough")


def test_streamed_n_3_sends_each_choice_with_its_index(server: Server) -> None:
    stream = server.client().chat.completions.create(
        model="any", messages=CHAT, max_tokens=12, temperature=0.9, seed=7, n=3, stream=True, logprobs=True,
        stream_options={"include_usage": True},
    )
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    tokens = 0
    usage = None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
            if choice.logprobs is not None and choice.logprobs.content:
                tokens += len(choice.logprobs.content)
    assert sorted(texts) == [0, 1, 2] and all(texts.values()) and sorted(finishes) == [0, 1, 2]
    single = server.client().chat.completions.create(model="any", messages=CHAT, max_tokens=12, temperature=0.9,
                                                     seed=7)
    assert texts[0] == single.choices[0].message.content
    assert usage is not None and single.usage is not None
    assert usage.prompt_tokens == single.usage.prompt_tokens and usage.completion_tokens == tokens
