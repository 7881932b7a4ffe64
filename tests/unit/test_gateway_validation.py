"""Request validation: malformed bodies name the field; valid ones map to typed requests."""

from __future__ import annotations

from typing import Any

import pytest

from reame.gateway.api.validation import (
    MAX_PROMPTS,
    ChatRequest,
    CompletionRequest,
    parse_chat,
    parse_completion,
)
from reame.gateway.http.errors import APIError
from reame.shared import config
from reame.shared.protocol import ChatMessage, SamplingParams

DEFAULTS = config.load(environ={}).sampling
USER = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": USER, **fields}


def completion(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "prompt": "Once", **fields}


# (body, expected param, expected code); every one must be a 400.
BAD_CHAT: list[tuple[Any, str | None, str]] = [
    ([], None, "invalid_type"),
    ("text", None, "invalid_type"),
    ({"model": "m"}, "messages", "missing_required_parameter"),
    ({"messages": None}, "messages", "missing_required_parameter"),
    ({"messages": "hi"}, "messages", "invalid_type"),
    ({"messages": []}, "messages", "invalid_value"),
    ({"messages": ["hi"]}, "messages[0]", "invalid_type"),
    ({"messages": [{"content": "x"}]}, "messages[0].role", "missing_required_parameter"),
    ({"messages": [*USER, {"role": "robot", "content": "x"}]}, "messages[1].role", "invalid_value"),
    ({"messages": [{"role": ["user"], "content": "x"}]}, "messages[0].role", "invalid_value"),
    ({"messages": [{"role": "user"}]}, "messages[0].content", "missing_required_parameter"),
    ({"messages": [{"role": "user", "content": None}]}, "messages[0].content", "missing_required_parameter"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "invalid_type"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0].type", "unsupported_parameter"),
    ({"messages": [{"role": "user", "content": [{"text": "x"}]}]},
     "messages[0].content[0].type", "missing_required_parameter"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]},
     "messages[0].content[0].text", "invalid_type"),
    ({"messages": [{"role": "user", "content": ["x"]}]}, "messages[0].content[0]", "invalid_type"),
    ({"messages": [{"role": "user", "content": "\ud800"}]}, "messages[0].content", "invalid_value"),
    ({"messages": [{"role": "user", "content": "x", "name": 1}]}, "messages[0].name", "invalid_type"),
    ({"messages": [{"role": "function", "content": None}]}, "messages[0].content", "missing_required_parameter"),
    (chat(model=3), "model", "invalid_type"),
    (chat(temperature=2.5), "temperature", "invalid_value"),
    (chat(temperature=-0.1), "temperature", "invalid_value"),
    (chat(temperature="1"), "temperature", "invalid_type"),
    (chat(temperature=True), "temperature", "invalid_type"),
    (chat(temperature=float("nan")), "temperature", "invalid_type"),
    (chat(top_p=1.5), "top_p", "invalid_value"),
    (chat(top_k=-1), "top_k", "invalid_value"),
    (chat(top_k=1.5), "top_k", "invalid_type"),
    (chat(min_p=2), "min_p", "invalid_value"),
    (chat(seed="7"), "seed", "invalid_type"),
    (chat(seed=2**64), "seed", "invalid_value"),
    (chat(max_tokens=0), "max_tokens", "invalid_value"),
    (chat(max_tokens=False), "max_tokens", "invalid_type"),
    (chat(max_completion_tokens=-5), "max_completion_tokens", "invalid_value"),
    (chat(max_tokens=10**30), "max_tokens", "invalid_value"),
    (chat(stop=5), "stop", "invalid_type"),
    (chat(stop=""), "stop", "invalid_value"),
    (chat(stop=["a", ""]), "stop[1]", "invalid_value"),
    (chat(stop=["a", 1]), "stop[1]", "invalid_type"),
    (chat(stop=[str(i) for i in range(17)]), "stop", "invalid_value"),
    (chat(presence_penalty=3), "presence_penalty", "invalid_value"),
    (chat(frequency_penalty=-2.5), "frequency_penalty", "invalid_value"),
    (chat(repeat_penalty=-1), "repeat_penalty", "invalid_value"),
    (chat(repeat_penalty=10**400), "repeat_penalty", "invalid_value"),
    (chat(logit_bias=[1]), "logit_bias", "invalid_type"),
    (chat(logit_bias={"abc": 1}), "logit_bias.abc", "invalid_value"),
    (chat(logit_bias={"-1": 1}), "logit_bias.-1", "invalid_value"),
    (chat(logit_bias={"9" * 5000: 1}), "logit_bias." + "9" * 40, "invalid_value"),
    (chat(logit_bias={"5": 101}), "logit_bias.5", "invalid_value"),
    (chat(logit_bias={"5": "1"}), "logit_bias.5", "invalid_value"),
    (chat(stream="yes"), "stream", "invalid_type"),
    (chat(stream_options={"include_usage": True}), "stream_options", "invalid_value"),
    (chat(stream=True, stream_options=[]), "stream_options", "invalid_type"),
    (chat(stream=True, stream_options={"include_usage": 1}), "stream_options.include_usage", "invalid_type"),
    (chat(n=9), "n", "invalid_value"),
    (chat(n=True), "n", "invalid_value"),
    (chat(n=2, stream=True, tools=[{"type": "function", "function": {"name": "f"}}]), "n", "unsupported_parameter"),
    (chat(logprobs=1), "logprobs", "invalid_type"),
    (chat(top_logprobs=2), "top_logprobs", "invalid_value"),
    (chat(logprobs=True, top_logprobs=21), "top_logprobs", "invalid_value"),
    (chat(tools=[{"type": "function"}]), "tools[0].function", "missing_required_parameter"),
    (chat(tools=[{"type": "code_interpreter"}]), "tools[0].type", "unsupported_parameter"),
    (chat(functions=[{"name": ""}]), "functions[0].name", "invalid_value"),
    (chat(tool_choice="required"), "tool_choice", "invalid_value"),
    (chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice={"type": "function"}),
     "tool_choice", "invalid_value"),
    (chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "number", "maximum": 1}}}}}], tool_choice="required"),
     "tools[0].function.parameters.properties.x.maximum", "unsupported_schema"),
    (chat(response_format={"type": "xml"}), "response_format.type", "invalid_value"),
    (chat(response_format={"type": "json_schema"}), "response_format.json_schema", "missing_required_parameter"),
    (chat(response_format={"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}),
     "response_format.json_schema.name", "invalid_value"),
    (chat(response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "number",
                                                                                         "minimum": 0}}}),
     "response_format.json_schema.schema.minimum", "unsupported_schema"),
    (chat(response_format="json"), "response_format", "invalid_type"),
    (chat(echo=True), "echo", "unsupported_parameter"),
    (chat(reame=[]), "reame", "invalid_type"),
    (chat(reame={"foo": 1}), "reame.foo", "unknown_parameter"),
]

BAD_COMPLETION: list[tuple[Any, str | None, str]] = [
    ({"model": "m"}, "prompt", "missing_required_parameter"),
    (completion(prompt=None), "prompt", "missing_required_parameter"),
    (completion(prompt=7), "prompt", "invalid_type"),
    (completion(prompt=[]), "prompt", "invalid_value"),
    (completion(prompt=[1, 2, 3]), "prompt", "unsupported_parameter"),
    (completion(prompt=[[1, 2], [3]]), "prompt", "unsupported_parameter"),
    (completion(prompt=["a", 2]), "prompt[1]", "invalid_type"),
    (completion(prompt=["a"] * (MAX_PROMPTS + 1)), "prompt", "invalid_value"),
    (completion(echo="yes"), "echo", "invalid_type"),
    (completion(best_of=2, n=3), "best_of", "invalid_value"),
    (completion(best_of=True), "best_of", "invalid_value"),
    (completion(best_of=9), "best_of", "invalid_value"),
    (completion(best_of=3, stream=True), "best_of", "unsupported_parameter"),
    (completion(suffix="end"), "suffix", "unsupported_parameter"),
    (completion(logprobs=6), "logprobs", "invalid_value"),
    (completion(logprobs=1, echo=True), "logprobs", "unsupported_parameter"),
    (completion(n=9), "n", "invalid_value"),
    (completion(n=0), "n", "invalid_value"),
    (completion(max_tokens=-1), "max_tokens", "invalid_value"),
    (completion(temperature=[1]), "temperature", "invalid_type"),
    (completion(reame={"cache": "yes"}), "reame.cache", "invalid_type"),
    (completion(reame={"chunks": "on"}), "reame.chunks", "invalid_type"),
    (completion(reame={"turbo": True}), "reame.turbo", "unknown_parameter"),
]


@pytest.mark.parametrize(("body", "param", "code"), BAD_CHAT)
def test_bad_chat_body_is_a_400_naming_the_field(body: Any, param: str | None, code: str) -> None:
    with pytest.raises(APIError) as caught:
        parse_chat(body, DEFAULTS)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)
    assert caught.value.type == "invalid_request_error"
    assert caught.value.message


@pytest.mark.parametrize(("body", "param", "code"), BAD_COMPLETION)
def test_bad_completion_body_is_a_400_naming_the_field(body: Any, param: str | None, code: str) -> None:
    with pytest.raises(APIError) as caught:
        parse_completion(body, DEFAULTS)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)


def test_minimal_chat_takes_sampling_defaults_from_config() -> None:
    request = parse_chat({"messages": USER}, DEFAULTS)
    assert request == ChatRequest(
        messages=[ChatMessage("user", "hi")],
        sampling=SamplingParams(
            temperature=DEFAULTS.temperature,
            top_p=DEFAULTS.top_p,
            top_k=DEFAULTS.top_k,
            min_p=DEFAULTS.min_p,
            max_tokens=None,  # chat_max_tokens 0: until the context is full
            repeat_penalty=DEFAULTS.repeat_penalty,
            repeat_last_n=DEFAULTS.repeat_last_n,
        ),
    )


def test_full_chat_maps_every_field() -> None:
    body = {
        "model": "anything/at-all",
        "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
             "name": "ann"},
            {"role": "assistant", "content": None},
            {"role": "tool", "content": "42", "tool_call_id": "x"},
        ],
        "temperature": 0, "top_p": 0.5, "top_k": 7, "min_p": 0.1, "seed": -1,
        "max_tokens": 5, "max_completion_tokens": 9.0, "stop": "END",
        "presence_penalty": -2, "frequency_penalty": 2, "repeat_penalty": 1.1,
        "logit_bias": {"17": -100, "3": 2.5}, "stream": True, "stream_options": {"include_usage": True},
        "n": 1, "logprobs": False, "tools": [], "tool_choice": "none",
        "response_format": {"type": "text"}, "user": "u", "metadata": {"x": 1}, "reame": {},
    }
    request = parse_chat(body, DEFAULTS)
    assert request.messages == [
        ChatMessage("system", "be brief"),
        ChatMessage("user", "ab", "ann", breaks=(1,)),
        ChatMessage("assistant", ""),
        ChatMessage("tool", "42", tool_call_id="x"),
    ]
    s = request.sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.seed) == (0.0, 0.5, 7, 0.1, -1)
    assert s.max_tokens == 9  # max_completion_tokens wins over max_tokens
    assert s.stop == ["END"]
    assert (s.presence_penalty, s.frequency_penalty, s.repeat_penalty) == (-2.0, 2.0, 1.1)
    assert s.logit_bias == [(3, 2.5), (17, -100.0)]
    assert request.stream and request.include_usage
    assert isinstance(s.temperature, float)


def test_explicit_nulls_mean_defaults() -> None:
    body = chat(temperature=None, stop=None, stream=None, stream_options=None, n=None, seed=None,
                max_tokens=None, logit_bias=None, tools=None, reame=None, model=None)
    assert parse_chat(body, DEFAULTS) == parse_chat({"messages": USER}, DEFAULTS)


def test_completion_prompts_and_defaults() -> None:
    request = parse_completion(completion(prompt=["a", "b"], echo=True, stop=["x", "y"]), DEFAULTS)
    assert request == CompletionRequest(
        prompts=["a", "b"],
        sampling=parse_chat(chat(stop=["x", "y"], max_tokens=DEFAULTS.completion_max_tokens), DEFAULTS).sampling,
        echo=True,
    )
    assert request.sampling.max_tokens == DEFAULTS.completion_max_tokens
    single = parse_completion(completion(stream=True, suffix="", best_of=1), DEFAULTS)
    assert single.prompts == ["Once"] and single.stream and not single.include_usage
    assert (single.n, single.best_of) == (1, 1)


def test_completion_n_and_best_of() -> None:
    for fields, expected in [({"n": 3}, (3, 3)), ({"n": 2, "best_of": 5}, (2, 5)),
                             ({"n": 4, "best_of": 4, "stream": True}, (4, 4))]:
        request = parse_completion(completion(**fields), DEFAULTS)
        assert (request.n, request.best_of) == expected


def test_zero_completion_max_tokens_in_config_means_unbounded() -> None:
    defaults = config.load(environ={"REAME_SAMPLING_COMPLETION_MAX_TOKENS": "0"}).sampling
    assert parse_completion(completion(), defaults).sampling.max_tokens is None


def test_cache_switch_defaults_on_and_can_be_turned_off() -> None:
    from reame.gateway.api.validation import parse_chat, parse_completion

    assert parse_chat(chat(), DEFAULTS).options.cache is True
    assert parse_chat(chat(reame={"cache": False}), DEFAULTS).options.cache is False
    assert parse_completion(completion(reame={}), DEFAULTS).options.cache is True


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "prompt"),
        ({"prompt": "doc", "messages": [{"role": "user", "content": "doc"}]}, "prompt"),
        ({"prompt": 5}, "prompt"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"prompt": ""}, "prompt"),
        ({"messages": [{"role": "system", "content": ""}]}, "messages"),
        ([], None),
    ],
)
def test_bad_warm_bodies_name_the_field(body: object, param: str | None) -> None:
    from reame.gateway.api.validation import parse_warm

    with pytest.raises(APIError) as caught:
        parse_warm(body)
    assert caught.value.status == 400
    assert caught.value.param == param


def test_warm_takes_a_prompt_or_messages() -> None:
    from reame.gateway.api.validation import parse_warm

    assert parse_warm({"prompt": "doc"}).prompt == "doc"
    warm = parse_warm({"messages": [{"role": "system", "content": "doc"}]})
    assert warm.messages == [ChatMessage("system", "doc")]
