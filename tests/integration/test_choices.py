"""n > 1 on chat completions and completions (and best_of) through the whole stack, with the official openai client."""

from __future__ import annotations

import json
import uuid
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


def _prefills(server: Server) -> dict[str, int]:
    state = server.ready()
    assert state is not None
    counts: dict[str, int] = state["prefills"]
    return counts


def _notice() -> str:
    """A prompt of a few hundred tokens no worker has read yet."""
    lines = [f"Harbour notice {uuid.uuid4().hex}."]
    lines += [f"Pier {i}: boats leave at {6 + i % 5} o'clock and return before dusk." for i in range(24)]
    return "\n".join(lines) + "\nIn short, the harbour"


def test_completions_n_3_reads_the_prompt_once_and_counts_it_once(server: Server) -> None:
    prompt = _notice()
    with server.client() as client:
        before = _prefills(server)
        reply = client.completions.create(model="any", prompt=prompt, n=3, max_tokens=10, temperature=0.9, seed=7,
                                          logprobs=1)
        after = _prefills(server)
        single = client.completions.create(model="any", prompt=prompt, max_tokens=10, temperature=0.9, seed=7)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert reply.choices[0].text == single.choices[0].text  # choice i samples with seed + i
    assert len({c.text for c in reply.choices}) > 1
    for choice in reply.choices:
        assert choice.logprobs is not None and choice.logprobs.tokens and choice.logprobs.token_logprobs
        assert choice.logprobs.top_logprobs and len(choice.logprobs.top_logprobs[0]) == 1
    assert reply.usage is not None and single.usage is not None
    assert reply.usage.prompt_tokens == single.usage.prompt_tokens
    assert reply.usage.completion_tokens == sum(len(c.logprobs.tokens or []) for c in reply.choices if c.logprobs)
    # One request read the prompt; the two later choices found its KV state.
    reused = sum(after[k] - before[k] for k in ("reused_from_memory", "reused_from_store"))
    assert (after["full"] - before["full"], reused) == (1, 2)


def test_streamed_completions_n_2_over_two_prompts(server: Server) -> None:
    prompts = ["The sea is", "The mountain is"]
    with server.client() as client:
        stream = client.completions.create(model="any", prompt=prompts, n=2, max_tokens=8, temperature=0.9, seed=3,
                                           stream=True, stream_options={"include_usage": True})
        texts: dict[int, str] = {}
        finishes: dict[int, str] = {}
        usage = None
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                texts[choice.index] = texts.get(choice.index, "") + choice.text
                if choice.finish_reason:
                    finishes[choice.index] = choice.finish_reason
        whole = client.completions.create(model="any", prompt=prompts, n=2, max_tokens=8, temperature=0.9, seed=3)
    assert sorted(texts) == sorted(finishes) == [0, 1, 2, 3]
    assert [texts[i] for i in range(4)] == [c.text for c in whole.choices]  # index = prompt * n + choice
    assert usage is not None and whole.usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (whole.usage.prompt_tokens, whole.usage.completion_tokens)


def test_best_of_returns_the_most_likely_of_its_candidates(server: Server) -> None:
    prompt = "Three words about rain:"
    with server.client() as client:
        every = client.completions.create(model="any", prompt=prompt, n=4, max_tokens=8, temperature=1.0, seed=11,
                                          logprobs=0)
        best = client.completions.create(model="any", prompt=prompt, n=2, best_of=4, max_tokens=8, temperature=1.0,
                                         seed=11)

    def mean(choice: Any) -> float:
        logprobs = choice.logprobs.token_logprobs
        return sum(logprobs) / len(logprobs) if logprobs else float("-inf")

    ranked = sorted(every.choices, key=mean, reverse=True)
    assert [c.text for c in best.choices] == [c.text for c in ranked[:2]]
    assert [c.index for c in best.choices] == [0, 1] and all(c.logprobs is None for c in best.choices)
    assert best.usage is not None and every.usage is not None
    assert best.usage.completion_tokens == every.usage.completion_tokens  # all four generations are counted
