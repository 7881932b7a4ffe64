"""Tool calling through the whole stack, with the official openai client and the generic fallback.

SmolLM2-135M cannot choose tools sensibly, so the tests force a call (tool_choice
required or named): the grammar then guarantees a well-formed call of an offered
function with arguments valid for its schema, which is what clients depend on.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.harness import Server

pytestmark = pytest.mark.integration

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME: Any = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"hour_offset": {"type": "integer", "minimum": -12,
                                                                        "maximum": 14}},
                       "required": ["hour_offset"]},
    },
}
ASK: Any = [{"role": "user", "content": "What is the weather like in Paris?"}]


def check_weather_call(call: Any) -> dict[str, Any]:
    assert call.id.startswith("call_") and len(call.id) > len("call_")
    assert call.type == "function" and call.function.name == "get_weather"
    arguments: dict[str, Any] = json.loads(call.function.arguments)
    assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit")
    return arguments


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_forced_call_is_a_valid_tool_call(server: Server, choice: Any) -> None:
    tools = [WEATHER] if choice == "required" else [TIME, WEATHER]
    reply = server.client().chat.completions.create(
        model="any", messages=ASK, tools=tools, tool_choice=choice, max_tokens=60, temperature=0,
    )
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls"
    assert message.content is None and message.tool_calls  # one or more (parallel_tool_calls defaults to true)
    for call in message.tool_calls:
        check_weather_call(call)


def test_required_picks_one_of_the_offered_functions(server: Server) -> None:
    reply = server.client().chat.completions.create(
        model="any", messages=[{"role": "user", "content": "What time is it in Tokyo?"}], tools=[WEATHER, TIME],
        tool_choice="required", max_tokens=60, temperature=0.8, seed=2, parallel_tool_calls=False,
    )
    (call,) = reply.choices[0].message.tool_calls or []
    assert call.function.name in ("get_weather", "get_time")  # type: ignore[union-attr]
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    if call.function.name == "get_time":  # type: ignore[union-attr]
        assert -12 <= arguments["hour_offset"] <= 14


def test_a_tool_result_round_trip_is_accepted(server: Server) -> None:
    client = server.client()
    first = client.chat.completions.create(
        model="any", messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=60, temperature=0,
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    history: Any = [
        *ASK,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "clear"})},
    ]
    final = client.chat.completions.create(
        model="any", messages=history, tools=[WEATHER], tool_choice="none", max_tokens=30, temperature=0,
    )
    assert final.choices[0].message.content
    assert final.choices[0].message.tool_calls is None


def test_auto_answers_text_or_a_valid_call(server: Server) -> None:
    reply = server.client().chat.completions.create(
        model="any", messages=ASK, tools=[WEATHER], max_tokens=40, temperature=0,
    )
    choice = reply.choices[0]
    if choice.message.tool_calls:
        assert choice.finish_reason == "tool_calls"
        check_weather_call(choice.message.tool_calls[0])
    else:
        assert choice.message.content and not choice.message.content.startswith("{")


def test_streamed_tool_call_follows_openais_chunks(server: Server) -> None:
    stream = server.client().chat.completions.create(
        model="any", messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=60, temperature=0,
        stream=True, parallel_tool_calls=False,
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += delta.id or ""
                if delta.function is not None:
                    entry["name"] += delta.function.name or ""
                    entry["arguments"] += delta.function.arguments or ""
    assert finish == "tool_calls" and list(calls) == [0]
    assert calls[0]["id"].startswith("call_") and calls[0]["name"] == "get_weather"
    assert set(json.loads(calls[0]["arguments"])) == {"city", "unit"}


def test_unenforceable_parameters_are_a_400_naming_them(server: Server) -> None:
    bad: Any = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "format": "email"}}}}}
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(model="any", messages=ASK, tools=[bad], tool_choice="required")
    body = caught.value.body
    assert isinstance(body, dict) and body["param"] == "tools[0].function.parameters.properties.x.format"


def test_legacy_functions_give_a_function_call(server: Server) -> None:
    body = {"model": "any", "messages": ASK, "functions": [WEATHER["function"]], "max_tokens": 60,
            "function_call": {"name": "get_weather"}, "temperature": 0}
    status, _, answer = server.request("POST", "/v1/chat/completions", json.dumps(body).encode(),
                                       {"Content-Type": "application/json"})
    choice = json.loads(answer)["choices"][0]
    assert status == 200 and choice["finish_reason"] == "function_call"
    assert choice["message"]["function_call"]["name"] == "get_weather"
    assert set(json.loads(choice["message"]["function_call"]["arguments"])) == {"city", "unit"}
    status, _, streamed = server.request("POST", "/v1/chat/completions",
                                         json.dumps({**body, "stream": True}).encode(),
                                         {"Content-Type": "application/json"})
    events = [json.loads(line[6:]) for line in streamed.decode().splitlines()
              if line.startswith("data: {")]
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    arguments = "".join(d["function_call"]["arguments"] for d in deltas if "function_call" in d)
    assert set(json.loads(arguments)) == {"city", "unit"}
    assert events[-1]["choices"][0]["finish_reason"] == "function_call"


# With this wording the default model, greedy, calls get_weather twice (generic fallback: one object a line).
TWO_CITIES: Any = [{"role": "user", "content": "Get the weather for Paris, then for Rome."}]


def test_parallel_calls_come_back_each_with_its_own_id(server: Server) -> None:
    reply = server.client().chat.completions.create(
        model="any", messages=TWO_CITIES, tools=[WEATHER], tool_choice="required", max_tokens=120, temperature=0,
    )
    choice = reply.choices[0]
    calls = choice.message.tool_calls or []
    assert choice.finish_reason == "tool_calls" and len(calls) == 2
    assert calls[0].id != calls[1].id
    assert {check_weather_call(call)["city"] for call in calls} == {"Paris", "Rome"}


def test_parallel_calls_stream_with_their_index_and_id(server: Server) -> None:
    stream = server.client().chat.completions.create(
        model="any", messages=TWO_CITIES, tools=[WEATHER], tool_choice="required", max_tokens=120, temperature=0,
        stream=True,
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += delta.id or ""
                if delta.function is not None:
                    entry["name"] += delta.function.name or ""
                    entry["arguments"] += delta.function.arguments or ""
    assert finish == "tool_calls" and list(calls) == [0, 1]
    assert calls[0]["id"].startswith("call_") and calls[1]["id"].startswith("call_")
    assert calls[0]["id"] != calls[1]["id"]
    assert {json.loads(c["arguments"])["city"] for c in calls.values()} == {"Paris", "Rome"}


def test_parallel_tool_calls_false_makes_exactly_one(server: Server) -> None:
    reply = server.client().chat.completions.create(
        model="any", messages=TWO_CITIES, tools=[WEATHER], tool_choice="required", max_tokens=120, temperature=0,
        parallel_tool_calls=False,
    )
    (call,) = reply.choices[0].message.tool_calls or []
    check_weather_call(call)


def test_two_tool_results_go_back_in_one_turn(server: Server) -> None:
    client = server.client()
    first = client.chat.completions.create(
        model="any", messages=TWO_CITIES, tools=[WEATHER], tool_choice="required", max_tokens=120, temperature=0,
    )
    message = first.choices[0].message
    history: Any = [*TWO_CITIES, message.model_dump(exclude_none=True)]
    for call, sky in zip(message.tool_calls or [], ("clear", "rain"), strict=True):
        history.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"sky": sky})})
    final = client.chat.completions.create(
        model="any", messages=history, tools=[WEATHER], tool_choice="none", max_tokens=30, temperature=0,
    )
    assert final.choices[0].message.content and final.choices[0].message.tool_calls is None
