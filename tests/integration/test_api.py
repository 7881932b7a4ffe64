"""The OpenAI API through the whole stack, driven with the official openai client."""

from __future__ import annotations

import concurrent.futures
import json
from typing import Any

import openai
import pytest

from tests.harness import Server

pytestmark = pytest.mark.integration

CHAT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Name three colours of the rainbow."},
]
EOS_BANNED = {"2": -100}  # SmolLM2's end-of-text token: forces generation to run to max_tokens


def test_models_lists_the_served_model(server: Server) -> None:
    client = server.client()
    models = client.models.list().data
    assert len(models) == 1
    assert models[0].id.startswith("SmolLM2-135M-Instruct")
    assert client.models.retrieve(models[0].id).id == models[0].id
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_health_and_ready(server: Server) -> None:
    status, _, _ = server.request("GET", "/health")
    assert status == 200
    state = server.ready()
    assert state is not None and state["workers"] == 2


def test_chat_greedy_matches_llama_cpp_in_process(server: Server, reference_llama: Any) -> None:
    reference = reference_llama.create_chat_completion(messages=CHAT, temperature=0.0, max_tokens=40)
    reply = server.client().chat.completions.create(
        model="any", messages=CHAT, temperature=0, max_tokens=40  # type: ignore[arg-type]
    )
    assert reply.object == "chat.completion"
    assert reply.id.startswith("chatcmpl-")
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == reference["choices"][0]["message"]["content"]
    assert reply.choices[0].finish_reason == reference["choices"][0]["finish_reason"]
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == reference["usage"]["prompt_tokens"]
    assert reply.usage.completion_tokens == reference["usage"]["completion_tokens"]
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_completion_greedy_matches_llama_cpp_in_process(server: Server, reference_llama: Any) -> None:
    prompt = "The capital of France is Paris. The capital of Germany is"
    reference = reference_llama.create_completion(prompt, temperature=0.0, max_tokens=24, repeat_penalty=1.0)
    reply = server.client().completions.create(model="any", prompt=prompt, temperature=0, max_tokens=24)
    assert reply.object == "text_completion"
    assert reply.choices[0].text == reference["choices"][0]["text"]
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == len(reference_llama.tokenize(prompt.encode(), special=True))
    assert reply.usage.prompt_tokens == reference["usage"]["prompt_tokens"]
    assert reply.usage.completion_tokens == reference["usage"]["completion_tokens"]


def test_chat_stream_has_role_content_finish_usage_and_done(server: Server) -> None:
    client = server.client()
    plain = client.chat.completions.create(
        model="m", messages=CHAT, temperature=0, max_tokens=30  # type: ignore[arg-type]
    )
    stream = client.chat.completions.create(
        model="m", messages=CHAT, temperature=0, max_tokens=30, stream=True,  # type: ignore[arg-type]
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == plain.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert plain.usage is not None
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens


def test_raw_stream_ends_with_done(server: Server) -> None:
    body = {"model": "m", "prompt": "One, two,", "max_tokens": 5, "stream": True, "temperature": 0}
    status, headers, raw = server.request(
        "POST", "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    events = [line for line in raw.decode().split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    payloads = [json.loads(event.removeprefix("data: ")) for event in events[:-1]]
    assert all(p["object"] == "text_completion" for p in payloads)
    assert payloads[-1]["choices"][0]["finish_reason"] == "length"


def test_completion_prompt_list_gives_one_choice_each(server: Server) -> None:
    prompts = ["Roses are red,", "Once upon a time"]
    reply = server.client().completions.create(model="m", prompt=prompts, temperature=0, max_tokens=6)
    assert sorted(choice.index for choice in reply.choices) == [0, 1]
    for choice in reply.choices:
        single = server.client().completions.create(
            model="m", prompt=prompts[choice.index], temperature=0, max_tokens=6
        )
        assert choice.text == single.choices[0].text


def test_max_tokens_gives_finish_reason_length(server: Server) -> None:
    reply = server.client().chat.completions.create(
        model="m", messages=CHAT, max_tokens=7, logit_bias=EOS_BANNED  # type: ignore[arg-type]
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 7


def test_stop_sequence_never_leaks(server: Server) -> None:
    client = server.client()
    prompt = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"
    full = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=30).choices[0].text
    # Stop on text that the free run produces, so the stop really triggers mid-output.
    assert " 15," in full, full
    stop = " 15,"
    reply = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=30, stop=[stop, "zz"])
    assert reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].text == full[: full.index(stop)]
    streamed = client.completions.create(
        model="m", prompt=prompt, temperature=0, max_tokens=30, stop=stop, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == reply.choices[0].text


def test_seeded_sampling_is_reproducible(server: Server) -> None:
    client = server.client()
    args: dict[str, Any] = {"model": "m", "messages": CHAT, "temperature": 1.0, "seed": 1234, "max_tokens": 20}
    first = client.chat.completions.create(**args).choices[0].message.content
    second = client.chat.completions.create(**args).choices[0].message.content
    assert first == second


def test_eight_concurrent_streams_all_complete(server: Server) -> None:
    client = server.client()

    def one(i: int) -> tuple[str, str | None]:
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"Count to {i + 3}."}],
            max_tokens=24, stream=True, logit_bias=EOS_BANNED,  # type: ignore[arg-type]
        )
        text, finish = "", None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        return text, finish

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    assert [finish for _, finish in results] == ["length"] * 8
    assert all(text for text, _ in results)


def test_context_length_exceeded_is_a_400(server: Server) -> None:
    long_prompt = "word " * 5000
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().completions.create(model="m", prompt=long_prompt, max_tokens=5)
    assert caught.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(
            model="m", messages=CHAT, max_tokens=100000, stream=True  # type: ignore[arg-type]
        )
    assert caught.value.code == "context_length_exceeded"
